//! Queries of real Prometheus servers (HTTP API v1), over the HTTP and TLS stack the Kubernetes
//! client already uses.
//!
//! A query runs on a thread of its own with a small runtime: hook calls are synchronous and may
//! come from inside the executor's runtime, where blocking on another future is not allowed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

use super::{Metrics, MetricsError, Point, RESPONSE_LIMIT, Sample, Series, TimeRange, seconds};
use crate::policy::{MetricsSource, Policy, PolicyError};

/// The servers of a policy's `metricsSources`.
pub struct Prometheus {
    servers: BTreeMap<String, Server>,
}

struct Server {
    spec: MetricsSource,
    tls: Arc<rustls::ClientConfig>,
}

impl Prometheus {
    /// Clients for the policy's `metricsSources`; a CA file that cannot be read or holds no
    /// certificate, or a token file that cannot be read, is an error at the source's line.
    pub fn new(policy: &Policy) -> Result<Prometheus, PolicyError> {
        let mut servers = BTreeMap::new();
        for spec in &policy.metrics_sources {
            let fail = |m: String| PolicyError {
                file: policy.source.clone(),
                line: spec.line,
                column: 0,
                message: format!("metrics source {:?}: {m}", spec.name),
            };
            let tls = tls_config(spec).map_err(fail)?;
            if let Some(file) = &spec.bearer_token_file {
                std::fs::read_to_string(file).map_err(|e| {
                    fail(format!(
                        "cannot read bearerTokenFile {}: {e}",
                        file.display()
                    ))
                })?;
            }
            servers.insert(
                spec.name.clone(),
                Server {
                    spec: spec.clone(),
                    tls: Arc::new(tls),
                },
            );
        }
        Ok(Prometheus { servers })
    }

    fn server(&self, source: &str) -> Result<&Server, MetricsError> {
        self.servers.get(source).ok_or_else(|| {
            MetricsError::NotAllowed(format!("metrics source {source:?} is not defined"))
        })
    }
}

impl Metrics for Prometheus {
    fn instant(
        &self,
        source: &str,
        promql: &str,
        time: Option<i64>,
        wait: Duration,
    ) -> Result<Vec<Sample>, MetricsError> {
        let server = self.server(source)?;
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("query", promql);
        if let Some(t) = time {
            form.append_pair("time", &t.to_string());
        }
        let data = server.ask("query", form.finish(), wait)?;
        server.instant_answer(data)
    }

    fn range(
        &self,
        source: &str,
        promql: &str,
        range: TimeRange,
        wait: Duration,
    ) -> Result<Vec<Series>, MetricsError> {
        let server = self.server(source)?;
        range
            .instants()
            .map_err(|m| server.error(MetricsError::BadQuery, &m))?;
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("query", promql)
            .append_pair("start", &range.start.to_string())
            .append_pair("end", &range.end.to_string())
            .append_pair("step", &range.step.to_string());
        let data = server.ask("query_range", form.finish(), wait)?;
        match data {
            Data::Matrix(series) if series.iter().any(|s| s.histograms.is_some()) => {
                Err(server.error(MetricsError::Failed, HISTOGRAMS))
            }
            Data::Matrix(series) => Ok(series.into_iter().map(RawSeries::into_series).collect()),
            other => Err(server.unexpected(&other)),
        }
    }
}

impl Server {
    /// `what` of this source, as a [`MetricsError`] of kind `kind`.
    fn error(&self, kind: fn(String) -> MetricsError, what: &str) -> MetricsError {
        kind(format!(
            "metrics source {} ({}): {what}",
            self.spec.name, self.spec.url
        ))
    }

    fn unexpected(&self, data: &Data) -> MetricsError {
        self.error(
            MetricsError::Failed,
            &format!("unexpected {} answer", data.kind()),
        )
    }

