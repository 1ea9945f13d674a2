//! The retry layer against a scripted server.

use super::*;
use std::collections::VecDeque;

type Outcome = Result<(StatusCode, String), std::io::ErrorKind>;

/// A scripted server: each call takes the next outcome and records the request's method.
#[derive(Clone)]
struct Scripted {
    outcomes: Arc<Mutex<VecDeque<Outcome>>>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Scripted {
    /// Answers with empty bodies.
    fn new(outcomes: Vec<Result<StatusCode, std::io::ErrorKind>>) -> Self {
        Self::with_bodies(
            (outcomes.into_iter())
                .map(|o| o.map(|status| (status, String::new())))
                .collect(),
        )
    }

    fn with_bodies(outcomes: Vec<Outcome>) -> Self {
        Scripted {
            outcomes: Arc::new(Mutex::new(outcomes.into())),
            seen: Arc::default(),
        }
    }
}

/// A Status saying `message`, as the API server sends it with an error.
fn said(code: u16, message: &str) -> String {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}).to_string()
}

async fn body_of(response: Response<RetryBody>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

impl Service<Request<Body>> for Scripted {
    type Response = Response<String>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<String>, BoxError>> + Send>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, req: Request<Body>) -> Self::Future {
        self.seen
            .lock()
            .unwrap()
            .push(format!("{} {}", req.method(), req.uri().path()));
        let outcome = self.outcomes.lock().unwrap().pop_front().expect("scripted");
        Box::pin(async move {
            match outcome {
                Ok((status, body)) => {
                    let mut response = Response::new(body);
                    *response.status_mut() = status;
                    Ok(response)
                }
                Err(kind) => Err(Box::new(std::io::Error::new(kind, "scripted")) as BoxError),
            }
        })
    }
}

fn layer(budget: Duration) -> (RetryLayer, Arc<Mutex<Vec<String>>>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let record = lines.clone();
    let notify: Notify = Arc::new(move |l| record.lock().unwrap().push(l.to_string()));
    (
        RetryLayer::new(budget, notify).first_delay(Duration::from_millis(1)),
        lines,
    )
}

fn request(method: Method, path: &str) -> Request<Body> {
    let mut req = Request::new(Body::from(b"{}".to_vec()));
    *req.method_mut() = method;
    *req.uri_mut() = path.parse().unwrap();
    req
}

