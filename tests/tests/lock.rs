//! The rotation lock on the real test bed: one holder at a time, the holder and age named,
//! `--force-unlock` takes over and the old holder notices, release gives it back and keeps the
//! state it did not write.

use std::time::Duration;

use rollout_ext::cluster::controls::{Control, ControlRequest};
use rollout_ext::cluster::lock::LockError;
use rollout_ext_e2e::cluster::TestCluster;

#[tokio::test]
async fn one_rotation_at_a_time() {
    let cluster = TestCluster::shared();
    let live = cluster.live().await;
    let renew = Duration::from_millis(200);
    let mut first = live
        .lock_renewing_every("alice@host/1", false, renew)
        .await
        .unwrap();

    match live.lock("bob@host/2", false).await {
        Err(LockError::Held { holder, stale, .. }) => {
            assert_eq!(holder, "alice@host/1");
            assert!(!stale);
        }
        Err(other) => panic!("expected the lock to be held, got {other}"),
        Ok(_) => panic!("a second run must be refused"),
    }
    let message = live
        .lock("bob@host/2", false)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        message.contains("alice@host/1") && message.contains("last renewed"),
        "{message}"
    );

    let second = live
        .lock_renewing_every("bob@host/2", true, renew)
        .await
        .expect("--force-unlock takes over");
    tokio::time::timeout(Duration::from_secs(10), first.wait_lost())
        .await
        .expect("the first holder notices");
    assert!(first.lost());
    // The old holder's release leaves the new holder's lock alone.
    first.release().await.unwrap();
    assert!(
        matches!(live.lock("carol@host/3", false).await, Err(LockError::Held { holder, .. }) if holder == "bob@host/2")
    );

    second.release().await.unwrap();
    let third = live
        .lock("carol@host/3", false)
        .await
        .expect("free again after release");
    third.release().await.unwrap();

    // A finished run lets go of what it did not write: another group's records, kept by a run
    // that stopped, and a pause an operator asked for the next run. The Lease stays, with no
    // holder, and the next run takes it without --force-unlock and finds both.
    let other = "rollout-ext.io/expected.other";
    let stopped = live.lock("dave@host/4", false).await.unwrap();
    stopped.set_state(other, Some("3")).await.unwrap();
    stopped.abandon().await.unwrap();
    let finished = live
        .lock("erin@host/5", false)
        .await
        .expect("an abandoned lock is free");
    let mine = "rollout-ext.io/expected.mine";
    finished.set_state(mine, Some("2")).await.unwrap();
    finished.set_state(mine, None).await.unwrap();
    let pause = ControlRequest::now("oncall", "late pause");
    live.set_control(Control::Pause, Some(&pause))
        .await
        .unwrap();
    finished.release().await.unwrap();
    let left = live.controls().await.unwrap().expect("the Lease stays");
    assert_eq!(left.holder, "");
    assert_eq!(
        left.controls.pause.map(|p| p.reason).as_deref(),
        Some("late pause")
    );
    let next = live.lock("frank@host/6", false).await.expect("free");
    assert_eq!(next.state(other).await.unwrap().as_deref(), Some("3"));
    assert_eq!(next.state(mine).await.unwrap(), None);

    // With nothing left on it, the Lease goes.
    next.set_state(other, None).await.unwrap();
    live.set_control(Control::Pause, None).await.unwrap();
    next.release().await.unwrap();
    assert!(live.controls().await.unwrap().is_none(), "no trace is left");
}

/// A record the run clears without waiting (what held it, once the wait is over) is gone
/// before the run's next read or write of its state, and a write made after the clear is not
/// undone by it.
#[tokio::test]
async fn a_record_cleared_without_waiting_is_gone_before_the_next_read_or_write() {
    use k8s_openapi::api::coordination::v1::Lease;
    use rollout_ext::cluster::lock::LeaseRef;

    let cluster = TestCluster::shared();
    let live = cluster.live().await;
    let lease = LeaseRef::workload("sts", "default", "clear-soon");
    let every = Duration::from_secs(15);
    let lock = live
        .lock_lease(&lease, "gina@host/7", false, every)
        .await
        .unwrap();
    let key = "rollout-ext.io/holding";
    lock.set_state(key, Some("waiting")).await.unwrap();
    lock.clear_soon(key).await.unwrap();
    assert_eq!(lock.state(key).await.unwrap(), None);

    // Cleared, then written again at once: the write comes last on the Lease too.
    lock.set_state(key, Some("first")).await.unwrap();
    lock.clear_soon(key).await.unwrap();
    lock.set_state(key, Some("second")).await.unwrap();
    assert_eq!(lock.state(key).await.unwrap().as_deref(), Some("second"));

    // The release waits for a clear under way: nothing is left, so the Lease goes.
    lock.clear_soon(key).await.unwrap();
    lock.release().await.unwrap();
    let leases: kube::Api<Lease> = kube::Api::namespaced(cluster.client().await, "default");
    assert!(leases.get_opt(&lease.name).await.unwrap().is_none());
}
