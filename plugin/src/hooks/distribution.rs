//! A client of the OCI distribution API, as much of it as hook modules need: read a manifest
//! (by tag or digest), read a blob, upload a blob whole, write a manifest.
//!
//! A registry that answers 401 is asked again with what its challenge asks for: Basic
//! credentials, or a bearer token from its token service (distribution's token
//! authentication, with the docker config's password or identity token, or anonymously).
//! Blob reads follow redirects (registries hand blobs to a storage service), without the
//! credentials when the redirect leaves the registry's host; an upload goes to the location the
//! registry gives, with its credentials, whatever host name that location has.

use std::sync::Mutex;
use std::time::Duration;

use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE};
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sha2::{Digest, Sha256};

/// The manifest types asked for; an index is recognised to be refused by name.
pub const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json";
/// A manifest larger than this is refused (the distribution spec's own advice is 4 MiB).
const MAX_MANIFEST_BYTES: usize = 4 << 20;
/// Redirects a blob read follows.
const MAX_REDIRECTS: usize = 5;

/// Credentials for a registry, from the docker config file.
#[derive(Clone, Debug)]
pub enum Credentials {
    Anonymous,
    Basic {
        user: String,
        password: String,
    },
    /// An OAuth2 refresh token (`docker login` with a registry that issues one).
    IdentityToken(String),
}

/// Why a request failed, sorted by what the operator can do about it.
#[derive(Debug, thiserror::Error)]
pub enum DistributionError {
    #[error("{0}")]
    Unreachable(String),
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Failed(String),
}

/// A manifest as read: its bytes, media type and digest.
#[derive(Debug)]
pub struct Manifest {
    pub bytes: Bytes,
    pub media_type: String,
    pub digest: String,
}

type Connector = TimeoutConnector<hyper_rustls::HttpsConnector<HttpConnector>>;

/// One repository of one registry.
pub struct Distribution {
    /// `https://host[:port]` (`http://` on loopback).
    base: String,
    repository: String,
    credentials: Credentials,
    /// The `Authorization` value a challenge earned, sent from then on.
    authorization: Mutex<Option<String>>,
    http: Client<Connector, Full<Bytes>>,
}

