//! A hook that misbehaves as its config asks, one mode per point:
//! `{"select": MODE, "batch": MODE, "gate": MODE}`. Used by the tests to prove that the host
//! stops, names and survives every kind of misbehaviour. Mode `trace` (any point) prints one
//! line per call, which the host logs, and defers: the tests count calls with it.
//!
//! `{"rejectConfig": MESSAGE}` makes the config check at load fail with MESSAGE; any other
//! config is accepted.

use rollout_ext_hooks::{
    Batch, BatchSize, Choice, Context, Group, Instances, Pause, Phase, Policy, Progress, Selection,
    ValidationSummary, Verdict, config, export_policy, policy,
};
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Modes {
    select: String,
    batch: String,
    gate: String,
    reject_config: Option<String>,
}

fn modes(ctx: &Context) -> Modes {
    config(ctx).unwrap_or_default()
}

/// Spins until the host's deadline stops it.
fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// Allocates until the memory limit stops it.
fn hog() -> ! {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        chunks.push(vec![1u8; 1 << 20]);
        std::hint::black_box(&chunks);
    }
}

#[inline(never)]
#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    let buffer = std::hint::black_box([depth; 64]);
    recurse(depth + 1).wrapping_add(buffer[3])
}

/// Whether the module may read a file of the host.
fn probe_file() -> String {
    match std::fs::read_to_string("/etc/hostname") {
        Ok(_) => "file:readable".to_string(),
        Err(_) => "file:denied".to_string(),
    }
}

/// Whether the module sees any environment variable.
fn probe_env() -> String {
    match std::env::vars().count() {
        0 => "env:empty".to_string(),
        n => format!("env:visible({n})"),
    }
}

/// Whether the wall clock reads anything but the decision's `now`.
fn probe_clock(ctx: &Context) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(-1);
    let started = std::time::Instant::now();
    std::hint::black_box((0..1_000_000u64).sum::<u64>());
    let monotonic = started.elapsed().is_zero();
    match (now == ctx.now, monotonic) {
        (true, true) => "clock:frozen".to_string(),
        _ => "clock:live".to_string(),
    }
}

/// Whether the module may open a TCP connection.
fn probe_socket() -> String {
    match std::net::TcpStream::connect("127.0.0.1:1") {
        Ok(_) => "socket:open".to_string(),
        Err(_) => "socket:denied".to_string(),
    }
}

/// What the sandbox let the module see: files, environment, clock, network.
fn probe(ctx: &Context) -> String {
    format!(
        "{} {} {} {}",
        probe_file(),
        probe_env(),
        probe_clock(ctx),
        probe_socket()
    )
}

/// What `list-objects` answers for an allowed kind and for one the policy does not allow.
fn list_objects() -> String {
    let nodes = match rollout_ext_hooks::host::list_objects(
        "v1",
        "Node",
        None,
        Some("topology.kubernetes.io/zone=a"),
    ) {
        Ok(items) => format!("nodes-in-a:{}", items.len()),
        Err(e) => format!("nodes:error({e})"),
    };
    let secrets =
        match rollout_ext_hooks::host::list_objects("v1", "Secret", Some("kube-system"), None) {
            Ok(_) => "secrets:readable".to_string(),
            Err(e) => format!("secrets:denied({e})"),
        };
    format!("{nodes} {secrets}")
}

pub struct Hostile;

#[policy]
impl Policy for Hostile {
    const NAME: &'static str = "hostile";

    fn validate_config(config: &str) -> Result<(), String> {
        match serde_json::from_str::<Modes>(config) {
            Ok(Modes {
                reject_config: Some(message),
                ..
            }) => Err(message),
            _ => Ok(()),
        }
    }

    fn select(ctx: &Context, _group: &Group, candidates: &Instances) -> Result<Selection, String> {
        // The first candidate that may be chosen without force (the first of the current
        // choice), else the first: the modes that answer with it fail for their own reason.
        let first = || {
            candidates
                .iter()
                .find(|c| !c.up_to_date)
                .map(|c| c.name.clone())
                .or_else(|| candidates.get(0).map(|c| c.name))
                .unwrap_or_default()
        };
        let choose = |names: Vec<String>, reason: String| {
            Ok(Selection::Choose(
                names
                    .into_iter()
                    .map(|name| Choice::new(name, reason.clone()))
                    .collect(),
            ))
        };
        let every = || {
            candidates
                .iter()
                .map(|c| c.name.clone())
                .collect::<Vec<_>>()
        };
        match modes(ctx).select.as_str() {
            "loop" => spin(),
            "oom" => hog(),
            "recursion" => choose(vec![first()], recurse(0).to_string()),
            "trap" => panic!("hostile hook panics on purpose"),
            "refuse" => Err("refusing on purpose".into()),
            "huge" => choose(vec![first()], "x".repeat(2 << 20)),
            "unknown" => choose(vec!["no-such-node".into()], "made up".into()),
            "duplicate" => {
                let first = first();
                choose(vec![first.clone(), first], "twice".into())
            }
            "probe" => choose(vec![first()], probe(ctx)),
            "list-objects" => choose(vec![first()], list_objects()),
            // Every candidate, the up-to-date ones too, without force: an invalid answer.
            "up-to-date" | "select-up-to-date" => choose(every(), "all of them".into()),
            // Every candidate, with force: up-to-date ones are replaced too.
            "force" | "select-force" => Ok(Selection::Choose(
                every()
                    .into_iter()
                    .map(|name| Choice::forced(name, "forced"))
                    .collect(),
            )),
            // What the host answers about the candidates, read through the resource: the first
            // candidate's labels, annotations and taints.
            "read-labels" => Err(read_labels(candidates)),
            // One escape attempt each, answered as an error carrying what the module saw, so
            // that a run stops there whatever the sandbox allowed.
            "file" => Err(probe_file()),
            "env" => Err(probe_env()),
            "clock" => Err(probe_clock(ctx)),
            "socket" => Err(probe_socket()),
            "trace" => {
                println!("trace select {} dry-run={}", told(), ctx.dry_run);
                Ok(Selection::Defer)
            }
            "print" => {
                println!("hello from the hook's stdout");
                eprintln!("and from its stderr");
                Ok(Selection::Defer)
            }
            _ => Ok(Selection::Defer),
        }
    }