    fn instant_answer(&self, data: Data) -> Result<Vec<Sample>, MetricsError> {
        match data {
            Data::Vector(samples) => samples
                .into_iter()
                .map(|s| {
                    let ValuePair(time, value) = s
                        .value
                        .ok_or_else(|| self.error(MetricsError::Failed, HISTOGRAMS))?;
                    Ok(Sample {
                        labels: s.metric.into_iter().collect(),
                        time,
                        value: number(&value),
                    })
                })
                .collect(),
            Data::Scalar(ValuePair(time, value)) => Ok(vec![Sample {
                labels: Vec::new(),
                value: number(&value),
                time,
            }]),
            other => Err(self.unexpected(&other)),
        }
    }

    /// POSTs the form to `/api/v1/{endpoint}` and reads the answer's `data`, within the
    /// shorter of `wait` and the source's timeout.
    fn ask(&self, endpoint: &str, form: String, wait: Duration) -> Result<Data, MetricsError> {
        let limit = wait.min(self.spec.timeout);
        let by_hook = wait < self.spec.timeout;
        if limit.is_zero() {
            return Err(self.error(
                MetricsError::Timeout,
                "no time left before the hook's deadline",
            ));
        }
        let token = match &self.spec.bearer_token_file {
            Some(file) => Some(
                std::fs::read_to_string(file)
                    .map_err(|e| {
                        self.error(
                            MetricsError::Failed,
                            &format!("cannot read bearerTokenFile {}: {e}", file.display()),
                        )
                    })?
                    .trim()
                    .to_string(),
            ),
            None => None,
        };
        let url = format!("{}/api/v1/{endpoint}", self.spec.url);
        let query = || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| {
                    self.error(
                        MetricsError::Failed,
                        &format!("cannot start a runtime: {e}"),
                    )
                })?;
            let answer = runtime.block_on(async {
                tokio::time::timeout(limit, self.post(&url, form, token))
                    .await
                    .unwrap_or_else(|_| {
                        let whose = if by_hook {
                            "the hook's deadline"
                        } else {
                            "its timeout"
                        };
                        Err(self.error(
                            MetricsError::Timeout,
                            &format!("no answer within {} ({whose})", seconds(limit)),
                        ))
                    })
            });
            // Dropping the runtime would wait for its blocking work, such as a name lookup
            // still retrying: leave that behind rather than hold the hook past its deadline.
            runtime.shutdown_background();
            answer
        };
        let answer = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("metrics-query".into())
                .spawn_scoped(scope, query)
                .map_err(|e| {
                    self.error(MetricsError::Failed, &format!("cannot start a thread: {e}"))
                })?
                .join()
                .unwrap_or_else(|_| Err(self.error(MetricsError::Failed, "the query panicked")))
        })?;
        self.read(answer)
    }

    async fn post(
        &self,
        url: &str,
        form: String,
        token: Option<String>,
    ) -> Result<(http::StatusCode, Bytes), MetricsError> {
        let connector = crate::tls::https_connector((*self.tls).clone());
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
        let mut request = http::Request::post(url).header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        );
        if let Some(token) = token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(Full::new(Bytes::from(form))).map_err(|e| {
            self.error(
                MetricsError::Failed,
                &format!("cannot build the request: {e}"),
            )
        })?;
        let response = client.request(request).await.map_err(|e| {
            self.error(
                MetricsError::Unreachable,
                &format!("unreachable: {}", causes(&e)),
            )
        })?;
        let status = response.status();
        let too_large = || {
            self.error(
                MetricsError::TooLarge,
                &format!(
                    "the answer is larger than the {} MiB the host reads",
                    RESPONSE_LIMIT >> 20
                ),
            )
        };
        let declared = response
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > RESPONSE_LIMIT as u64) {
            return Err(too_large());
        }
        let body = Limited::new(response.into_body(), RESPONSE_LIMIT)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    too_large()
                } else {
                    self.error(
                        MetricsError::Unreachable,
                        &format!("the answer broke off: {e}"),
                    )
                }
            })?;
        Ok((status, body.to_bytes()))
    }

    /// Prometheus' envelope: `data` on success, its own error type and words otherwise.
    fn read(&self, (status, body): (http::StatusCode, Bytes)) -> Result<Data, MetricsError> {
        let envelope: Envelope = match serde_json::from_slice(&body) {
            Ok(e) => e,
            Err(_) if !status.is_success() => {
                let text = String::from_utf8_lossy(&body[..body.len().min(200)])
                    .trim()
                    .to_string();
                return Err(self.error(MetricsError::Failed, &format!("HTTP {status}: {text}")));
            }
            Err(e) => {
                return Err(self.error(
                    MetricsError::Failed,
                    &format!("not a Prometheus answer: {e}"),
                ));
            }
        };
        match (envelope.status.as_str(), envelope.data) {
            ("success", Some(data)) if status.is_success() => Ok(data),
            _ => {
                let message = envelope.error.unwrap_or_else(|| format!("HTTP {status}"));
                let kind: fn(String) -> MetricsError = match envelope.error_type.as_deref() {
                    Some("bad_data" | "execution") => MetricsError::BadQuery,
                    Some("timeout" | "canceled") => MetricsError::Timeout,
                    _ => MetricsError::Failed,
                };
                Err(self.error(kind, &message))
            }
        }
    }
}

