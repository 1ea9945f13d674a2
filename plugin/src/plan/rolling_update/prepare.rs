//! Building the next controller and checking the request, before anything is sent: the legacy
//! tool's naming (`<name>-<hash>`), the deployment label that keeps the two selectors apart, and
//! the errors it gave for requests that cannot work.

use super::controller::Controller;
use crate::keys;

/// Where the next controller's template comes from.
#[derive(Debug, Clone)]
pub enum NextSource {
    /// The old controller with one container's image changed.
    Image {
        image: String,
        container: Option<String>,
        pull_policy: Option<String>,
    },
    /// A controller read from a file.
    File(Controller),
}

impl NextSource {
    /// The replicas the next controller ends with: the file's, when it sets them, else the old
    /// controller's.
    pub fn desired(&self, old: &Controller) -> i32 {
        match self {
            NextSource::File(f) if f.object["spec"]["replicas"].is_i64() => f.replicas(),
            _ => old.replicas(),
        }
    }
}

/// `<name>:<uid>`: how the next controller names its source (legacy kubectl's format).
pub fn source_id(c: &Controller) -> String {
    format!("{}:{}", c.name(), c.uid())
}

/// The next controller as it is created: at 0 replicas, pointing at its source and carrying
/// the size it grows to.
pub fn next_to_create(old: &Controller, mut next: Controller, desired: i32) -> Controller {
    next.set_replicas(0);
    next.set_annotation(keys::LEGACY_SOURCE_ID, Some(&source_id(old)));
    next.set_annotation(keys::LEGACY_DESIRED_REPLICAS, Some(&desired.to_string()));
    next
}

/// The next controller to create, and the label value the old controller's pods get.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub next: Controller,
    /// `(key, value)` to add to the old controller's template, pods and selector, when its
    /// selector does not already carry the deployment key.
    pub old_label: Option<(String, String)>,
}

/// Annotations of a rolling update that must not be copied from the old controller.
const UPDATE_ANNOTATIONS: &[&str] = &[
    keys::LEGACY_SOURCE_ID,
    keys::LEGACY_DESIRED_REPLICAS,
    keys::LEGACY_ORIGINAL_REPLICAS,
    keys::LEGACY_NEXT_CONTROLLER,
];

/// The next controller for `old`, named `next_name` (else `<old>-<hash>`).
pub fn prepare(
    old: &Controller,
    next_name: Option<&str>,
    source: &NextSource,
    deployment_key: &str,
) -> Result<Prepared, String> {
    let prepared = match source {
        NextSource::Image {
            image,
            container,
            pull_policy,
        } => from_image(
            old,
            next_name,
            NewImage {
                image,
                container: container.as_deref(),
                pull_policy: pull_policy.as_deref(),
            },
            deployment_key,
        )?,
        NextSource::File(file) => from_file(old, next_name, file)?,
    };
    if prepared.next.name() == old.name() {
        return Err(format!(
            "the next controller cannot have the same name as {} (give another NEXT name)",
            old.display()
        ));
    }
    Ok(prepared)
}

/// The image (and pull policy) the next controller's container takes.
struct NewImage<'a> {
    image: &'a str,
    container: Option<&'a str>,
    pull_policy: Option<&'a str>,
}

/// `old` with a new image, told apart from `old` by the hash of its template under
/// `deployment_key` (and `old` labelled `<hash>-orig` if its selector lacks the key).
fn from_image(
    old: &Controller,
    next_name: Option<&str>,
    new: NewImage<'_>,
    deployment_key: &str,
) -> Result<Prepared, String> {
    let index = old.container_index(new.container)?;
    if old.image(index) == Some(new.image) && new.pull_policy.is_none() {
        return Err(format!(
            "{} already runs image {}: give --image-pull-policy (Always|Never|IfNotPresent) to roll it anyway",
            old.display(),
            new.image
        ));
    }
    let mut next = Controller {
        kind: old.kind,
        object: old.for_create(),
    };
    next.set_image(index, new.image, new.pull_policy);
    let hash = next.hash();
    let name = next_name
        .map(String::from)
        .unwrap_or_else(|| format!("{}-{hash}", old.name()));
    next.set_name(&name);
    next.set_selector_label(deployment_key, &hash);
    next.set_template_label(deployment_key, &hash);
    for key in UPDATE_ANNOTATIONS {
        next.set_annotation(key, None);
    }
    let old_label = (!old.selector().contains_key(deployment_key))
        .then(|| (deployment_key.to_string(), format!("{}-orig", old.hash())));
    Ok(Prepared { next, old_label })
}

