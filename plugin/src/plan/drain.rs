//! Which pods a drain moves, skips or refuses: kubectl drain's filter chain, without I/O.
//!
//! Each pod passes the filters in kubectl's order (pod selector, DaemonSet, mirror, local
//! storage, unreplicated); the first that decides wins. Reasons end up in the plan's warnings and,
//! during a live drain, in its errors.

use crate::labels::LabelSelector;
use crate::snapshot::Pod;

/// kubectl drain's options that change which pods go.
#[derive(Debug, Clone, Default)]
pub struct DrainOptions {
    /// Delete pods with emptyDir volumes (their data is lost).
    pub delete_emptydir_data: bool,
    /// Delete pods that no controller manages (kubectl drain's `--force`).
    pub force: bool,
    /// Only pods matching this selector are drained.
    pub pod_selector: Option<LabelSelector>,
    /// Delete instead of evicting: PodDisruptionBudgets are bypassed.
    pub disable_eviction: bool,
}

/// What a drain does with a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodFate {
    /// Evicted (or deleted with `--disable-eviction`); the warning, if any, says what is lost.
    Evict { warning: Option<&'static str> },
    /// Left on the node.
    Skip(&'static str),
    /// The drain stops: the pod cannot go without an explicit flag.
    Refuse(&'static str),
}

impl PodFate {
    pub fn is_evicted(&self) -> bool {
        matches!(self, PodFate::Evict { .. })
    }
}

pub fn classify(pod: &Pod, options: &DrainOptions) -> PodFate {
    if let Some(selector) = &options.pod_selector
        && !selector.matches(&pod.labels)
    {
        return PodFate::Skip("not selected by --pod-selector");
    }
    if pod
        .controller
        .as_ref()
        .is_some_and(|c| c.kind == "DaemonSet")
    {
        return PodFate::Skip("DaemonSet-managed");
    }
    if pod.mirror {
        return PodFate::Skip("mirror pod of a static pod");
    }
    let mut warning = None;
    if pod.uses_empty_dir && !pod.finished {
        if !options.delete_emptydir_data {
            return PodFate::Refuse(
                "uses emptyDir local storage (use --delete-emptydir-data to delete it)",
            );
        }
        warning = Some("deleting a pod with emptyDir local storage");
    }
    if pod.controller.is_none() && !pod.finished {
        if !options.force {
            return PodFate::Refuse("declares no controller (use --drain-force to delete it)");
        }
        warning = Some("deleting a pod that declares no controller");
    }
    PodFate::Evict { warning }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Owner;

    fn pod(controller: Option<&str>) -> Pod {
        Pod {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u".into(),
            node_name: Some("n1".into()),
            labels: [("app".to_string(), "web".to_string())].into(),
            controller: controller.map(|kind| Owner {
                kind: kind.into(),
                name: "owner".into(),
            }),
            mirror: false,
            ready: true,
            finished: false,
            uses_empty_dir: false,
            terminating: false,
            requests: Default::default(),
            placement: Default::default(),
        }
    }

    #[test]
    fn the_kubectl_filter_chain() {
        let plain = DrainOptions::default();
        let forced = DrainOptions {
            force: true,
            delete_emptydir_data: true,
            ..Default::default()
        };
        assert_eq!(
            classify(&pod(Some("ReplicaSet")), &plain),
            PodFate::Evict { warning: None }
        );
        assert_eq!(
            classify(&pod(Some("DaemonSet")), &plain),
            PodFate::Skip("DaemonSet-managed")
        );

        let mut mirror = pod(None);
        mirror.mirror = true;
        assert!(matches!(classify(&mirror, &plain), PodFate::Skip(_)));

        let bare = pod(None);
        assert!(
            matches!(classify(&bare, &plain), PodFate::Refuse(r) if r.contains("--drain-force"))
        );
        assert!(matches!(
            classify(&bare, &forced),
            PodFate::Evict { warning: Some(_) }
        ));

        let mut finished = pod(None);
        finished.finished = true;
        assert_eq!(
            classify(&finished, &plain),
            PodFate::Evict { warning: None }
        );

        let mut scratch = pod(Some("ReplicaSet"));
        scratch.uses_empty_dir = true;
        assert!(matches!(classify(&scratch, &plain), PodFate::Refuse(r) if r.contains("emptyDir")));
        assert!(matches!(
            classify(&scratch, &forced),
            PodFate::Evict { warning: Some(_) }
        ));

        let selected = DrainOptions {
            pod_selector: Some(LabelSelector::parse("app=db").unwrap()),
            ..Default::default()
        };
        assert!(matches!(
            classify(&pod(Some("ReplicaSet")), &selected),
            PodFate::Skip(_)
        ));
    }
}
