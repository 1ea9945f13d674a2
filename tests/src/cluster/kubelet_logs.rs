//! The kubelet's log endpoint, for runner pods: the API server fetches a pod's output from the
//! kubelet of its node (`GET /containerLogs/NAMESPACE/POD/CONTAINER[?follow=true]`, over TLS,
//! at the port the node's status names), and this answers from the output of the runner
//! processes ([`RunnerPods`]), following a running one until its process ends. The API server
//! of the test control plane checks no kubelet certificate, so a self-signed one serves.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::runner_pods::RunnerPods;

/// Starts the endpoint on a free loopback port (certificate and key written into `dir`); its
/// port.
pub async fn start(dir: &Path, runners: Arc<RunnerPods>) -> anyhow::Result<u16> {
    std::fs::create_dir_all(dir)?;
    let (cert, key) = (dir.join("kubelet.crt"), dir.join("kubelet.key"));
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=simulated-kubelet", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .context("openssl makes the kubelet's certificate")?;
    anyhow::ensure!(made.status.success(), "openssl: {made:?}");
    let certs = CertificateDer::pem_file_iter(&cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(&key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, runners) = (acceptor.clone(), runners.clone());
            tokio::spawn(async move {
                if let Ok(stream) = acceptor.accept(stream).await {
                    let _ = serve(stream, &runners).await;
                }
            });
        }
    });
    Ok(port)
}

/// Answers one request: the output of the runner pod it names, chunk by chunk.
async fn serve<S>(mut stream: S, runners: &RunnerPods) -> anyhow::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 << 10 {
        if stream.read(&mut byte).await? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let target = head.split_whitespace().nth(1).unwrap_or_default();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let follow = query.split('&').any(|q| q == "follow=true");
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let output = match parts.as_slice() {
        ["containerLogs", ns, pod, _container] => runners.output_of(ns, pod),
        _ => None,
    };
    let Some((file, ended)) = output else {
        stream
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await?;
        return Ok(());
    };
    stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        .await?;
    let mut sent = 0;
    loop {
        // Whether the process had ended before this read: then what is read is all there is.
        let done = ended();
        let text = std::fs::read(&file).unwrap_or_default();
        if text.len() > sent {
            let chunk = &text[sent..];
            stream
                .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                .await?;
            stream.write_all(chunk).await?;
            stream.write_all(b"\r\n").await?;
            stream.flush().await?;
            sent = text.len();
        }
        if !follow || done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stream.write_all(b"0\r\n\r\n").await?;
    stream.shutdown().await?;
    Ok(())
}
