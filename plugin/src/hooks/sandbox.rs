//! What one call's store holds: the WASI context that grants nothing, the memory limit, the
//! frozen clock, and the host functions a hook may call (the `instances` resource, `log`,
//! `list-objects`, the metrics queries, `estimates`, `others-disrupting`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::ResourceLimiter;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

use super::{GUEST_LOG_LINES, ObjectSource, convert, wit, wit_host};
use crate::metrics::{Metrics, MetricsError, Sample, TimeRange};
use crate::plan::hook::{Candidate, Instances, Timing};
use crate::plan::ledger::Disruption;
use crate::policy::ContextResource;
use crate::report;

/// Per-call store data.
pub(super) struct CallState {
    pub(super) wasi: WasiCtx,
    pub(super) table: ResourceTable,
    pub(super) limiter: MemoryLimiter,
    pub(super) hook: String,
    /// What the hook is told when it asks `estimates`.
    pub(super) timing: Timing,
    /// What the hook is told when it asks `others-disrupting`.
    pub(super) others: Vec<Disruption>,
    pub(super) log_lines: usize,
    pub(super) objects: Arc<dyn ObjectSource>,
    pub(super) allowed: Arc<Vec<ContextResource>>,
    /// The first read of objects the policy does not grant: the call fails, whatever it
    /// answers.
    pub(super) objects_denied: Option<String>,
    pub(super) metrics: MetricsAccess,
}

/// What a call may query, and what its queries ran into.
pub(super) struct MetricsAccess {
    pub(super) sources: Arc<dyn Metrics>,
    /// The sources the policy grants the hook.
    pub(super) granted: Arc<Vec<String>>,
    /// When the call's time is up: a query may take what is left.
    pub(super) deadline: Instant,
    /// Sources asked that the policy does not grant: the call fails, whatever it answers.
    pub(super) denied: Option<String>,
    /// The source whose query ran into the call's deadline: the call times out, naming it.
    pub(super) cut_off: Option<String>,
}

