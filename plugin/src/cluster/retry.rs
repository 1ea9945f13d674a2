//! Transient API failures are retried with backoff, and every retry is said on stderr.
//!
//! A rotation runs for minutes to hours, and rotating the control plane restarts the very API
//! server it talks to: a refused connection, a reset, a timeout, a 5xx or an API-priority 429
//! must not stop it. kube's own retry is off (it would retry silently, and a 429 from an
//! eviction is a PodDisruptionBudget speaking, which the drain reports itself); this layer
//! retries instead, around every request the client sends, and prints each retry with the error
//! and the delay. A request that keeps failing for longer than the retry budget fails with an
//! error saying how long and how often it was tried; the run then stops where it is, and the
//! same command resumes it. Errors that are answers (403, 404, 409, 422, …) are never retried.
//!
//! A server error's body (a small Status) is read, so that each retry says the server's own
//! message, and so that the one 500 that is an answer is known: an eviction of a pod that more
//! than one PodDisruptionBudget selects, which the drain reports itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use kube::client::Body;
use tower::{BoxError, Layer, Service};

use crate::report::{self, Level};

/// How long a failing request is retried by default: long enough for an API server to restart
/// (as it does when its own node is rotated), short enough that a dead cluster is reported.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(120);
const FIRST_DELAY: Duration = Duration::from_millis(500);
const MAX_DELAY: Duration = Duration::from_secs(8);
/// The most of a server error's body that is read for its message (a Status is far smaller).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// What the API server says (500) when asked to evict a pod that more than one
/// PodDisruptionBudget selects: an answer, not a failure.
pub const MULTIPLE_BUDGETS: &str = "more than one PodDisruptionBudget";

/// The body of a response that went through [`Retry`]: the server's own stream, or the bytes of
/// a server error that were read for its message.
pub type RetryBody = UnsyncBoxBody<Bytes, BoxError>;

/// A request that failed transiently for the whole retry budget.
#[derive(Debug, thiserror::Error)]
#[error(
    "{method} {path}: still failing after {attempts} attempts over {elapsed:?} (retried for at most {budget:?}): {last}"
)]
pub struct GaveUp {
    pub method: Method,
    pub path: String,
    pub attempts: u32,
    pub elapsed: Duration,
    pub budget: Duration,
    pub last: String,
}

/// Why an attempt is worth repeating, or `None` when its outcome is final. `message` is the
/// server's own, read from a server error's Status.
pub fn transient<B>(
    method: &Method,
    path: &str,
    result: &Result<Response<B>, BoxError>,
    message: Option<&str>,
) -> Option<String> {
    match result {
        Ok(response) => {
            let status = response.status();
            // An eviction refused with 429 is a PodDisruptionBudget, and one refused with 500
            // for a pod under two budgets is refused for good: the drain says either itself.
            let eviction = *method == Method::POST && path.ends_with("/eviction");
            if eviction
                && status == StatusCode::INTERNAL_SERVER_ERROR
                && message.is_some_and(|m| m.contains(MULTIPLE_BUDGETS))
            {
                return None;
            }
            let retried = (status == StatusCode::TOO_MANY_REQUESTS && !eviction)
                || (status.is_server_error()
                    && status != StatusCode::NOT_IMPLEMENTED
                    && status != StatusCode::HTTP_VERSION_NOT_SUPPORTED);
            retried.then(|| match message {
                Some(m) => format!("the API server answered {status}: {m}"),
                None => format!("the API server answered {status}"),
            })
        }
        Err(error) => transport_failure(error.as_ref()),
    }
}

/// An attempt's response with its body boxed, and the server's message when it is a server
/// error (whose body is read whole: a Status, never a stream).
async fn settle<B>(
    result: Result<Response<B>, BoxError>,
) -> (Result<Response<RetryBody>, BoxError>, Option<String>)
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let response = match result {
        Ok(response) => response,
        Err(e) => return (Err(e), None),
    };
    if !response.status().is_server_error() {
        return (
            Ok(response.map(|b| b.map_err(Into::into).boxed_unsync())),
            None,
        );
    }
    let (parts, body) = response.into_parts();
    let bytes = match Limited::new(body, MAX_ERROR_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        // The connection failed while the body was read: that failure is the outcome.
        Err(e) => return (Err(e), None),
    };
    #[derive(serde::Deserialize)]
    struct Said {
        message: String,
    }
    let message = serde_json::from_slice::<Said>(&bytes)
        .ok()
        .map(|s| s.message)
        .filter(|m| !m.is_empty());
    let body = Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync();
    (Ok(Response::from_parts(parts, body)), message)
}

/// Connection-level failures: refused, reset, closed, timed out. Anything else the HTTP stack
/// reports (a bad certificate, a failing credential plugin) is not transient.
fn transport_failure(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    use std::io::ErrorKind;
    let mut source = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::NotConnected
                    | ErrorKind::BrokenPipe
                    | ErrorKind::TimedOut
                    | ErrorKind::UnexpectedEof
            )
        {
            return Some(super::error_chain(error));
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_closed() || h.is_canceled() || h.is_timeout())
        {
            return Some(super::error_chain(error));
        }
        source = e.source();
    }
    None
}

