//! The HTTP stack the Kubernetes client runs on: kube's own layers (the server's address, the
//! kubeconfig's credentials, impersonation headers) over our TLS connector with the kubeconfig's
//! timeouts and Nagle's algorithm off.
//!
//! The TLS settings are read here rather than by kube's `rustls-tls` feature: that feature
//! verifies through the operating system's verifier, which on macOS is Apple's Security
//! framework, and a binary linked away from a Mac cannot link it (see crate::tls for the roots
//! used instead). What the kubeconfig says is honoured as kube and client-go honour it: the
//! cluster's CA (re-read each minute when it is a file, as in a pod, to follow its rotation),
//! `insecure-skip-tls-verify`, `tls-server-name`, and a client certificate from files, inline
//! data or an exec plugin.
//!
//! kube's stack leaves Nagle's algorithm on, and then each new connection's first request waits
//! for the server's delayed acknowledgement of the TLS handshake's last message: about 40 ms on
//! Linux, for every connection a run opens (kube-rs/kube#2056). client-go, like everything Go's
//! `net` package connects, turns it off; so do we.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::Config;
use kube::client::{Body, ClientBuilder, ConfigExt};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tower::{BoxError, Layer, ServiceBuilder};

use super::retry::RetryLayer;

/// Why no client could be made from the kubeconfig's settings.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("the cluster's certificate authority {0}")]
    Authority(String),
    #[error("the client certificate {0}")]
    Identity(String),
    #[error("the exec plugin {command:?} (users[].user.exec): {reason}")]
    Exec { command: String, reason: String },
    #[error("tls-server-name {0:?} is not a valid server name")]
    ServerName(String),
}

/// A client for `config`, each request going through `retry`.
pub fn client(config: Config, retry: &RetryLayer) -> Result<kube::Client, TransportError> {
    // A proxy takes kube's own path, which says that this build has no proxy support.
    if config.proxy_url.is_some() {
        return Ok(ClientBuilder::try_from(config)?.with_layer(retry).build());
    }
    let auth = config.auth_layer()?;
    // kube's layer answers nothing for an exec plugin that gives a client certificate: the
    // certificate is then ours to present.
    let exec_identity = match (&auth, &config.auth_info.exec) {
        (None, Some(exec)) => Some(exec_certificate(exec)?),
        _ => None,
    };
    let tls = tls_config(&config, exec_identity)?;
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    let mut https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = ServerName::try_from(name.clone())
            .map_err(|_| TransportError::ServerName(name.clone()))?;
        https = https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let mut connector = TimeoutConnector::new(https.enable_http1().wrap_connector(tcp));
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(auth)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(kube::Client::new(
        retry.layer(service),
        config.default_namespace.clone(),
    ))
}

/// A client certificate and its key.
struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

/// The TLS settings of `config`: how the server is verified, and the certificate presented.
fn tls_config(
    config: &Config,
    exec_identity: Option<Identity>,
) -> Result<rustls::ClientConfig, TransportError> {
    let provider = crate::tls::provider();
    let verifier: Arc<dyn ServerCertVerifier> = if config.accept_invalid_certs {
        Arc::new(AnyCertificate(provider.clone()))
    } else if let Some(file) = &config.root_cert_file {
        Arc::new(ReloadingAuthority::new(file.clone())?)
    } else if let Some(ders) = &config.root_cert {
        let certs = ders.iter().map(|der| CertificateDer::from(der.clone()));
        authority_verifier(certs.collect()).map_err(TransportError::Authority)?
    } else {
        let roots = Arc::new(crate::tls::system_roots());
        WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| TransportError::Authority(format!("(the system's roots): {e}")))?
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match exec_identity.map_or_else(|| file_identity(config), |identity| Ok(Some(identity)))? {
        Some(Identity { chain, key }) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| TransportError::Identity(format!("is not usable: {e}"))),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// A verifier trusting exactly `certs`.
fn authority_verifier(
    certs: Vec<CertificateDer<'static>>,
) -> Result<Arc<WebPkiServerVerifier>, String> {
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| format!("is not usable: {e}"))?;
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), crate::tls::provider())
        .build()
        .map_err(|e| format!("is not usable: {e}"))
}

