use super::*;

#[test]
fn challenges_are_read_as_registries_write_them() {
    let c = Challenge::parse(
        r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:hooks/a:pull""#,
    );
    assert_eq!(c.scheme, "bearer");
    assert_eq!(c.param("realm"), Some("https://auth.example/token"));
    assert_eq!(c.param("service"), Some("registry.example"));
    assert_eq!(c.param("scope"), Some("repository:hooks/a:pull"));
    let c = Challenge::parse(r#"Basic realm="tests""#);
    assert_eq!(
        (c.scheme.as_str(), c.param("realm")),
        ("basic", Some("tests"))
    );
    let c = Challenge::parse("Bearer realm=https://auth.example/token, service=reg");
    assert_eq!(c.param("realm"), Some("https://auth.example/token"));
    assert_eq!(c.param("service"), Some("reg"));
}

#[test]
fn a_relative_location_is_taken_from_the_registry_s_origin() {
    let parts = |location: &str| {
        let (parts, ()) = http::Response::builder()
            .status(StatusCode::ACCEPTED)
            .header(LOCATION, location)
            .body(())
            .unwrap()
            .into_parts();
        parts
    };
    let url = "http://127.0.0.1:5000/v2/hooks/a/blobs/uploads/";
    assert_eq!(
        redirect_target(url, &parts("/v2/hooks/a/blobs/uploads/u1?_state=x")).unwrap(),
        "http://127.0.0.1:5000/v2/hooks/a/blobs/uploads/u1?_state=x"
    );
    assert_eq!(
        redirect_target(url, &parts("https://storage.example/b?sig=1")).unwrap(),
        "https://storage.example/b?sig=1"
    );
}

/// One request as a loopback server saw it: request line and the `Authorization` value.
type Seen = std::sync::Arc<Mutex<Vec<(String, Option<String>)>>>;

/// Serves `answer(request line, authorization)` (status line and headers, body) on a
/// loopback port, one request per connection; returns the port.
async fn serve(
    seen: Seen,
    answer: impl Fn(&str, Option<&str>, u16) -> (String, Vec<u8>) + Send + Sync + 'static,
) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let answer = std::sync::Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let (seen, answer) = (seen.clone(), answer.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    let mut byte = [0];
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8(head).unwrap();
                let line = head.lines().next().unwrap().to_string();
                let header = |name: &str| {
                    head.lines().find_map(|l| {
                        let (n, v) = l.split_once(':')?;
                        n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                    })
                };
                let length: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
                let mut body = vec![0; length];
                stream.read_exact(&mut body).await.unwrap();
                let authorization = header("authorization");
                let (status, bytes) = answer(&line, authorization.as_deref(), port);
                seen.lock().unwrap().push((line, authorization));
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    bytes.len()
                );
                stream.write_all(head.as_bytes()).await.unwrap();
                stream.write_all(&bytes).await.unwrap();
            });
        }
    });
    port
}

