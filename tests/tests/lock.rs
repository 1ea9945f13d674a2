//! The rotation lock on the real test bed: one holder at a time, the holder and age named,
//! `--force-unlock` takes over and the old holder notices, release gives it back.

use std::time::Duration;

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
}