impl Distribution {
    /// A client of `repository` at `registry` (host and port), over plain HTTP when `plain`.
    pub fn new(registry: &str, repository: &str, plain: bool, credentials: Credentials) -> Self {
        let tls = crate::tls::client_config(crate::tls::system_roots());
        let mut connector = TimeoutConnector::new(crate::tls::https_connector(tls));
        connector.set_connect_timeout(Some(Duration::from_secs(10)));
        connector.set_read_timeout(Some(Duration::from_secs(60)));
        connector.set_write_timeout(Some(Duration::from_secs(60)));
        let scheme = if plain { "http" } else { "https" };
        Distribution {
            base: format!("{scheme}://{registry}"),
            repository: repository.to_string(),
            credentials,
            authorization: Mutex::new(None),
            http: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// The manifest `reference` (a tag or a digest) names; a digest reference is checked
    /// against the bytes read.
    pub async fn manifest(&self, reference: &str) -> Result<Manifest, DistributionError> {
        let url = format!("{}/v2/{}/manifests/{reference}", self.base, self.repository);
        let request = Call::new(Method::GET, url).header(ACCEPT, MANIFEST_TYPES);
        let (parts, bytes) = self.call(request, "pull", MAX_MANIFEST_BYTES).await?;
        let digest = sha256_digest(&bytes);
        if reference.starts_with("sha256:") && reference != digest {
            return Err(DistributionError::Failed(format!(
                "the registry answered a manifest whose digest is {digest}"
            )));
        }
        let media_type = (parts.headers.get(CONTENT_TYPE))
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        Ok(Manifest {
            bytes,
            media_type,
            digest,
        })
    }

    /// The blob `digest`, at most `limit` bytes, checked against its digest.
    pub async fn blob(&self, digest: &str, limit: usize) -> Result<Bytes, DistributionError> {
        let mut url = format!("{}/v2/{}/blobs/{digest}", self.base, self.repository);
        for _ in 0..=MAX_REDIRECTS {
            let request = Call::new(Method::GET, url.clone());
            let (parts, bytes) = self.call(request, "pull", limit).await?;
            if parts.status.is_redirection() {
                url = redirect_target(&url, &parts)?;
                continue;
            }
            let actual = sha256_digest(&bytes);
            if actual != digest {
                return Err(DistributionError::Failed(format!(
                    "the blob {digest} read from the registry is {actual}"
                )));
            }
            return Ok(bytes);
        }
        Err(DistributionError::Failed(format!(
            "the blob {digest}: more than {MAX_REDIRECTS} redirects"
        )))
    }

    /// Uploads `bytes` as the blob `digest`, whole (one POST, one PUT).
    pub async fn push_blob(&self, digest: &str, bytes: Bytes) -> Result<(), DistributionError> {
        let start = format!("{}/v2/{}/blobs/uploads/", self.base, self.repository);
        let (parts, _) =
            (self.call(Call::new(Method::POST, start.clone()), "push,pull", 1 << 16)).await?;
        let location = redirect_target(&start, &parts)?;
        let separator = if location.contains('?') { '&' } else { '?' };
        // The upload's location is the registry's, whatever host name it gives.
        let put = Call::new(Method::PUT, format!("{location}{separator}digest={digest}"))
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(bytes)
            .with_credentials();
        self.call(put, "push,pull", 1 << 16).await?;
        Ok(())
    }

    /// Writes `manifest` of `media_type` under `tag`.
    pub async fn push_manifest(
        &self,
        tag: &str,
        manifest: Bytes,
        media_type: &str,
    ) -> Result<(), DistributionError> {
        let url = format!("{}/v2/{}/manifests/{tag}", self.base, self.repository);
        let put = Call::new(Method::PUT, url)
            .header(CONTENT_TYPE, media_type)
            .body(manifest);
        self.call(put, "push,pull", 1 << 16).await?;
        Ok(())
    }

    /// Sends `call`, answering one challenge; a success or a redirect comes back with its
    /// body (at most `limit` bytes), anything else as an error.
    async fn call(
        &self,
        call: Call,
        actions: &str,
        limit: usize,
    ) -> Result<(http::response::Parts, Bytes), DistributionError> {
        let credentialed =
            call.registry_credentials || call.url.starts_with(&format!("{}/", self.base));
        let mut answered = false;
        loop {
            let authorization = credentialed
                .then(|| self.authorization.lock().expect("not poisoned").clone())
                .flatten();
            let (parts, bytes) = self.send(&call, authorization, limit).await?;
            if parts.status == StatusCode::UNAUTHORIZED && credentialed && !answered {
                answered = true;
                let value = self.answer(&parts, actions).await?;
                *self.authorization.lock().expect("not poisoned") = Some(value);
                continue;
            }
            if parts.status.is_success() || parts.status.is_redirection() {
                return Ok((parts, bytes));
            }
            return Err(refusal(&call, parts.status, &bytes));
        }
    }

    async fn send(
        &self,
        call: &Call,
        authorization: Option<String>,
        limit: usize,
    ) -> Result<(http::response::Parts, Bytes), DistributionError> {
        let mut request = http::Request::builder()
            .method(call.method.clone())
            .uri(&call.url);
        for (name, value) in &call.headers {
            request = request.header(name, value);
        }
        if let Some(value) = authorization {
            request = request.header(AUTHORIZATION, value);
        }
        let request = (request.body(Full::new(call.body.clone())))
            .map_err(|e| DistributionError::Failed(format!("{} {}: {e}", call.method, call.url)))?;
        let response = self.http.request(request).await.map_err(|e| {
            DistributionError::Unreachable(format!(
                "{} {}: {}",
                call.method,
                call.url,
                crate::error_chain::error_chain(&e)
            ))
        })?;
        let (parts, body) = response.into_parts();
        let bytes = (Limited::new(body, limit).collect().await)
            .map_err(|e| {
                DistributionError::Failed(format!(
                    "{} {}: reading the answer: {e} (at most {limit} bytes are read)",
                    call.method, call.url
                ))
            })?
            .to_bytes();
        Ok((parts, bytes))
    }

    /// The `Authorization` value the challenge of a 401 asks for.
    async fn answer(
        &self,
        parts: &http::response::Parts,
        actions: &str,
    ) -> Result<String, DistributionError> {
        let header = (parts.headers.get(WWW_AUTHENTICATE))
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let challenge = Challenge::parse(header);
        let refused = |why: &str| DistributionError::Refused(format!("401 Unauthorized: {why}"));
        match (challenge.scheme.as_str(), &self.credentials) {
            ("basic", Credentials::Basic { user, password }) => Ok(basic(user, password)),
            ("basic", _) => Err(refused("the registry asks for a user and password")),
            ("bearer", credentials) => {
                let realm = challenge
                    .param("realm")
                    .ok_or_else(|| refused("the bearer challenge names no token service"))?;
                let scope = challenge.param("scope").map_or_else(
                    || format!("repository:{}:{actions}", self.repository),
                    str::to_string,
                );
                let service = challenge.param("service").unwrap_or_default();
                self.token(realm, service, &scope, credentials).await
            }
            _ => Err(refused(&format!("unknown challenge {header:?}"))),
        }
    }

    /// A bearer token from the token service at `realm`.
    async fn token(
        &self,
        realm: &str,
        service: &str,
        scope: &str,
        credentials: &Credentials,
    ) -> Result<String, DistributionError> {
        let query = |pairs: &[(&str, &str)]| {
            let mut form = form_urlencoded::Serializer::new(String::new());
            for (name, value) in pairs {
                form.append_pair(name, value);
            }
            form.finish()
        };
        let call = match credentials {
            Credentials::IdentityToken(token) => Call::new(Method::POST, realm.to_string())
                .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Bytes::from(query(&[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", token),
                    ("service", service),
                    ("scope", scope),
                    ("client_id", "rollout-ext"),
                ]))),
            _ => {
                let separator = if realm.contains('?') { '&' } else { '?' };
                let url = format!(
                    "{realm}{separator}{}",
                    query(&[("service", service), ("scope", scope)])
                );
                match credentials {
                    Credentials::Basic { user, password } => {
                        Call::new(Method::GET, url).header(AUTHORIZATION, &basic(user, password))
                    }
                    _ => Call::new(Method::GET, url),
                }
            }
        };
        let (parts, bytes) = self.send(&call, None, 1 << 20).await?;
        if !parts.status.is_success() {
            return Err(match refusal(&call, parts.status, &bytes) {
                DistributionError::NotFound(reason) => DistributionError::Failed(reason),
                other => other,
            });
        }
        #[derive(serde::Deserialize)]
        struct Answer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let answer: Answer = serde_json::from_slice(&bytes).map_err(|e| {
            DistributionError::Failed(format!("the token service {realm} answered no token: {e}"))
        })?;
        answer
            .token
            .or(answer.access_token)
            .map(|token| format!("Bearer {token}"))
            .ok_or_else(|| {
                DistributionError::Failed(format!("the token service {realm} answered no token"))
            })
    }
}

/// A request, kept to be sent again after a challenge.
struct Call {
    method: Method,
    url: String,
    headers: Vec<(http::HeaderName, String)>,
    body: Bytes,
    /// Sent with the registry's credentials even on another host name (an upload's location).
    registry_credentials: bool,
}

impl Call {
    fn new(method: Method, url: String) -> Call {
        Call {
            method,
            url,
            headers: Vec::new(),
            body: Bytes::new(),
            registry_credentials: false,
        }
    }

