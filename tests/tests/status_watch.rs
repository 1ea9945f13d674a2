//! `status --watch` on the real test bed, as an operator uses it: in a pseudo-terminal beside a
//! live rotation (the screen read back through a VT100 parser), it shows the batch in flight with
//! the pods its drain has left and what blocks it, what holds the run and why, and its keys
//! pause, resume and abort the run; without a terminal, it says each change as a line and ends
//! with the run.

use std::process::Command;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use rollout_ext_e2e::browser;
use rollout_ext_e2e::cluster::TestCluster;
use rollout_ext_e2e::terminal::Terminal;
use rollout_ext_e2e::workloads::blocked_group;
use rollout_ext_e2e::{plugin_binary, run_plugin, run_watching};

/// One rotation at a time in this cluster (the plugin's own lock would refuse the others).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Long enough for a batch of the test bed (a node replaced, validated) and a watch's news.
const SHOWN_WITHIN: Duration = Duration::from_secs(90);

fn watch(cluster: &TestCluster) -> Command {
    let mut command = Command::new(plugin_binary());
    command
        .args(["status", "--watch", "--kubeconfig"])
        .arg(&cluster.kubeconfig);
    command
}

/// The view, started in a 130 × 40 terminal, once it has read the Lease.
fn view(cluster: &TestCluster) -> Terminal {
    let terminal = Terminal::spawn(watch(cluster), 40, 130);
    terminal.wait_for("the view", SHOWN_WITHIN, |s| {
        s.contains("p pause · r resume")
    });
    terminal
}

/// On a failed test, withdraws a pause and asks an abort, so that a run left paused does not
/// keep the test binary waiting for it.
struct Unstick<'a>(&'a TestCluster);

impl Drop for Unstick<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for args in [&["resume"][..], &["abort", "--reason", "the test failed"]] {
                let _ = Command::new(plugin_binary())
                    .args(args)
                    .arg("--kubeconfig")
                    .arg(&self.0.kubeconfig)
                    .output();
            }
        }
    }
}