#[tokio::test]
async fn transient_failures_are_retried_visibly_until_an_answer() {
    use std::io::ErrorKind::*;
    let server = Scripted::new(vec![
        Err(ConnectionRefused),
        Err(ConnectionReset),
        Ok(StatusCode::SERVICE_UNAVAILABLE),
        Ok(StatusCode::TOO_MANY_REQUESTS),
        Err(TimedOut),
        Ok(StatusCode::OK),
    ]);
    let (layer, lines) = layer(Duration::from_secs(60));
    let mut retry = layer.layer(server.clone());
    let response = retry
        .call(request(Method::GET, "/api/v1/nodes"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(server.seen.lock().unwrap().len(), 6);
    let lines = lines.lock().unwrap();
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert!(
        lines[0].starts_with(
            "warning: GET /api/v1/nodes: scripted; retrying in 1ms (attempt 2, giving up in"
        ),
        "{}",
        lines[0]
    );
    assert!(lines[2].contains("the API server answered 503 Service Unavailable"));
    assert!(
        lines[4].contains("retrying in 16ms (attempt 6"),
        "{}",
        lines[4]
    );
}

#[tokio::test]
async fn answers_are_not_retried() {
    for status in [
        StatusCode::FORBIDDEN,
        StatusCode::NOT_FOUND,
        StatusCode::CONFLICT,
        StatusCode::UNPROCESSABLE_ENTITY,
        StatusCode::NOT_IMPLEMENTED,
    ] {
        let server = Scripted::new(vec![Ok(status)]);
        let (layer, lines) = layer(Duration::from_secs(60));
        let response = layer
            .layer(server.clone())
            .call(request(Method::DELETE, "/api/v1/nodes/n1"))
            .await
            .unwrap();
        assert_eq!(response.status(), status);
        assert_eq!(server.seen.lock().unwrap().len(), 1);
        assert!(lines.lock().unwrap().is_empty());
    }
    // Nor is another kind of failure (here: a permission error reading a credential).
    let server = Scripted::new(vec![Err(std::io::ErrorKind::PermissionDenied)]);
    let (layer, lines) = layer(Duration::from_secs(60));
    let result = layer
        .layer(server.clone())
        .call(request(Method::GET, "/api/v1/nodes"))
        .await;
    assert!(result.is_err());
    assert!(lines.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_eviction_refused_by_a_budget_is_left_to_the_drain() {
    let server = Scripted::new(vec![Ok(StatusCode::TOO_MANY_REQUESTS)]);
    let (layer, lines) = layer(Duration::from_secs(60));
    let response = layer
        .layer(server.clone())
        .call(request(
            Method::POST,
            "/api/v1/namespaces/ns/pods/web-1/eviction",
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(lines.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_eviction_of_a_pod_under_two_budgets_is_an_answer_with_its_message() {
    let refused = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";
    let server = Scripted::with_bodies(vec![Ok((
        StatusCode::INTERNAL_SERVER_ERROR,
        said(500, refused),
    ))]);
    let (retry, lines) = layer(Duration::from_secs(60));
    let response = retry
        .layer(server.clone())
        .call(request(
            Method::POST,
            "/api/v1/namespaces/ns/pods/web-1/eviction",
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(lines.lock().unwrap().is_empty());
    assert_eq!(server.seen.lock().unwrap().len(), 1);
    // The body read for its message reaches the caller whole.
    assert_eq!(body_of(response).await, said(500, refused));

    // Any other 500, of an eviction too, is retried, and each retry says the server's words.
    let server = Scripted::with_bodies(vec![
        Ok((
            StatusCode::INTERNAL_SERVER_ERROR,
            said(500, "etcdserver: leader changed"),
        )),
        Ok((StatusCode::CREATED, "{}".into())),
    ]);
    let (retry, lines) = layer(Duration::from_secs(60));
    let response = retry
        .layer(server.clone())
        .call(request(
            Method::POST,
            "/api/v1/namespaces/ns/pods/web-1/eviction",
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(body_of(response).await, "{}");
    let lines = lines.lock().unwrap();
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].contains(
            "the API server answered 500 Internal Server Error: etcdserver: leader changed; retrying"
        ),
        "{}",
        lines[0]
    );
}

#[tokio::test]
async fn it_gives_up_after_the_budget_with_a_clear_error() {
    let server = Scripted::new(vec![Err(std::io::ErrorKind::ConnectionRefused); 100]);
    let (layer, lines) = layer(Duration::from_millis(40));
    let error = layer
        .layer(server.clone())
        .call(request(Method::PATCH, "/api/v1/nodes/n1"))
        .await
        .unwrap_err();
    let attempts = server.seen.lock().unwrap().len();
    assert!((3..10).contains(&attempts), "{attempts}");
    assert_eq!(lines.lock().unwrap().len(), attempts - 1);
    let message = error.to_string();
    assert!(
        message.starts_with(&format!(
            "PATCH /api/v1/nodes/n1: still failing after {attempts} attempts over "
        )) && message.ends_with("ms (retried for at most 40ms): scripted"),
        "{message}"
    );
}

#[tokio::test]
async fn a_zero_budget_never_retries() {
    let server = Scripted::new(vec![Ok(StatusCode::SERVICE_UNAVAILABLE)]);
    let (layer, lines) = layer(Duration::ZERO);
    let response = layer
        .layer(server.clone())
        .call(request(Method::GET, "/api/v1/nodes"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(lines.lock().unwrap().is_empty());
}