#[tokio::test]
async fn a_bearer_challenge_is_answered_by_the_token_service_and_redirects_leave_credentials_behind()
 {
    const MANIFEST: &[u8] = br#"{"schemaVersion": 2}"#;
    const BLOB: &[u8] = b"\0asm module";
    let basic = basic("pusher", "secret");
    let seen = Seen::default();
    let expected = basic.clone();
    let port = serve(seen.clone(), move |line, authorization, port| {
        let path = line.split(' ').nth(1).unwrap();
        let challenge = format!(
            "401 Unauthorized\r\nwww-authenticate: Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"reg\",scope=\"repository:hooks/a:pull\""
        );
        match (path, authorization) {
            ("/token?service=reg&scope=repository%3Ahooks%2Fa%3Apull", Some(a)) if a == expected => {
                ("200 OK".into(), br#"{"token": "T1"}"#.to_vec())
            }
            (p, Some("Bearer T1")) if p.starts_with("/v2/hooks/a/manifests/v1") => {
                ("200 OK\r\ncontent-type: application/vnd.oci.image.manifest.v1+json".into(), MANIFEST.to_vec())
            }
            ("/v2/hooks/a/blobs/uploads/", Some("Bearer T1")) => (
                format!("202 Accepted\r\nlocation: http://localhost:{port}/v2/hooks/a/blobs/uploads/u1?_state=s"),
                Vec::new(),
            ),
            (p, Some("Bearer T1")) if p.starts_with("/v2/hooks/a/blobs/uploads/u1?_state=s&digest=sha256:") => {
                ("201 Created".into(), Vec::new())
            }
            (p, Some("Bearer T1")) if p.starts_with("/v2/hooks/a/blobs/") => (
                format!("307 Temporary Redirect\r\nlocation: http://localhost:{port}/storage/b1"),
                Vec::new(),
            ),
            ("/storage/b1", None) => ("200 OK".into(), BLOB.to_vec()),
            (p, _) if p.starts_with("/v2/") => (challenge, Vec::new()),
            _ => ("403 Forbidden".into(), Vec::new()),
        }
    })
    .await;
    let credentials = Credentials::Basic {
        user: "pusher".into(),
        password: "secret".into(),
    };
    let registry = Distribution::new(&format!("127.0.0.1:{port}"), "hooks/a", true, credentials);
    let manifest = registry.manifest("v1").await.unwrap();
    assert_eq!(&manifest.bytes[..], MANIFEST);
    assert_eq!(
        manifest.media_type,
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(manifest.digest, sha256_digest(MANIFEST));
    let blob = registry.blob(&sha256_digest(BLOB), 1 << 10).await.unwrap();
    assert_eq!(&blob[..], BLOB);
    // A blob whose bytes are not its digest is refused.
    let e = registry
        .blob(&sha256_digest(b"other"), 1 << 10)
        .await
        .unwrap_err();
    assert!(matches!(e, DistributionError::Failed(_)), "{e}");
    // An upload goes where the registry says, with its credentials, whatever the host name.
    let digest = sha256_digest(BLOB);
    registry
        .push_blob(&digest, Bytes::from_static(BLOB))
        .await
        .unwrap();
    let seen = seen.lock().unwrap().clone();
    let lines: Vec<(&str, Option<&str>)> = (seen.iter())
        .map(|(l, a)| (l.split(' ').nth(1).unwrap(), a.as_deref()))
        .collect();
    assert_eq!(
        lines[..3].iter().map(|l| l.1).collect::<Vec<_>>(),
        [None, Some(basic.as_str()), Some("Bearer T1")]
    );
    // The token is kept: the blob is asked with it at once, and the storage without it.
    assert_eq!(lines[3].1, Some("Bearer T1"));
    assert_eq!(lines[4], ("/storage/b1", None));
    let put = format!("/v2/hooks/a/blobs/uploads/u1?_state=s&digest={digest}");
    assert_eq!(lines.last(), Some(&(put.as_str(), Some("Bearer T1"))));
    // A token service that refuses anonymous access: the pull is refused, naming it.
    let anonymous = Distribution::new(
        &format!("127.0.0.1:{port}"),
        "hooks/a",
        true,
        Credentials::Anonymous,
    );
    let e = anonymous.manifest("v1").await.unwrap_err();
    assert!(
        matches!(&e, DistributionError::Refused(r) if r.contains("/token?")),
        "{e}"
    );
}

#[test]
fn the_registry_s_error_codes_sort_its_refusals() {
    let call = Call::new(Method::GET, "https://r.example/v2/a/manifests/v1".into());
    let body = br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#;
    let e = refusal(&call, StatusCode::NOT_FOUND, body);
    assert!(
        matches!(&e, DistributionError::NotFound(r) if r.contains("MANIFEST_UNKNOWN: manifest unknown")),
        "{e}"
    );
    let body = br#"{"errors":[{"code":"DENIED","message":"no"}]}"#;
    let e = refusal(&call, StatusCode::BAD_REQUEST, body);
    assert!(matches!(e, DistributionError::Refused(_)), "{e}");
    let e = refusal(&call, StatusCode::INTERNAL_SERVER_ERROR, b"oops");
    assert!(matches!(e, DistributionError::Failed(_)), "{e}");
}
