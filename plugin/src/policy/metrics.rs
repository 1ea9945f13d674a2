//! The `metricsSources` section of a policy: the Prometheus servers gates may query, and which
//! hook may query which (`hooks[].metrics`). Checked at load; asking them is
//! `crate::metrics`'s job.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{Located, PolicyError, parse_duration, valid_hook_name};

/// How long a query may take when the source sets no `timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_TIMEOUT: Duration = Duration::from_secs(300);

/// A metrics source, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSource {
    pub name: String,
    /// `http://` or `https://`, with no trailing `/`: queries go to `{url}/api/v1/query`.
    pub url: String,
    pub timeout: Duration,
    /// Read at every query, so a rotated token is picked up.
    pub bearer_token_file: Option<PathBuf>,
    /// The CA that signs the server's certificate; the system's roots when absent.
    pub ca_cert_file: Option<PathBuf>,
    /// Line of the source's entry, for errors found when it is first used.
    pub line: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawSource {
    name: String,
    url: Spanned<String>,
    timeout: Option<Spanned<String>>,
    bearer_token_file: Option<String>,
    ca_cert_file: Option<String>,
}

impl Located<'_> {
    /// The sources, each checked; a name given twice is an error.
    pub(super) fn metrics_sources(
        &self,
        raw: Vec<Spanned<RawSource>>,
        base: &Path,
    ) -> Result<Vec<MetricsSource>, PolicyError> {
        let mut sources: Vec<MetricsSource> = Vec::new();
        for s in raw {
            let name = &s.value.name;
            if !valid_hook_name(name) {
                let message = format!(
                    "metrics source name {name:?}: expected lowercase letters, digits and '-'"
                );
                return Err(self.of(&s, message));
            }
            if sources.iter().any(|o| &o.name == name) {
                return Err(self.of(&s, format!("metrics source {name:?} is listed twice")));
            }
            let url = &s.value.url;
            let checked = check_url(&url.value).map_err(|m| {
                self.of(
                    url,
                    format!("metrics source {name:?}: url {:?}: {m}", url.value),
                )
            })?;
            let timeout = match &s.value.timeout {
                None => DEFAULT_TIMEOUT,
                Some(t) => {
                    let d = parse_duration(&t.value).map_err(|m| self.of(t, m))?;
                    if d.is_zero() || d > MAX_TIMEOUT {
                        let message = format!(
                            "metrics source {name:?}: timeout {:?}: expected more than 0 and at most 5m",
                            t.value
                        );
                        return Err(self.of(t, message));
                    }
                    d
                }
            };
            sources.push(MetricsSource {
                name: name.clone(),
                url: checked,
                timeout,
                bearer_token_file: s.value.bearer_token_file.as_ref().map(|f| base.join(f)),
                ca_cert_file: s.value.ca_cert_file.as_ref().map(|f| base.join(f)),
                line: s.referenced.line() as u32,
            });
        }
        Ok(sources)
    }

    /// A hook's `metrics`: names of defined sources, each once.
    pub(super) fn grants(
        &self,
        hook: &str,
        metrics: Option<Spanned<Vec<String>>>,
        sources: &[MetricsSource],
    ) -> Result<Vec<String>, PolicyError> {
        let Some(metrics) = metrics else {
            return Ok(Vec::new());
        };
        for (i, name) in metrics.value.iter().enumerate() {
            if !sources.iter().any(|s| &s.name == name) {
                let defined: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
                let message = format!(
                    "hook {hook:?} is granted metrics source {name:?}, which metricsSources does not define ({})",
                    if defined.is_empty() {
                        "it defines none".to_string()
                    } else {
                        format!("defined: {}", defined.join(", "))
                    }
                );
                return Err(self.of(&metrics, message));
            }
            if metrics.value[..i].contains(name) {
                let message = format!("hook {hook:?} lists metrics source {name:?} twice");
                return Err(self.of(&metrics, message));
            }
        }
        Ok(metrics.value)
    }
}

/// An `http://` or `https://` URL with a host and no query: the base queries are made under.
fn check_url(text: &str) -> Result<String, String> {
    let Some((scheme, _)) = text.split_once("://") else {
        return Err("expected an http:// or https:// URL".into());
    };
    if !matches!(scheme, "http" | "https") {
        return Err(format!(
            "the scheme {scheme:?} is not allowed: expected http or https"
        ));
    }
    let uri: http::Uri = text.parse().map_err(|e| format!("not a URL ({e})"))?;
    let Some(authority) = uri.authority() else {
        return Err("expected a host".into());
    };
    if authority.as_str().contains('@') {
        return Err("credentials in the URL are not allowed: use bearerTokenFile".into());
    }
    if uri.query().is_some() || text.contains('#') {
        return Err("expected no query string or fragment".into());
    }
    Ok(text.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::check_url;

    #[test]
    fn only_http_urls_with_a_host_are_sources() {
        assert_eq!(
            check_url("http://prom.monitoring:9090/"),
            Ok("http://prom.monitoring:9090".into())
        );
        assert_eq!(
            check_url("https://h/prometheus"),
            Ok("https://h/prometheus".into())
        );
        for (bad, why) in [
            ("file:///etc/passwd", "scheme \"file\""),
            ("unix:///run/prom.sock", "scheme \"unix\""),
            ("prom:9090", "http://"),
            ("/api/v1/query", "http:// or https://"),
            ("http://user:pw@h:9090", "credentials"),
            ("http://h:9090/?x=1", "query string"),
            ("http://h/prom#x", "fragment"),
        ] {
            let err = check_url(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