/// The kubeconfig's client certificate and key: inline data (base64) or files, both or
/// neither.
fn file_identity(config: &Config) -> Result<Option<Identity>, TransportError> {
    use secrecy::ExposeSecret;
    let user = &config.auth_info;
    let cert = inline_or_file(
        user.client_certificate_data.as_deref(),
        user.client_certificate.as_deref(),
        "client-certificate",
    )?;
    let key_data = user.client_key_data.as_ref().map(|k| k.expose_secret());
    let key = inline_or_file(key_data, user.client_key.as_deref(), "client-key")?;
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(TransportError::Identity(
            "has no key: the user sets client-certificate without client-key".into(),
        )),
        (None, Some(_)) => Err(TransportError::Identity(
            "is missing: the user sets client-key without client-certificate".into(),
        )),
        (Some(cert), Some(key)) => identity(&cert, &key).map(Some),
    }
}

/// The bytes of `data` (base64) or else of `file`; the error names the kubeconfig field.
fn inline_or_file(
    data: Option<&str>,
    file: Option<&str>,
    field: &str,
) -> Result<Option<Vec<u8>>, TransportError> {
    use base64::Engine;
    let unreadable = |reason: String| TransportError::Identity(format!("({field}): {reason}"));
    if let Some(data) = data {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| unreadable(format!("{field}-data is not base64: {e}")))?;
        return Ok(Some(decoded));
    }
    file.map(|file| std::fs::read(file).map_err(|e| unreadable(format!("cannot read {file}: {e}"))))
        .transpose()
}

/// A certificate chain and a key from their PEM texts.
fn identity(cert: &[u8], key: &[u8]) -> Result<Identity, TransportError> {
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TransportError::Identity(format!("is not PEM: {e}")))?;
    if chain.is_empty() {
        return Err(TransportError::Identity("holds no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
        TransportError::Identity(format!(
            "has no usable key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"
        ))
    })?;
    Ok(Identity { chain, key })
}