/// The TLS settings of a source: its CA file's certificates, or the system's roots.
fn tls_config(spec: &MetricsSource) -> Result<rustls::ClientConfig, String> {
    let roots = match &spec.ca_cert_file {
        Some(file) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in crate::tls::pem_file_certificates(file, "caCertFile")? {
                roots
                    .add(cert)
                    .map_err(|e| format!("caCertFile {}: {e}", file.display()))?;
            }
            roots
        }
        // The machine's roots; none found leaves https sources failing with a named error.
        None => crate::tls::system_roots(),
    };
    Ok(crate::tls::client_config(roots))
}

/// An error and its causes, `: `-joined: hyper's own message alone says little.
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}

/// `NaN`, `+Inf` and `-Inf` as Prometheus writes them, and plain numbers.
fn number(text: &str) -> f64 {
    match text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        _ => text.parse().unwrap_or(f64::NAN),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    status: String,
    data: Option<Data>,
    error_type: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum Data {
    Vector(Vec<RawSample>),
    Matrix(Vec<RawSeries>),
    Scalar(ValuePair),
    String(serde::de::IgnoredAny),
}

impl Data {
    fn kind(&self) -> &'static str {
        match self {
            Data::Vector(_) => "vector",
            Data::Matrix(_) => "matrix",
            Data::Scalar(_) => "scalar",
            Data::String(_) => "string",
        }
    }
}

/// `[time, "value"]`.
#[derive(Deserialize)]
struct ValuePair(f64, String);

/// A sample of a native histogram has `histogram` instead of `value`: not read.
#[derive(Deserialize)]
struct RawSample {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    value: Option<ValuePair>,
}

#[derive(Deserialize)]
struct RawSeries {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    #[serde(default)]
    values: Vec<ValuePair>,
    /// Native histogram points, which have no single value: not read.
    #[serde(default)]
    histograms: Option<serde::de::IgnoredAny>,
}

const HISTOGRAMS: &str = "native histogram samples have no single value: aggregate them in the query (histogram_quantile, histogram_count, ...)";

