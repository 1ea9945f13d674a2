//! Metrics for the gate tests: a real Prometheus on loopback (2.42 from Debian's package,
//! cached by `tests/cluster/install-server.sh prometheus 2.42.0 9090`), an application endpoint whose error counter
//! the test controls, and stand-in servers that misbehave as a hostile or broken source would.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::cluster::Processes;

const PROMETHEUS_VERSION: &str = "2.42.0";
/// Requests the application serves between two scrapes.
pub const REQUESTS_PER_SCRAPE: u64 = 10;

/// The cached Prometheus server binary.
pub fn prometheus_binary() -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("ROLLOUT_EXT_PROMETHEUS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache")
                });
            cache.join(format!("rollout-ext/prometheus-{PROMETHEUS_VERSION}"))
        }
    };
    let binary = dir.join("bin/prometheus");
    if !binary.exists() {
        bail!(
            "{} is missing: run `bash tests/cluster/install-server.sh prometheus 2.42.0 9090` (the README's test command does)",
            binary.display()
        );
    }
    Ok(binary)
}

/// Serves each connection of `listener` on a thread of its own: `answer` gets the request's
/// path and writes the whole response.
fn serve(listener: TcpListener, answer: impl Fn(&str, &mut TcpStream) + Send + Sync + 'static) {
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let answer = answer.clone();
            std::thread::spawn(move || {
                if let Some(path) = read_request(&mut stream) {
                    answer(&path, &mut stream);
                }
            });
        }
    });
}

/// Reads one request (headers and body) and returns its path.
fn read_request(stream: &mut TcpStream) -> Option<String> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut first = String::new();
    reader.read_line(&mut first).ok()?;
    let path = first.split_whitespace().nth(1)?.to_string();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(path)
}

fn respond(stream: &mut TcpStream, content_type: &str, body: &str) {
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// An application's `/metrics`: every scrape counts [`REQUESTS_PER_SCRAPE`] more requests and
/// the errors the test sets, so the error ratio is `errors / REQUESTS_PER_SCRAPE`.
pub struct AppMetrics {
    pub addr: SocketAddr,
    errors_per_scrape: Arc<AtomicU64>,
}

impl AppMetrics {
    pub fn start(errors_per_scrape: u64) -> anyhow::Result<AppMetrics> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let errors = Arc::new(AtomicU64::new(errors_per_scrape));
        let (requests_total, errors_total) =
            (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let per_scrape = errors.clone();
        serve(listener, move |_, stream| {
            let requests = requests_total.fetch_add(REQUESTS_PER_SCRAPE, Ordering::SeqCst)
                + REQUESTS_PER_SCRAPE;
            let add = per_scrape.load(Ordering::SeqCst);
            let errors = errors_total.fetch_add(add, Ordering::SeqCst) + add;
            let body = format!(
                "# TYPE app_requests_total counter\napp_requests_total {requests}\n# TYPE app_errors_total counter\napp_errors_total {errors}\n"
            );
            respond(stream, "text/plain; version=0.0.4", &body);
        });
        Ok(AppMetrics {
            addr,
            errors_per_scrape: errors,
        })
    }

    /// Errors from the next scrape on.
    pub fn set_errors_per_scrape(&self, errors: u64) {
        self.errors_per_scrape.store(errors, Ordering::SeqCst);
    }

    /// A handle that sets the errors from another thread (a run's event callback).
    pub fn errors(&self) -> Arc<AtomicU64> {
        self.errors_per_scrape.clone()
    }
}

/// The error ratio of [`AppMetrics`] over the last few scrapes, as an SLO query writes it.
pub const ERROR_RATIO: &str = "sum(rate(app_errors_total[3s])) / sum(rate(app_requests_total[3s]))";

/// A Prometheus scraping one target every second, on a port of its own.
pub struct Prometheus {
    processes: Processes,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` (job `app`) and waits until it has scraped it.
    pub fn start(target: SocketAddr) -> anyhow::Result<Prometheus> {
        let binary = prometheus_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("rollout-ext-prometheus-")
            .tempdir()?;
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n  - job_name: app\n    static_configs:\n      - targets: [\"{target}\"]\n"
            ),
        )?;
        let [port] = crate::cluster::free_ports()?;
        let processes = Processes::new();
        let args: Vec<String> = vec![
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.path().join("data").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
        ];
        processes.spawn(
            "prometheus",
            &binary,
            &args,
            &dir.path().join("prometheus.log"),
        )?;
        let prometheus = Prometheus {
            processes,
            port,
            _dir: dir,
        };
        prometheus.wait_until_up()?;
        Ok(prometheus)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The value of an instant query with one sample; none when it has none.
    pub fn value(&self, promql: &str) -> anyhow::Result<Option<f64>> {
        self.value_at(promql, None)
    }

    /// The value of an instant query at `time` (seconds since the Unix epoch; none: now).
    fn value_at(&self, promql: &str, time: Option<f64>) -> anyhow::Result<Option<f64>> {
        let at = time.map(|t| format!("&time={t:.3}")).unwrap_or_default();
        let body = get(
            self.port,
            &format!("/api/v1/query?query={}{at}", encode(promql)),
        )?;
        let answer: serde_json::Value = serde_json::from_str(&body).context("a JSON answer")?;
        Ok(answer["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|v| v.parse().ok()))
    }

    /// Waits until `promql` has had a value that `ok` accepts for the last two seconds, so that
    /// a gate checking the last few whole seconds finds it too.
    pub fn wait_for(&self, promql: &str, ok: impl Fn(f64) -> bool) -> anyhow::Result<f64> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_secs_f64();
            let before = self.value_at(promql, Some(now - 2.0))?;
            if let (Some(v), Some(before)) = (self.value_at(promql, Some(now))?, before)
                && ok(v)
                && ok(before)
            {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!("{promql} did not reach the expected value within 60s");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stops the server (as a crash would): its port refuses connections from now on.
    pub fn stop(&self) {
        self.processes.kill("prometheus");
    }

    /// Starts the server again on the same port and data, and waits until it scrapes again.
    pub fn restart(&self) -> anyhow::Result<()> {
        self.processes.restart("prometheus")?;
        self.wait_until_up()
    }

    fn wait_until_up(&self) -> anyhow::Result<()> {
        // Service discovery hands Prometheus its first target after about 5 seconds.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.processes.check_alive()?;
            if self.value("up{job=\"app\"}").ok().flatten() == Some(1.0) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("Prometheus did not scrape its target within 60s");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A GET on loopback, the body of a 200 answer.
fn get(port: u16, path: &str) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").context("an HTTP answer")?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or(""));
    }
    Ok(body.to_string())
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A metrics source that answers every query with `bytes` bytes of JSON-looking text and no
/// declared length, as a hostile or broken server might.
pub fn huge_source(bytes: usize) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    serve(listener, move |_, stream| {
        let _ = stream.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[",
        );
        let chunk = vec![b' '; 64 << 10];
        let mut sent = 0;
        while sent < bytes {
            if stream.write_all(&chunk).is_err() {
                return; // The reader gave up, as it should.
            }
            sent += chunk.len();
        }
        let _ = stream.write_all(b"]}}");
    });
    Ok(addr)
}

/// A metrics source that answers (an empty vector) only after `delay`.
pub fn slow_source(delay: Duration) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    serve(listener, move |_, stream| {
        std::thread::sleep(delay);
        respond(
            stream,
            "application/json",
            r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
        );
    });
    Ok(addr)
}