/// The client certificate an exec plugin gives, running it as kube and client-go do
/// (`KUBERNETES_EXEC_INFO`, its env and args, stdin and stderr left to it when interactive).
fn exec_certificate(exec: &kube::config::ExecConfig) -> Result<Identity, TransportError> {
    use kube::config::ExecInteractiveMode;
    let command = exec.command.clone().unwrap_or_default();
    let failed = |reason: String| TransportError::Exec {
        command: command.clone(),
        reason,
    };
    let mut run = std::process::Command::new(&command);
    run.args(exec.args.iter().flatten());
    for pair in exec.env.iter().flatten() {
        if let (Some(name), Some(value)) = (pair.get("name"), pair.get("value")) {
            run.env(name, value);
        }
    }
    let interactive = exec.interactive_mode != Some(ExecInteractiveMode::Never);
    run.stdin(if interactive {
        std::process::Stdio::inherit()
    } else {
        std::process::Stdio::null()
    });
    if interactive {
        run.stderr(std::process::Stdio::inherit());
    }
    let mut spec = serde_json::json!({ "interactive": interactive });
    if exec.provide_cluster_info
        && let Some(cluster) = &exec.cluster
    {
        spec["cluster"] = serde_json::to_value(cluster).unwrap_or_default();
    }
    let info = serde_json::json!({
        "apiVersion": exec.api_version,
        "kind": "ExecCredential",
        "spec": spec,
    });
    run.env("KUBERNETES_EXEC_INFO", info.to_string());
    for name in exec.drop_env.iter().flatten() {
        run.env_remove(name);
    }
    let out = run
        .output()
        .map_err(|e| failed(format!("cannot start: {e}")))?;
    if !out.status.success() {
        return Err(failed(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let credential: ExecCredential = serde_saphyr::from_slice(&out.stdout)
        .map_err(|e| failed(format!("its answer is not an ExecCredential: {e}")))?;
    match credential.status {
        Some(ExecStatus {
            client_certificate_data: Some(cert),
            client_key_data: Some(key),
        }) => identity(cert.as_bytes(), key.as_bytes()),
        _ => Err(failed(
            "its answer has neither a token nor a client certificate and key".into(),
        )),
    }
}

/// The part of an exec plugin's answer read here (kube reads the token).
#[derive(serde::Deserialize)]
struct ExecCredential {
    status: Option<ExecStatus>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecStatus {
    client_certificate_data: Option<String>,
    client_key_data: Option<String>,
}

/// Verifies against the CA file, read again when a minute has passed since the last read: a
/// pod's `ca.crt` changes when the cluster's CA rotates. A read that fails keeps the last roots.
#[derive(Debug)]
struct ReloadingAuthority {
    file: PathBuf,
    current: RwLock<(Arc<WebPkiServerVerifier>, Instant)>,
}

impl ReloadingAuthority {
    const EVERY: Duration = Duration::from_secs(60);

    fn new(file: PathBuf) -> Result<ReloadingAuthority, TransportError> {
        let verifier = Self::load(&file).map_err(TransportError::Authority)?;
        Ok(ReloadingAuthority {
            file,
            current: RwLock::new((verifier, Instant::now())),
        })
    }

    fn load(file: &Path) -> Result<Arc<WebPkiServerVerifier>, String> {
        authority_verifier(crate::tls::pem_file_certificates(file, "file")?)
    }

    fn verifier(&self) -> Arc<WebPkiServerVerifier> {
        {
            let current = self.current.read().unwrap_or_else(|e| e.into_inner());
            if current.1.elapsed() < Self::EVERY {
                return current.0.clone();
            }
        }
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        if current.1.elapsed() >= Self::EVERY {
            if let Ok(fresh) = Self::load(&self.file) {
                current.0 = fresh;
            }
            current.1 = Instant::now();
        }
        current.0.clone()
    }
}

impl ServerCertVerifier for ReloadingAuthority {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.verifier().verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier().supported_verify_schemes()
    }
}

/// `insecure-skip-tls-verify: true`: any certificate is taken, its signatures still checked.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Self-signed P-256 CAs and a server certificate for server.example issued by the second,
    // valid until 2126 (made with `openssl req -x509` and `openssl x509 -req`).
    const CA_1: &str = "-----BEGIN CERTIFICATE-----
MIIBlzCCAT2gAwIBAgIUWwsBQA+TSdX1kwCNojgyFZ7W5SAwCgYIKoZIzj0EAwIw
IDEeMBwGA1UEAwwVcm9sbG91dC1leHQtdGVzdC1jYS0xMCAXDTI2MTEyOTE3MTQ1
MFoYDzIxMjYxMTA1MTcxNDUwWjAgMR4wHAYDVQQDDBVyb2xsb3V0LWV4dC10ZXN0
LWNhLTEwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQxvkof6ddA4po2HQmq1cFK
aGXNqa5NGOZkcxcerxlYcJIT7Aa+1THZJZX90CCPitI7Jk7Dd8IzLTkkutw2qJFo
o1MwUTAdBgNVHQ4EFgQUCiPfhstUYfCnfNF6SFhx5cPqOFYwHwYDVR0jBBgwFoAU
CiPfhstUYfCnfNF6SFhx5cPqOFYwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQD
AgNIADBFAiEAx8UIaX6QegH/0HaTwIYs6qOTOdRdopkhfAM0nSaHEpoCIGPjJTHc
e9QFkjWuf2ZrNJB1yi2SdwptubdbUe6MH3lX
-----END CERTIFICATE-----
";
    const CA_2: &str = "-----BEGIN CERTIFICATE-----
MIIBlzCCAT2gAwIBAgIURRV8lLNuHMgX+Tbc8CxIVkTEZkcwCgYIKoZIzj0EAwIw
IDEeMBwGA1UEAwwVcm9sbG91dC1leHQtdGVzdC1jYS0yMCAXDTI2MTEyOTE3MTQ1
NFoYDzIxMjYxMTA1MTcxNDU0WjAgMR4wHAYDVQQDDBVyb2xsb3V0LWV4dC10ZXN0
LWNhLTIwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAARdiSuXa3vDhm0mJhMpygHG
WUQ6yIpaQ+hHCu4/njF2WXKPpY9ZLPBkdJyh2hk/3kcMktdLRu6GYyAbU2CUKEcQ
o1MwUTAdBgNVHQ4EFgQULYzita1aS2oKwUkW+ToSLiltdxwwHwYDVR0jBBgwFoAU
LYzita1aS2oKwUkW+ToSLiltdxwwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQD
AgNIADBFAiBvgFDm3X+ASth70qRJnvE627Nec3M8W67DU0tAwQpCQQIhAKqzwUOW
PxZ6Yp4Ea/pRhJuwfRsAq/qwHEiAQPJSYRYj
-----END CERTIFICATE-----
";
    const LEAF_OF_CA_2: &str = "-----BEGIN CERTIFICATE-----
MIIBpTCCAUugAwIBAgIUV+MrzUP0UUA+RQfQmOrETZep4mwwCgYIKoZIzj0EAwIw
IDEeMBwGA1UEAwwVcm9sbG91dC1leHQtdGVzdC1jYS0yMCAXDTI2MTEyOTE3MTQ1
NFoYDzIxMjYxMTA1MTcxNDU0WjAZMRcwFQYDVQQDDA5zZXJ2ZXIuZXhhbXBsZTBZ
MBMGByqGSM49AgEGCCqGSM49AwEHA0IABKosSiz+sNqbZX15XDy/4Af0xyAwVtB/
WihAhs/uEqT5QtRF38sglvjqy5cRIO8RilDcVChvzP8lRA0YMrj+pjmjaDBmMBkG
A1UdEQQSMBCCDnNlcnZlci5leGFtcGxlMAkGA1UdEwQCMAAwHQYDVR0OBBYEFKYP
VpxafbICartN5x/tQqNQQxG8MB8GA1UdIwQYMBaAFC2M4rWtWktqCsFJFvk6Ei4p
bXccMAoGCCqGSM49BAMCA0gAMEUCIQDECGc/UvLMirIkr5axR6iTbBy21AgusIYl
VK5xnx7brgIgMJfTlRDXRZIum2ledL+DD1zZNuQ+9xUzSn93qxYGtGg=
-----END CERTIFICATE-----
";

    fn accepts(verifier: &ReloadingAuthority) -> bool {
        let leaf = CertificateDer::from_pem_slice(LEAF_OF_CA_2.as_bytes()).unwrap();
        let name = ServerName::try_from("server.example").unwrap();
        (verifier.verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())).is_ok()
    }

    /// As if the last read were more than a minute ago.
    fn age(verifier: &ReloadingAuthority) {
        let mut current = verifier.current.write().unwrap();
        current.1 = Instant::now() - ReloadingAuthority::EVERY - Duration::from_secs(1);
    }

    #[test]
    fn a_rotated_ca_file_is_trusted_within_a_minute_and_a_missing_one_keeps_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ca.crt");
        std::fs::write(&file, CA_1).unwrap();
        let verifier = ReloadingAuthority::new(file.clone()).unwrap();
        assert!(!accepts(&verifier), "a server of another CA");
        // Rotated: read again only once a minute has passed.
        std::fs::write(&file, CA_2).unwrap();
        assert!(!accepts(&verifier));
        age(&verifier);
        assert!(accepts(&verifier));
        // Gone (or unreadable): the last roots stay.
        std::fs::remove_file(&file).unwrap();
        age(&verifier);
        assert!(accepts(&verifier));
        // A file that cannot serve from the start is an error naming it.
        let e = ReloadingAuthority::new(file.clone())
            .unwrap_err()
            .to_string();
        assert!(e.contains("ca.crt"), "{e}");
    }
}