/// The screen's row that contains `needle`.
fn row<'a>(screen: &'a str, needle: &str) -> &'a str {
    (screen.lines().find(|l| l.contains(needle)))
        .unwrap_or_else(|| panic!("no row has {needle:?}:\n{screen}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_view_shows_a_blocked_drain_and_its_keys_pause_and_resume_the_run() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let pdbs = blocked_group(cluster, "watched").await;
    let _unstick = Unstick(cluster);
    let mut terminal = view(cluster);
    // Beside it, the same command with no terminal: lines, until the run ends.
    let lines = tokio::process::Command::from(watch(cluster))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let lines = tokio::spawn(lines);
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(dir.path(), "watched", "", &[]);
    let (tx, mut paused) = tokio::sync::mpsc::unbounded_channel();
    let run = tokio::spawn(run_watching(args, move |event| {
        if event["event"] == "paused" || event["event"] == "resumed" {
            tx.send(event.clone()).unwrap();
        }
    }));

    // The budget lets no pod go: the batch is in flight, its drain waits.
    let screen = terminal.wait_for("the blocked drain", SHOWN_WITHIN, |s| {
        [
            "waits: eviction of pod watched/web-",
            "2 pods left",
            "Now: draining node watched-1",
        ]
        .iter()
        .all(|shown| s.contains(shown))
    });
    assert!(row(&screen, "batch 1 in flight: watched-1").contains("0/1 replaced"));
    let node = row(&screen, "pods left");
    assert!(
        node.contains("watched-1") && node.contains("draining"),
        "{node}"
    );
    assert!(node.contains("2 pods left: watched/web-"), "{node}");
    assert!(
        row(&screen, "Now: draining node watched-1").contains(": eviction of pod watched/web-")
    );
    assert!(row(&screen, "Rotation running: ").contains("lock renewed"));
    let png = dir.path().join("status-watch.png");
    let opened = browser::open(&terminal.html(), Some((&png, 1120, 730)));
    browser::assert_only_the_page(&opened);
    browser::assert_screenshot_shows_something(&png, 1120, 730);
    browser::keep_for_docs(&png, "status-watch.png");

    // p, a reason, Enter: the pause is recorded on the Lease; the drain in progress goes on.
    terminal.type_keys("pzone b maintenance\r");
    // The Lease's change comes by its watch, after the request's answer.
    let screen = terminal.wait_for("the pause", SHOWN_WITHIN, |s| {
        s.contains("pause requested: the rotation of") && s.contains("Paused by ")
    });
    assert!(row(&screen, "Paused by ").contains(": zone b maintenance"));
    // Relaxed, the budget lets the drain finish; the run holds at its next safe point.
    let relax = Patch::Merge(serde_json::json!({"spec": {"maxUnavailable": 2}}));
    pdbs.patch("web", &PatchParams::default(), &relax)
        .await
        .unwrap();
    let held = paused.recv().await.expect("the run paused");
    assert_eq!(held["event"], "paused");
    assert_eq!(held["reason"], "zone b maintenance");
    let screen = terminal.wait_for("the hold", SHOWN_WITHIN, |s| {
        s.contains("Now: paused after batch 1 of group watched")
    });
    assert!(row(&screen, "1/1 replaced").contains("watched"), "{screen}");

    // r: the run goes on, and finishes.
    terminal.type_keys("r");
    let resumed = paused.recv().await.expect("the run resumed");
    assert_eq!(resumed["event"], "resumed");
    let (code, stderr) = run.await.unwrap();
    assert_eq!(code, Some(0), "{stderr}");
    terminal.wait_for("the end", SHOWN_WITHIN, |s| {
        s.contains("The run ended: Finished")
    });
    terminal.type_keys("q");
    assert_eq!(terminal.wait_exit(SHOWN_WITHIN), Some(0));

    // The lines said the same story, and ended with the run, as it ended.
    let out = lines.await.unwrap().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let order = [
        "group watched: 0/1 replaced, batch 1 in flight: watched-1",
        "node watched-1: draining, 2 pods left; waits: eviction of pod watched/web-",
        "paused by ",
        "now: paused after batch 1 of group watched",
        "pause withdrawn",
        "the run ended: Finished",
    ];
    let mut from = 0;
    for line in order {
        let at = said[from..]
            .find(line)
            .unwrap_or_else(|| panic!("{line:?} not said after {from}:\n{said}"));
        from += at;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn abort_from_the_view_asks_a_reason_and_confirmation_then_stops_the_run_in_its_soak() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("viewed", 2).await.unwrap();
    let _unstick = Unstick(cluster);
    let mut terminal = view(cluster);
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(dir.path(), "viewed", "", &["--soak", "10m"]);
    let run = tokio::spawn(run_watching(args.clone(), |_| {}));

    let screen = terminal.wait_for("the soak", SHOWN_WITHIN, |s| {
        s.contains("Now: waiting 10m: soak after batch 1 of group viewed")
    });
    assert!(row(&screen, "1/2 replaced").contains("viewed"), "{screen}");
    // A, a reason, Enter: asked to confirm; anything but y would cancel.
    terminal.type_keys("abad image\r");
    terminal.wait_for("the confirmation", SHOWN_WITHIN, |s| {
        s.contains("Abort the rotation (bad image)? y aborts")
    });
    terminal.type_keys("y");
    terminal.wait_for("the request", SHOWN_WITHIN, |s| {
        s.contains("abort requested: the rotation of")
    });
    let (code, stderr) = run.await.unwrap();
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains(": bad image; stopped "), "{stderr}");
    let screen = terminal.wait_for("the end", SHOWN_WITHIN, |s| {
        s.contains("The run ended: Aborted")
    });
    assert!(
        row(&screen, "The run ended: Aborted").contains("bad image"),
        "{screen}"
    );
    // Only the batch before the soak was carried out.
    assert_eq!(cluster.cloud.terminated("viewed").len(), 1);
    terminal.type_keys("q");
    assert_eq!(terminal.wait_exit(SHOWN_WITHIN), Some(0));

    // The same command finishes the rotation (without the soak).
    let args: Vec<String> = args
        .into_iter()
        .filter(|a| a != "--soak" && a != "10m")
        .collect();
    let out = run_plugin(args).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cluster.cloud.terminated("viewed").len(), 2);
}