    fn with_credentials(mut self) -> Call {
        self.registry_credentials = true;
        self
    }

    fn header(mut self, name: http::HeaderName, value: &str) -> Call {
        self.headers.push((name, value.to_string()));
        self
    }

    fn body(mut self, body: Bytes) -> Call {
        self.body = body;
        self
    }
}

/// A `WWW-Authenticate` challenge: its scheme (lower case) and parameters.
struct Challenge {
    scheme: String,
    params: Vec<(String, String)>,
}

impl Challenge {
    fn parse(header: &str) -> Challenge {
        let (scheme, rest) = header.trim().split_once(' ').unwrap_or((header.trim(), ""));
        let mut params = Vec::new();
        let mut rest = rest.trim();
        while let Some((name, after)) = rest.split_once('=') {
            let name = name
                .trim()
                .trim_start_matches(',')
                .trim()
                .to_ascii_lowercase();
            let after = after.trim_start();
            let (value, next) = match after.strip_prefix('"') {
                Some(quoted) => match quoted.find('"') {
                    Some(end) => (&quoted[..end], &quoted[end + 1..]),
                    None => (quoted, ""),
                },
                None => after.split_once(',').unwrap_or((after, "")),
            };
            params.push((name, value.to_string()));
            rest = next.trim_start().trim_start_matches(',');
        }
        Challenge {
            scheme: scheme.to_ascii_lowercase(),
            params,
        }
    }

    fn param(&self, name: &str) -> Option<&str> {
        (self.params.iter())
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// `sha256:HEX` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The absolute URL of a response's `Location`, relative to `url`.
fn redirect_target(url: &str, parts: &http::response::Parts) -> Result<String, DistributionError> {
    let location = (parts.headers.get(LOCATION))
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            DistributionError::Failed(format!("{url}: {} without a Location", parts.status))
        })?;
    if location.contains("://") {
        return Ok(location.to_string());
    }
    let origin_end = url
        .find("://")
        .and_then(|at| url[at + 3..].find('/').map(|slash| at + 3 + slash))
        .unwrap_or(url.len());
    Ok(format!("{}{location}", &url[..origin_end]))
}

/// The error of a failed answer, with the registry's own error codes and messages.
fn refusal(call: &Call, status: StatusCode, body: &[u8]) -> DistributionError {
    #[derive(serde::Deserialize)]
    struct Envelope {
        errors: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        code: String,
        #[serde(default)]
        message: String,
    }
    let codes: Vec<Entry> = serde_json::from_slice::<Envelope>(body)
        .map(|e| e.errors)
        .unwrap_or_default();
    let detail = (codes.iter())
        .map(|e| format!("{}: {}", e.code, e.message))
        .collect::<Vec<_>>()
        .join("; ");
    let reason = format!(
        "{} {} answered {status}{}",
        call.method,
        call.url,
        if detail.is_empty() {
            String::new()
        } else {
            format!(" ({detail})")
        }
    );
    let has = |wanted: &[&str]| codes.iter().any(|e| wanted.contains(&e.code.as_str()));
    if matches!(status.as_u16(), 401 | 403) || has(&["UNAUTHORIZED", "DENIED"]) {
        DistributionError::Refused(reason)
    } else if status == StatusCode::NOT_FOUND
        || has(&["MANIFEST_UNKNOWN", "NAME_UNKNOWN", "BLOB_UNKNOWN"])
    {
        DistributionError::NotFound(reason)
    } else {
        DistributionError::Failed(reason)
    }
}

#[cfg(test)]
mod tests;