    fn next_batch(ctx: &Context, progress: &Progress) -> Result<BatchSize, String> {
        match modes(ctx).batch.as_str() {
            "loop" => spin(),
            "zero" => Ok(BatchSize::size(0, "nothing, on purpose")),
            "over-budget" => Ok(BatchSize::size(
                progress.max_batch + 1,
                "one more than the budget, on purpose",
            )),
            "huge" => Ok(BatchSize::size(u32::MAX, "everything, on purpose")),
            "pause-forever" => Ok(BatchSize::Pause(Pause {
                seconds: u32::MAX,
                reason: "forever".into(),
            })),
            "one" => Ok(BatchSize::size(1, "one at a time")),
            // What the host says others disrupt in the group (contract 0.3.7).
            "others" => {
                let others: Vec<String> = (rollout_ext_hooks::host::others_disrupting().iter())
                    .map(|d| format!("{}={}", d.node, d.by))
                    .collect();
                println!(
                    "others batch {} [{}] dry-run={}",
                    progress.batches_done,
                    others.join(", "),
                    ctx.dry_run
                );
                Ok(BatchSize::Defer)
            }
            "trace" => {
                println!(
                    "trace batch {} {} dry-run={}",
                    progress.batches_done,
                    told(),
                    ctx.dry_run
                );
                Ok(BatchSize::Defer)
            }
            // Reads the pending instances from the host over and over: the deadline holds while
            // the time goes into host calls.
            "hammer" => loop {
                std::hint::black_box(progress.pending.range(0, usize::MAX));
            },
            // Reads past the end and more than there is: the host answers what exists.
            "read-past" => {
                let len = progress.pending.len();
                let past = progress.pending.range(len, 10).len();
                let all = progress.pending.range(0, usize::MAX).len();
                Err(format!("len {len}, past the end {past}, all {all}"))
            }
            "read-labels" => Err(read_labels(&progress.pending)),
            // The contract's sizes are u32: a negative size cannot be expressed at all.
            _ => Ok(BatchSize::Defer),
        }
    }

    fn check(
        ctx: &Context,
        phase: Phase,
        batch: &Batch,
        _summary: &ValidationSummary,
    ) -> Result<Verdict, String> {
        let mode = modes(ctx).gate;
        // `abort-batch-N`: proceeds until the before-batch gate of batch N (from 0), aborts that.
        if let Some(n) = mode.strip_prefix("abort-batch-") {
            let at = n.parse::<u32>().map_err(|e| format!("{mode}: {e}"))?;
            return Ok(match phase {
                Phase::BeforeBatch if batch.index == at => {
                    Verdict::Abort(format!("batch {} must not go", batch.index + 1))
                }
                _ => Verdict::Proceed,
            });
        }
        match mode.as_str() {
            "trace" => {
                println!(
                    "trace gate {} {} attempt={} {} dry-run={}",
                    phase_name(phase),
                    batch.index,
                    batch.attempt,
                    told(),
                    ctx.dry_run
                );
                Ok(Verdict::Defer)
            }
            "loop" => spin(),
            "wait-forever" => Ok(Verdict::Wait(Pause {
                seconds: u32::MAX,
                reason: "forever".into(),
            })),
            "wait-an-hour" => Ok(Verdict::Wait(Pause {
                seconds: 3600,
                reason: "an hour, on purpose".into(),
            })),
            "abort" => Ok(Verdict::Abort("hostile gate says stop".into())),
            _ => Ok(Verdict::Defer),
        }
    }
}

/// What the host answers about `list`: its length, and the first instance's zone label, labels,
/// annotations and taints (`key=value`, sorted).
fn read_labels(list: &Instances) -> String {
    let len = list.len();
    let pairs = |mut entries: Vec<String>| {
        entries.sort();
        entries.join(",")
    };
    let first = match list.iter().next() {
        Some(c) => format!(
            "first {}: zone-label {:?}, labels [{}], annotations [{}], taints [{}]",
            c.name,
            c.label("topology.kubernetes.io/zone"),
            pairs(
                c.labels()
                    .into_iter()
                    .map(|kv| format!("{}={}", kv.key, kv.value))
                    .collect()
            ),
            pairs(
                c.annotations()
                    .into_iter()
                    .map(|kv| format!("{}={}", kv.key, kv.value))
                    .collect()
            ),
            pairs(
                c.taints()
                    .into_iter()
                    .map(|t| format!("{}={}:{}", t.key, t.value, t.effect))
                    .collect()
            ),
        ),
        None => "no first".to_string(),
    };
    format!("len {len}; {first}")
}

/// What the host estimates, as `told=BATCH/LEFT` in seconds (`-` for none).
fn told() -> String {
    let timing = rollout_ext_hooks::host::estimates();
    let seconds = |e: &Option<rollout_ext_hooks::host::DurationEstimate>| {
        e.as_ref()
            .map_or("-".to_string(), |e| e.seconds.to_string())
    };
    format!(
        "told={}/{}",
        seconds(&timing.batch),
        seconds(&timing.remaining)
    )
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::BeforeGroup => "before-group",
        Phase::BeforeBatch => "before-batch",
        Phase::AfterBatch => "after-batch",
    }
}

export_policy!(Hostile);
