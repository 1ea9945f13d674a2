//! The HTTP stack the Kubernetes client runs on: kube's own layers (the server's address, the
//! kubeconfig's credentials and TLS, impersonation headers, timeouts) over a TCP connector with
//! Nagle's algorithm off.
//!
//! kube's stack leaves Nagle's algorithm on, and then each new connection's first request waits
//! for the server's delayed acknowledgement of the TLS handshake's last message: about 40 ms on
//! Linux, for every connection a run opens (kube-rs/kube#2056). client-go, like everything Go's
//! `net` package connects, turns it off; so do we.

use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::Config;
use kube::client::{Body, ClientBuilder, ConfigExt};
use tower::{BoxError, Layer, ServiceBuilder};

use super::retry::RetryLayer;

/// A client for `config`, each request going through `retry`.
pub fn client(config: Config, retry: &RetryLayer) -> Result<kube::Client, kube::Error> {
    // A proxy takes kube's own path: its connector, or its error when this build has none.
    if config.proxy_url.is_some() {
        return Ok(ClientBuilder::try_from(config)?.with_layer(retry).build());
    }
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    let mut connector = TimeoutConnector::new(config.rustls_https_connector_with_connector(tcp)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(kube::Client::new(
        retry.layer(service),
        config.default_namespace.clone(),
    ))
}
