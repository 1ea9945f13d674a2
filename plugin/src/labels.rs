//! Labels and label selectors with Kubernetes semantics: the structured `LabelSelector` of
//! PodDisruptionBudgets and the string form of `-l`/`--pod-selector` (`app=web,tier!=db,
//! env in (a,b),!legacy`).

use serde::Deserialize;

/// An object's labels (or annotations), sorted by key. A sorted vector: objects carry a few, and
/// the 150,000 pods of a large snapshot each held a B-tree leaf of half a kilobyte for them.
pub type Labels = litemap::LiteMap<String, String>;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    #[serde(default)]
    pub values: Vec<String>,
}

impl Requirement {
    fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

/// A structured selector. The default selects everything; [`LabelSelector::nothing`] nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default)]
    pub match_labels: Labels,
    #[serde(default)]
    pub match_expressions: Vec<Requirement>,
    #[serde(skip)]
    matches_nothing: bool,
}

impl LabelSelector {
    pub fn nothing() -> Self {
        LabelSelector {
            matches_nothing: true,
            ..Default::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        !self.matches_nothing
            && self
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }

    /// Parses the string form used by kubectl's `-l`.
    pub fn parse(text: &str) -> Result<LabelSelector, String> {
        let mut selector = LabelSelector::default();
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            selector.match_expressions.push(parse_term(term)?);
        }
        Ok(selector)
    }
}

/// Splits on commas outside parentheses.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, ch) in text.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

fn parse_term(term: &str) -> Result<Requirement, String> {
    let invalid = || format!("invalid label selector term {term:?}");
    let requirement = |key: &str, operator, values: Vec<String>| {
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(invalid());
        }
        Ok(Requirement {
            key: key.to_string(),
            operator,
            values,
        })
    };
    if let Some(key) = term.strip_prefix('!') {
        return requirement(key, Operator::DoesNotExist, vec![]);
    }
    if let Some((key, value)) = term.split_once("!=") {
        return requirement(key, Operator::NotIn, vec![value.trim().to_string()]);
    }
    if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return requirement(key, Operator::In, vec![value.trim().to_string()]);
    }
    for (word, operator) in [(" notin ", Operator::NotIn), (" in ", Operator::In)] {
        if let Some((key, set)) = term.split_once(word) {
            let set = set.trim();
            let inner = set
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(invalid)?;
            let values = inner.split(',').map(|v| v.trim().to_string()).collect();
            return requirement(key, operator, values);
        }
    }
    requirement(term, Operator::Exists, vec![])
}

/// Labels from `key, value` pairs, for tests.
#[cfg(test)]
pub(crate) fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_selectors() {
        let web = labels(&[("app", "web"), ("env", "prod")]);
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app=db", false),
            ("env in (prod, staging)", true),
            ("env notin (prod)", false),
            ("app", true),
            ("!app", false),
            ("!legacy,app=web", true),
            ("", true),
        ];
        for (text, expected) in cases {
            let s = LabelSelector::parse(text).unwrap();
            assert_eq!(s.matches(&web), expected, "{text}");
        }
        assert!(LabelSelector::parse("env in prod").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
    }

    #[test]
    fn structured_selectors() {
        let s: LabelSelector = serde_json::from_str(
            r#"{"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]}"#,
        )
        .unwrap();
        assert!(s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(LabelSelector::default().matches(&labels(&[])));
        assert!(!LabelSelector::nothing().matches(&labels(&[])));
    }

    #[test]
    fn labels_read_in_any_order_are_sorted_and_the_last_of_a_repeated_key_wins() {
        let read: Labels =
            serde_json::from_str(r#"{"zone": "a", "app": "web", "tier": "db", "app": "api"}"#)
                .unwrap();
        let pairs: Vec<(&str, &str)> = read.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        assert_eq!(pairs, [("app", "api"), ("tier", "db"), ("zone", "a")]);
        assert_eq!(
            serde_json::to_string(&read).unwrap(),
            r#"{"app":"api","tier":"db","zone":"a"}"#
        );
    }
}