impl MetricsAccess {
    /// Runs `query` against `source` if the hook may ask it, within the call's time left.
    fn ask<T>(
        &mut self,
        hook: &str,
        source: &str,
        query: impl FnOnce(&dyn Metrics, Duration) -> Result<T, MetricsError>,
    ) -> Result<T, MetricsError> {
        if !self.granted.iter().any(|g| g == source) {
            // The name is the guest's: keep what is shown of it short.
            let shown = super::truncate(source, 100);
            let message = format!(
                "hook {hook} may not query metrics source {shown:?}: the policy does not grant it (the hook's `metrics`)"
            );
            self.denied.get_or_insert(shown);
            return Err(MetricsError::NotAllowed(message));
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        let answer = query(self.sources.as_ref(), left);
        // A query that used up the call's time: the call has timed out, whatever it answers.
        let out_of_time =
            self.deadline.saturating_duration_since(Instant::now()) < Duration::from_millis(50);
        if matches!(answer, Err(MetricsError::Timeout(_))) && out_of_time {
            self.cut_off = Some(source.to_string());
        }
        answer
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl wit::Host for CallState {}

impl CallState {
    /// The candidate at `index` of a list the hook was given; none past the end.
    fn candidate(
        &self,
        list: &Resource<Instances>,
        index: u32,
    ) -> wasmtime::Result<Option<&Candidate>> {
        Ok(self.table.get(list)?.get(index as usize))
    }

    /// The instances of `list` from `start`, at most `count` of them (none past the end).
    fn window(
        &self,
        list: &Resource<Instances>,
        start: u32,
        count: u32,
    ) -> wasmtime::Result<&[Candidate]> {
        let list = self.table.get(list)?;
        let start = (start as usize).min(list.len());
        let end = start.saturating_add(count as usize).min(list.len());
        Ok(&list[start..end])
    }
}

impl wit::HostInstances for CallState {
    fn len(&mut self, list: Resource<Instances>) -> u32 {
        self.table
            .get(&list)
            .map_or(0, |p| u32::try_from(p.len()).unwrap_or(u32::MAX))
    }

    /// Lowers only what the hook asks for.
    fn get(
        &mut self,
        list: Resource<Instances>,
        start: u32,
        count: u32,
    ) -> wasmtime::Result<Vec<wit::Instance>> {
        Ok(self
            .window(&list, start, count)?
            .iter()
            .map(convert::instance)
            .collect())
    }

    /// What `get` reads, in two allocations of the guest's rather than five per instance.
    fn get_packed(
        &mut self,
        list: Resource<Instances>,
        start: u32,
        count: u32,
    ) -> wasmtime::Result<wit::PackedInstances> {
        Ok(convert::packed(self.window(&list, start, count)?))
    }

    /// What `get` reads, flat: one copy of numbers and one text, whatever the count.
    fn get_flat(
        &mut self,
        list: Resource<Instances>,
        start: u32,
        count: u32,
    ) -> wasmtime::Result<wit::FlatInstances> {
        Ok(convert::flat(self.window(&list, start, count)?))
    }

    fn label(
        &mut self,
        list: Resource<Instances>,
        index: u32,
        key: String,
    ) -> wasmtime::Result<Option<String>> {
        Ok(self
            .candidate(&list, index)?
            .and_then(|c| c.labels.get(&key).cloned()))
    }

    fn annotation(
        &mut self,
        list: Resource<Instances>,
        index: u32,
        key: String,
    ) -> wasmtime::Result<Option<String>> {
        Ok(self
            .candidate(&list, index)?
            .and_then(|c| c.annotations.get(&key).cloned()))
    }

    fn labels(
        &mut self,
        list: Resource<Instances>,
        index: u32,
    ) -> wasmtime::Result<Vec<wit::KeyValueResult>> {
        Ok(self
            .candidate(&list, index)?
            .map(|c| convert::pairs(&c.labels))
            .unwrap_or_default())
    }

    fn annotations(
        &mut self,
        list: Resource<Instances>,
        index: u32,
    ) -> wasmtime::Result<Vec<wit::KeyValueResult>> {
        Ok(self
            .candidate(&list, index)?
            .map(|c| convert::pairs(&c.annotations))
            .unwrap_or_default())
    }

    fn taints(
        &mut self,
        list: Resource<Instances>,
        index: u32,
    ) -> wasmtime::Result<Vec<wit::Taint>> {
        Ok(self
            .candidate(&list, index)?
            .map(|c| convert::taints(&c.taints))
            .unwrap_or_default())
    }

    fn drop(&mut self, list: Resource<Instances>) -> wasmtime::Result<()> {
        self.table.delete(list)?;
        Ok(())
    }
}

impl wit_host::Host for CallState {
    fn log(&mut self, level: wit_host::Level, message: String) {
        self.log_lines += 1;
        if self.log_lines > GUEST_LOG_LINES {
            return;
        }
        let level = match level {
            wit_host::Level::Debug => report::Level::Debug,
            wit_host::Level::Info => report::Level::Info,
            wit_host::Level::Warn => report::Level::Warn,
            wit_host::Level::Error => report::Level::Error,
        };
        report::log(level, &format!("[hook {}] {message}", self.hook));
    }

    fn list_objects(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        selector: Option<String>,
    ) -> Result<String, String> {
        let allowed = self.allowed.iter().any(|r| {
            r.api_version == api_version
                && r.kind == kind
                && (r.namespace.is_none() || r.namespace == namespace)
        });
        if !allowed {
            let message = not_granted(&self.allowed, &api_version, &kind, namespace.as_deref());
            self.objects_denied.get_or_insert_with(|| message.clone());
            return Err(message);
        }
        self.objects.list(
            &api_version,
            &kind,
            namespace.as_deref(),
            selector.as_deref(),
        )
    }

    fn query_metrics(
        &mut self,
        source: String,
        promql: String,
        time: Option<i64>,
    ) -> Result<Vec<wit_host::Sample>, wit_host::MetricsError> {
        // A plan's clock runs ahead of the present, where no metrics are yet: a time still to
        // come is answered with the values of now, at the time asked.
        let ahead = time.map_or(0, |t| t.saturating_sub(present()).max(0));
        let asked = time.map(|t| t - ahead);
        self.metrics
            .ask(&self.hook, &source, |m, wait| {
                m.instant(&source, &promql, asked, wait)
            })
            .map(|samples| {
                (samples.into_iter())
                    .map(|s| Sample {
                        time: s.time + ahead as f64,
                        ..s
                    })
                    .map(convert::sample)
                    .collect()
            })
            .map_err(convert::metrics_error)
    }

    fn query_metrics_range(
        &mut self,
        source: String,
        promql: String,
        range: wit_host::TimeRange,
    ) -> Result<Vec<wit_host::Series>, wit_host::MetricsError> {
        // A range that ends in a plan's future is answered with the same range ending now,
        // its points at the times asked.
        let ahead = range.end.saturating_sub(present()).max(0);
        let range = TimeRange {
            start: range.start.saturating_sub(ahead),
            end: range.end - ahead,
            step: range.step,
        };
        self.metrics
            .ask(&self.hook, &source, |m, wait| {
                m.range(&source, &promql, range, wait)
            })
            .map(|series| {
                (series.into_iter())
                    .map(|mut s| {
                        for point in &mut s.points {
                            point.time += ahead as f64;
                        }
                        convert::series(s)
                    })
                    .collect()
            })
            .map_err(convert::metrics_error)
    }

    fn estimates(&mut self) -> wit_host::Timing {
        convert::timing(&self.timing)
    }

    fn others_disrupting(&mut self) -> Vec<wit_host::Disruption> {
        (self.others.iter())
            .map(|d| wit_host::Disruption {
                node: d.node.clone(),
                by: d.by.clone(),
            })
            .collect()
    }
}

/// The present, in seconds since the Unix epoch: what metrics are known up to.
fn present() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Denies memory growth past the limit and remembers that it did, to name the fault.
pub(super) struct MemoryLimiter {
    pub(super) limit: usize,
    pub(super) exceeded: bool,
}

/// The most elements a hook's table may hold (an interpreter's function table holds tens of
/// thousands).
pub(super) const MAX_TABLE_ELEMENTS: usize = 1_000_000;

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.exceeded = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// A clock that always reads the context's `now`: hooks get no time of their own.
pub(super) struct FrozenClock(pub(super) Duration);

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        self.0
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// Logs what the guest printed; returns what says why it trapped: its last stderr line that is
/// not a language runtime's own (a stack, a backtrace hint, an abort notice).
pub(super) fn capture(
    hook: &str,
    stdout: &MemoryOutputPipe,
    stderr: &MemoryOutputPipe,
) -> Option<String> {
    let out = stdout.contents();
    for line in String::from_utf8_lossy(&out)
        .lines()
        .filter(|l| !l.trim().is_empty())
    {
        report::log(report::Level::Info, &format!("[hook {hook}] {line}"));
    }
    let err = stderr.contents();
    let text = String::from_utf8_lossy(&err);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        report::log(report::Level::Warn, &format!("[hook {hook}] {line}"));
    }
    cause(&text)
}

/// The line of a guest's stderr that says why it failed: the last that is not the runtime's own
/// words around it. Rust's panic message comes before its backtrace hint; a JavaScript error's
/// (componentize-js) before its `Stack:` and frames and the engine's abort notice. A Python
/// exception (componentize-py) is the unindented line that ends its traceback (its frames and
/// their source lines are indented), whatever the runtime's panic says after it.
fn cause(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().collect();
    let traceback = "Traceback (most recent call last):";
    if let Some(start) = lines.iter().rposition(|l| l.trim() == traceback) {
        let exception = lines[start + 1..]
            .iter()
            .find(|l| !l.starts_with(' ') && !l.trim().is_empty());
        return exception.map(|l| l.trim().to_string());
    }
    let runtimes = |line: &str| {
        line.is_empty()
            || line.starts_with("note: run with `RUST_BACKTRACE")
            || line.starts_with("Redirecting call to abort()")
            || line == "Stack:"
            || line.starts_with("File \"")
            || js_frame(line)
    };
    let trimmed: Vec<&str> = lines.iter().map(|l| l.trim()).collect();
    let last = trimmed.iter().rposition(|l| !runtimes(l))?;
    // A Python frame without its traceback's header is followed by its source line: no cause.
    let after_frame = last > 0 && trimmed[last - 1].starts_with("File \"");
    (!after_frame).then(|| trimmed[last].to_string())
}

/// A frame of a SpiderMonkey stack: `function@file:line:column`.
fn js_frame(line: &str) -> bool {
    let Some((_, place)) = line.rsplit_once('@') else {
        return false;
    };
    let mut numbers = place.rsplitn(3, ':');
    let column = numbers.next().is_some_and(|n| n.parse::<u32>().is_ok());
    let row = numbers.next().is_some_and(|n| n.parse::<u32>().is_ok());
    column && row && numbers.next().is_some()
}

/// Why a read of `kind` (in `namespace`, or cluster-wide) is refused: what it asked, and what
/// the policy grants of that kind, if anything.
fn not_granted(
    allowed: &[ContextResource],
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> String {
    let asked = match namespace {
        Some(n) => format!("{api_version} {kind} in namespace {n}"),
        None => format!("{api_version} {kind} in every namespace"),
    };
    let granted: Vec<String> = (allowed.iter())
        .filter(|r| r.api_version == api_version && r.kind == kind)
        .filter_map(|r| r.namespace.as_ref().map(|n| format!("namespace {n}")))
        .collect();
    // The grant suggested is the narrowest that answers what was asked.
    let grant = match namespace {
        Some(n) => format!("{{apiVersion: {api_version}, kind: {kind}, namespace: {n}}}"),
        None => format!("{{apiVersion: {api_version}, kind: {kind}}}"),
    };
    match granted.is_empty() {
        true => format!(
            "{asked}, which the policy's contextResources does not grant (add {grant} there)"
        ),
        false => format!(
            "{asked}, which the policy's contextResources does not grant (it grants {kind} in {} only)",
            granted.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_of_a_trap_is_the_guests_own_words_not_its_runtimes() {
        let js = "describe: unknown point \"gates\" (one of select, batch, gate)\nStack:\n  describe@rollout_ext_hooks.js:31:13\n  export_metadata_0_3_7$describe@/tmp/x/sources/initializer.js:1185:15\nRedirecting call to abort() to mozalloc_abort\n";
        assert_eq!(
            cause(js).as_deref(),
            Some("describe: unknown point \"gates\" (one of select, batch, gate)")
        );
        let rust = "thread '<unnamed>' panicked at src/lib.rs:10:5:\nno zone label\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(cause(rust).as_deref(), Some("no zone label"));
        let python = "Traceback (most recent call last):\n  File \"app.py\", line 12, in check\n    raise ValueError('bad window')\nValueError: bad window\n";
        assert_eq!(cause(python).as_deref(), Some("ValueError: bad window"));
        // componentize-py: no source line (the source is not in the component), then its panic.
        let componentize_py = "Traceback (most recent call last):\n  File \"/2/sdk.py\", line 126, in describe\nValueError: describe: point 'gate' left out\nthread '<unnamed>' (1) panicked at runtime/src/lib.rs:1280:25:\nPython function threw an unexpected exception\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            cause(componentize_py).as_deref(),
            Some("ValueError: describe: point 'gate' left out")
        );
        let frame_last = "  File \"app.py\", line 12, in check\n    total = a / b\n";
        assert_eq!(
            cause(frame_last),
            None,
            "a frame and its source are no cause"
        );
        assert_eq!(cause(""), None);
    }

    #[test]
    fn a_refused_read_says_what_was_asked_and_what_is_granted() {
        let grant = |namespace: Option<&str>| ContextResource {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: namespace.map(String::from),
        };
        assert_eq!(
            not_granted(&[], "apps/v1", "Deployment", Some("shop")),
            "apps/v1 Deployment in namespace shop, which the policy's contextResources does not grant (add {apiVersion: apps/v1, kind: Deployment, namespace: shop} there)"
        );
        assert_eq!(
            not_granted(&[], "apps/v1", "Deployment", None),
            "apps/v1 Deployment in every namespace, which the policy's contextResources does not grant (add {apiVersion: apps/v1, kind: Deployment} there)"
        );
        assert_eq!(
            not_granted(&[grant(Some("ops"))], "apps/v1", "Deployment", Some("shop")),
            "apps/v1 Deployment in namespace shop, which the policy's contextResources does not grant (it grants Deployment in namespace ops only)"
        );
        assert!(
            not_granted(&[grant(Some("ops"))], "apps/v1", "Deployment", None)
                .starts_with("apps/v1 Deployment in every namespace")
        );
    }
}