/// The controller a file describes: the same kind as `old`, and a selector that never selects
/// `old`'s pods.
fn from_file(
    old: &Controller,
    next_name: Option<&str>,
    file: &Controller,
) -> Result<Prepared, String> {
    if file.kind != old.kind {
        return Err(format!(
            "the file holds a {}, but {} is a {}: both sides of a rolling update are the same kind",
            file.kind.as_str(),
            old.display(),
            old.kind.as_str()
        ));
    }
    if let Some(name) = next_name
        && name != file.name()
    {
        return Err(format!(
            "the file names the next controller {:?}, the command line {name:?}",
            file.name()
        ));
    }
    let next_selector = file.selector();
    let distinct = old
        .selector()
        .iter()
        .any(|(k, v)| next_selector.get(k).is_some_and(|n| n != v));
    if !distinct {
        return Err(format!(
            "the selector of {} must have a key of {}'s selector with a different value, so that the two never select the same pods",
            file.display(),
            old.display()
        ));
    }
    Ok(Prepared {
        next: Controller {
            kind: file.kind,
            object: file.for_create(),
        },
        old_label: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn old() -> Controller {
        Controller::from_value(json!({
            "kind": "ReplicationController",
            "metadata": {"name": "foo", "uid": "u1",
                         "annotations": {"kubectl.kubernetes.io/original-replicas": "3", "team": "a"}},
            "spec": {"replicas": 3, "selector": {"app": "foo"},
                     "template": {"metadata": {"labels": {"app": "foo"}},
                                  "spec": {"containers": [{"name": "c", "image": "img:v1"}]}}}
        }))
        .unwrap()
    }

    fn image(image: &str, pull: Option<&str>) -> NextSource {
        NextSource::Image {
            image: image.into(),
            container: None,
            pull_policy: pull.map(String::from),
        }
    }

    #[test]
    fn the_next_controller_is_named_and_labelled_by_its_hash() {
        let p = prepare(&old(), None, &image("img:v2", None), "deployment").unwrap();
        let hash = p.next.selector()["deployment"].clone();
        assert_eq!(hash.len(), 32);
        assert_eq!(p.next.name(), format!("foo-{hash}"));
        assert_eq!(p.next.template_labels()["deployment"], hash);
        assert_eq!(p.next.image(0), Some("img:v2"));
        assert_eq!(p.next.annotation("team"), Some("a"));
        assert_eq!(
            p.next.annotation("kubectl.kubernetes.io/original-replicas"),
            None
        );
        let (key, value) = p.old_label.unwrap();
        assert_eq!(key, "deployment");
        assert!(value.ends_with("-orig") && !value.starts_with(&hash));
    }

    #[test]
    fn the_same_image_needs_a_pull_policy() {
        let err = prepare(&old(), None, &image("img:v1", None), "deployment").unwrap_err();
        assert!(err.contains("--image-pull-policy"), "{err}");
        let p = prepare(&old(), None, &image("img:v1", Some("Always")), "deployment").unwrap();
        assert_eq!(p.next.containers()[0]["imagePullPolicy"], json!("Always"));
    }

    #[test]
    fn the_next_name_may_not_be_the_old_one() {
        let err = prepare(&old(), Some("foo"), &image("img:v2", None), "deployment").unwrap_err();
        assert!(err.contains("same name"), "{err}");
    }

    #[test]
    fn a_file_must_select_other_pods() {
        let mut file = old();
        file.set_name("foo-v2");
        let err = prepare(&old(), None, &NextSource::File(file.clone()), "deployment").unwrap_err();
        assert!(err.contains("different value"), "{err}");
        file.set_selector_label("app", "foo-v2");
        let p = prepare(&old(), None, &NextSource::File(file), "deployment").unwrap();
        assert_eq!(p.next.name(), "foo-v2");
        assert!(p.old_label.is_none());
    }
}

/// What a dry run needs to know about the pair, worked out from the objects as they are.
#[derive(Debug, Clone)]
pub struct PairView {
    /// The controller scaled down.
    pub from: Controller,
    pub to_name: String,
    pub to_replicas: i32,
    pub to_exists: bool,
    pub desired: i32,
    pub cleanup: super::planner::Cleanup,
    /// The next controller to create, when it does not exist yet.
    pub to_create: Option<Controller>,
}

/// Works out the pair a rollout (or, with `source` none, a rollback) would scale, without
/// changing anything: the same decisions the executor's initialization makes. `cleanup` is the
/// form of the command; a rollback always deletes the next controller.
pub fn view_pair(
    old: &Controller,
    next_name: Option<&str>,
    existing_next: Option<&Controller>,
    source: Option<&NextSource>,
    deployment_key: &str,
    cleanup: super::planner::Cleanup,
) -> Result<PairView, String> {
    use super::planner::Cleanup;
    let Some(source) = source else {
        let next = existing_next.ok_or_else(|| {
            format!(
                "could not find the next controller of {} to roll back",
                old.display()
            )
        })?;
        let original = old
            .annotation(keys::LEGACY_ORIGINAL_REPLICAS)
            .and_then(|v| v.parse::<i32>().ok())
            .ok_or_else(|| {
                format!(
                    "cannot find the original replica count of {} (annotation {})",
                    old.display(),
                    keys::LEGACY_ORIGINAL_REPLICAS
                )
            })?;
        return Ok(PairView {
            from: next.clone(),
            to_name: old.name().to_string(),
            to_replicas: old.replicas(),
            to_exists: true,
            desired: original,
            cleanup: Cleanup::DeleteOld,
            to_create: None,
        });
    };
    if let Some(next) = existing_next {
        let desired = next
            .annotation(keys::LEGACY_DESIRED_REPLICAS)
            .and_then(|v| v.parse().ok())
            .unwrap_or(old.replicas());
        return Ok(PairView {
            from: old.clone(),
            to_name: next.name().to_string(),
            to_replicas: next.replicas(),
            to_exists: true,
            desired,
            cleanup,
            to_create: None,
        });
    }
    let prepared = prepare(old, next_name, source, deployment_key)?;
    let desired = source.desired(old);
    let next = next_to_create(old, prepared.next, desired);
    Ok(PairView {
        from: old.clone(),
        to_name: next.name().to_string(),
        to_replicas: 0,
        to_exists: false,
        desired,
        cleanup,
        to_create: Some(next),
    })
}