impl RawSeries {
    fn into_series(self) -> Series {
        Series {
            labels: self.metric.into_iter().collect(),
            points: self
                .values
                .into_iter()
                .map(|ValuePair(time, v)| Point {
                    time,
                    value: number(&v),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> Server {
        let spec = MetricsSource {
            name: "prom".into(),
            url: "http://127.0.0.1:9".into(),
            timeout: Duration::from_secs(1),
            bearer_token_file: None,
            ca_cert_file: None,
            line: 3,
        };
        Server {
            tls: Arc::new(tls_config(&spec).unwrap()),
            spec,
        }
    }

    fn read(status: u16, body: &str) -> Result<Data, MetricsError> {
        server().read((
            http::StatusCode::from_u16(status).unwrap(),
            Bytes::from(body.to_string()),
        ))
    }

    #[test]
    fn reads_vectors_scalars_and_matrices() {
        let data = read(
            200,
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"app"},"value":[1700000000.5,"0.25"]},{"metric":{},"value":[1700000000.5,"NaN"]}]}}"#,
        )
        .unwrap();
        let samples = server().instant_answer(data).unwrap();
        assert_eq!(samples[0].labels, [("job".to_string(), "app".to_string())]);
        assert_eq!((samples[0].value, samples[0].time), (0.25, 1_700_000_000.5));
        assert!(samples[1].value.is_nan());

        let data = read(
            200,
            r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"+Inf"]}}"#,
        )
        .unwrap();
        let samples = server().instant_answer(data).unwrap();
        assert_eq!(samples.len(), 1);
        assert!(samples[0].labels.is_empty() && samples[0].value == f64::INFINITY);

        let data = read(200, r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":"b"},"values":[[1,"1"],[2,"2"]]}]}}"#).unwrap();
        let Data::Matrix(series) = data else {
            panic!("a matrix")
        };
        let series = series.into_iter().next().unwrap().into_series();
        assert_eq!(
            series.points,
            [
                Point {
                    time: 1.0,
                    value: 1.0
                },
                Point {
                    time: 2.0,
                    value: 2.0
                }
            ]
        );

        let data = read(
            200,
            r#"{"status":"success","data":{"resultType":"string","result":[1,"x"]}}"#,
        )
        .unwrap();
        assert!(
            matches!(server().instant_answer(data), Err(MetricsError::Failed(m)) if m.contains("unexpected string answer"))
        );
    }

    #[test]
    fn errors_keep_prometheus_words_and_name_the_source() {
        let bad = read(
            400,
            r#"{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected \")\""}"#,
        );
        assert_eq!(
            bad.err(),
            Some(MetricsError::BadQuery(
                "metrics source prom (http://127.0.0.1:9): 1:5: parse error: unexpected \")\""
                    .into()
            ))
        );
        let slow = read(
            503,
            r#"{"status":"error","errorType":"timeout","error":"query timed out"}"#,
        );
        assert!(matches!(slow, Err(MetricsError::Timeout(m)) if m.ends_with("query timed out")));
        let proxy = read(502, "<html>Bad Gateway</html>");
        assert!(
            matches!(proxy, Err(MetricsError::Failed(m)) if m.contains("HTTP 502 Bad Gateway: <html>"))
        );
        let junk = read(200, "hello");
        assert!(
            matches!(junk, Err(MetricsError::Failed(m)) if m.contains("not a Prometheus answer"))
        );
    }

    #[test]
    fn a_closed_port_is_unreachable() {
        let Err(err) = server().ask("query", "query=up".into(), Duration::from_secs(5)) else {
            panic!("nothing listens on port 9")
        };
        assert!(
            matches!(&err, MetricsError::Unreachable(m) if m.starts_with("metrics source prom (http://127.0.0.1:9): unreachable:")),
            "{err:?}"
        );
    }

    #[test]
    fn a_missing_ca_file_names_the_source() {
        let spec = MetricsSource {
            ca_cert_file: Some("/nonexistent/ca.pem".into()),
            ..server().spec
        };
        let policy = Policy {
            source: "policy.yaml".into(),
            metrics_sources: vec![spec],
            ..Default::default()
        };
        let Err(e) = Prometheus::new(&policy) else {
            panic!("a missing CA file is an error")
        };
        assert!(
            e.to_string().starts_with(
                "policy.yaml:3: metrics source \"prom\": cannot read caCertFile /nonexistent/ca.pem"
            ),
            "{e}"
        );
    }
}
