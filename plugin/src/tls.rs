//! What every HTTPS client of the plugin shares (the Kubernetes API, metrics sources, OCI
//! registries): one crypto provider (ring) and the roots a server without a CA of its own is
//! checked against.
//!
//! The roots are the machine's on Linux and Windows (the CA files or the certificate store,
//! `SSL_CERT_FILE`/`SSL_CERT_DIR` first). On macOS they are `SSL_CERT_FILE`'s, else Mozilla's
//! bundled roots: the system keychain is reached only through Apple's frameworks, which a binary
//! linked away from a Mac cannot link against. A cluster's own CA comes from the kubeconfig on
//! every platform, so this only matters for servers with public certificates.

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The crypto provider of every TLS connection.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The roots trusted when a server's CA is not configured. Unreadable entries are left out: a
/// server that needed them fails its handshake with a named certificate error.
pub fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(system_certificates());
    roots
}

#[cfg(not(target_os = "macos"))]
fn system_certificates() -> Vec<CertificateDer<'static>> {
    rustls_native_certs::load_native_certs().certs
}

#[cfg(target_os = "macos")]
fn system_certificates() -> Vec<CertificateDer<'static>> {
    if let Some(file) = std::env::var_os("SSL_CERT_FILE")
        && let Ok(certs) = pem_file_certificates(std::path::Path::new(&file), "SSL_CERT_FILE")
    {
        return certs;
    }
    webpki_root_certs::TLS_SERVER_ROOT_CERTS.to_vec()
}

/// The certificates of a PEM file; an error, naming the file as `what`, when it cannot be read
/// or holds none.
pub fn pem_file_certificates(
    file: &std::path::Path,
    what: &str,
) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read {what} {}: {e}", file.display()))?;
    if certs.is_empty() {
        return Err(format!("{what} {} holds no certificate", file.display()));
    }
    Ok(certs)
}

/// A client configuration trusting `roots`, without a client certificate.
pub fn client_config(roots: RootCertStore) -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// An HTTP and HTTPS connector over `tls`, with Nagle's algorithm off (see
/// cluster/transport.rs: a request's body would otherwise wait for the server's delayed
/// acknowledgement).
pub fn https_connector(
    tls: rustls::ClientConfig,
) -> hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector> {
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp)
}