/// Whether a failed request is final for a watch that would try it again: an answer
/// (forbidden, not found), or a request this layer's retries gave up on. Anything else (a
/// connection cut, refused or reset while the API server restarts, a watch's version gone) is
/// worth another try.
pub fn is_final(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(s) => !(s.code == 410 || s.code == 429 || s.code >= 500),
        other => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(other);
            while let Some(e) = source {
                if e.downcast_ref::<GaveUp>().is_some() {
                    return true;
                }
                source = e.source();
            }
            false
        }
    }
}

/// What a retry tells the operator.
pub type Notify = Arc<dyn Fn(&str) + Send + Sync>;

/// Says retries to the operator (on stderr).
pub fn to_stderr() -> Notify {
    Arc::new(crate::report::say)
}

/// Wraps a client's service with [`Retry`].
#[derive(Clone)]
pub struct RetryLayer {
    budget: Duration,
    first_delay: Duration,
    notify: Notify,
}

impl RetryLayer {
    /// Retries for at most `budget` per request (zero: never).
    pub fn new(budget: Duration, notify: Notify) -> Self {
        RetryLayer {
            budget,
            first_delay: FIRST_DELAY,
            notify,
        }
    }

    /// The first delay (doubling up to 8s); tests shorten it.
    pub fn first_delay(mut self, delay: Duration) -> Self {
        self.first_delay = delay;
        self
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;
    fn layer(&self, inner: S) -> Retry<S> {
        Retry {
            inner: Arc::new(Mutex::new(inner)),
            layer: self.clone(),
        }
    }
}

/// The retrying service. The service it wraps (kube's boxed HTTP stack) cannot be cloned, and
/// a retry calls it again after its first call returned: it is shared, and each attempt takes
/// it only for as long as readying it and starting the call takes.
pub struct Retry<S> {
    inner: Arc<Mutex<S>>,
    layer: RetryLayer,
}

impl<S> Clone for Retry<S> {
    fn clone(&self) -> Self {
        Retry {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

/// Readies `inner` and starts one attempt, holding it only meanwhile.
async fn attempt<S, B>(inner: &Mutex<S>, req: Request<Body>) -> Result<Response<B>, BoxError>
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError>,
{
    let mut req = Some(req);
    let call = futures::future::poll_fn(|cx| {
        let mut service = inner.lock().unwrap_or_else(|e| e.into_inner());
        match service.poll_ready(cx) {
            Poll::Ready(Ok(())) => {
                let req = req.take().expect("called once, when ready");
                Poll::Ready(Ok(service.call(req)))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await?;
    call.await
}

/// A copy of a request for another attempt, when its body can be copied (every body this tool
/// sends can; a streamed one cannot and is sent once).
fn copy(req: &Request<Body>) -> Option<Request<Body>> {
    let body = req.body().try_clone()?;
    let mut copy = Request::new(body);
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    *copy.extensions_mut() = req.extensions().clone();
    Some(copy)
}

impl<S, B> Service<Request<Body>> for Retry<S>
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Send + 'static,
    S::Future: Send,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<RetryBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RetryBody>, BoxError>> + Send>>;

    /// Always ready: each attempt readies the wrapped service itself.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        let layer = self.layer.clone();
        Box::pin(async move {
            let method = req.method().clone();
            let path = req.uri().path().to_string();
            // Kept only for `-vvv`: requests are many.
            let traced = report::enabled(Level::Trace).then(|| req.uri().clone());
            let started = Instant::now();
            let mut delay = layer.first_delay;
            let mut attempts = 1u32;
            let mut req = req;
            loop {
                let next = copy(&req);
                let sent = Instant::now();
                let (result, message) = settle(attempt(&inner, req).await).await;
                if let Some(uri) = &traced {
                    trace_request(&method, uri, &result, sent.elapsed());
                }
                let Some(reason) = transient(&method, &path, &result, message.as_deref()) else {
                    return result;
                };
                let Some(next) = next else {
                    return result;
                };
                let elapsed = started.elapsed();
                if layer.budget.is_zero() {
                    return result;
                }
                if elapsed + delay > layer.budget {
                    return Err(GaveUp {
                        method,
                        path,
                        attempts,
                        elapsed: Duration::from_millis(elapsed.as_millis() as u64),
                        budget: layer.budget,
                        last: reason,
                    }
                    .into());
                }
                let left = layer.budget.saturating_sub(elapsed);
                (layer.notify)(&format!(
                    "warning: {method} {path}: {reason}; retrying in {} (attempt {}, giving up in {}s)",
                    human(delay),
                    attempts + 1,
                    left.as_secs()
                ));
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_DELAY);
                attempts += 1;
                req = next;
            }
        })
    }
}

/// One line per request with `-vvv`: when it was answered, what it was and how long the
/// answer (its headers: a watch streams on) took.
fn trace_request<B>(
    method: &Method,
    uri: &Uri,
    result: &Result<Response<B>, BoxError>,
    took: Duration,
) {
    let target = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let outcome = match result {
        Ok(response) => response.status().as_u16().to_string(),
        Err(e) => format!("failed ({e})"),
    };
    let now = jiff::Timestamp::now().round(jiff::Unit::Millisecond);
    let now = now.unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    report::log(
        Level::Trace,
        &format!(
            "{now} {method} {target} {outcome} in {:.1} ms",
            took.as_secs_f64() * 1000.0
        ),
    );
}

fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests;
