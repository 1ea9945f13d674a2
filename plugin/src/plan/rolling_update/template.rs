//! The pod template a workload update asks for (a new image, or a file's template), and the
//! comparisons and queries StatefulSets and DaemonSets share.

use serde_json::{Value, json};

use super::controller::container_index;

/// How the new pod template is made.
#[derive(Debug, Clone)]
pub enum TemplateChange {
    /// The current template with one container's image changed.
    Image {
        image: String,
        container: Option<String>,
        pull_policy: Option<String>,
    },
    /// The template of a StatefulSet read from a file.
    File(Value),
}

/// The pod template of `workload` (shown as `display`) after `change`.
pub fn changed(workload: &Value, display: &str, change: &TemplateChange) -> Result<Value, String> {
    match change {
        TemplateChange::Image {
            image,
            container,
            pull_policy,
        } => {
            let mut template = workload["spec"]["template"].clone();
            let containers = template["spec"]["containers"]
                .as_array()
                .map_or(&[][..], Vec::as_slice);
            let index = container_index(containers, display, container.as_deref())?;
            let c = &mut template["spec"]["containers"][index];
            c["image"] = json!(image);
            if let Some(policy) = pull_policy {
                c["imagePullPolicy"] = json!(policy);
            }
            Ok(template)
        }
        TemplateChange::File(file) => {
            let template = file["spec"]["template"].clone();
            if template.is_null() {
                return Err(format!(
                    "the file's {} has no spec.template",
                    file["kind"].as_str().unwrap_or("workload")
                ));
            }
            let selects = workload["spec"]["selector"]["matchLabels"]
                .as_object()
                .into_iter()
                .flatten()
                .all(|(k, v)| &template["metadata"]["labels"][k] == v);
            if !selects {
                return Err(format!(
                    "the file's pod template lacks the labels {display} selects (its selector cannot change)"
                ));
            }
            Ok(template)
        }
    }
}

/// A label selector (`matchLabels` and `matchExpressions`) as a list query.
pub fn selector_query(selector: &Value) -> String {
    let mut terms: Vec<String> = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some(format!("{k}={}", v.as_str()?)))
        .collect();
    for e in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = e["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        terms.push(match e["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "DoesNotExist" => format!("!{key}"),
            _ => key.to_string(),
        });
    }
    terms.join(",")
}

/// `have` holds everything `want` sets (objects compared member by member, lists in full).
pub fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (_, Value::Null) => true,
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| contains(h.get(k).unwrap_or(&Value::Null), v)),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(h, w)| contains(h, w))
        }
        (h, w) => h == w,
    }
}

/// The strategy patch that puts `original` back: type and rollingUpdate both said, since a merge
/// patch would keep this tool's rollingUpdate beside an OnDelete type.
pub fn restoring_strategy(original: &Value) -> Value {
    json!({
        "type": original["type"].as_str().unwrap_or("RollingUpdate"),
        "rollingUpdate": original.get("rollingUpdate").cloned().unwrap_or(Value::Null),
    })
}
