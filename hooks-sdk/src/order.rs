//! Orders of candidates with a reason for each choice: by one key ([`choose_by`]), or by named
//! rules whose reasons say which rule placed the choice ([`choose_by_rules`]); and counts by key
//! ([`count_by`]), candidates per zone.

use std::collections::BTreeMap;
use std::ops::Deref;

use crate::{Candidate, Choice, Instance, Selection};

/// A selection of `items` ordered by `key`, smallest first, each with the reason `reason` gives.
/// Several rules are one tuple key, the first deciding (`false` before `true`, `None` before
/// any value, [`std::cmp::Reverse`] for largest first); ties keep the order they came in. `key`
/// and `reason` are called once per item, so a label read in them is one host call each.
///
/// ```
/// use std::cmp::Reverse;
/// use rollout_ext_hooks::{choose_by, count_by, testing, zone, Selection};
///
/// let candidates = testing::candidates(vec![
///     testing::node("a1", "a"),
///     testing::node("b1", "b").with_label("drain-first", "yes"),
///     testing::node("a2", "a"),
/// ]);
/// let zones = count_by(candidates.iter(), |c| zone(c).to_string());
/// let first = |c: &rollout_ext_hooks::Candidate| c.label("drain-first").is_none();
/// let chosen = choose_by(
///     candidates.iter(),
///     |c| (first(c), Reverse(zones[zone(c)])),
///     |c| format!("zone {} has {}", zone(c), zones[zone(c)]),
/// );
/// let Selection::Choose(chosen) = chosen else { unreachable!() };
/// let names: Vec<&str> = chosen.iter().map(|c| c.name.as_str()).collect();
/// assert_eq!(names, ["b1", "a1", "a2"]);
/// assert_eq!(chosen[1].reason, "zone a has 2");
/// ```
pub fn choose_by<T, K, R>(
    items: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> K,
    reason: impl Fn(&T) -> R,
) -> Selection
where
    T: Deref<Target = Instance>,
    K: Ord,
    R: Into<String>,
{
    let mut keyed: Vec<(K, T)> = items.into_iter().map(|i| (key(&i), i)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let choices = keyed.iter().map(|(_, i)| Choice::new(&i.name, reason(i)));
    Selection::Choose(choices.collect())
}

/// One rule of an order of candidates: its name, which the reason of a choice it decides says,
/// and a key, smallest first. The constructors say which way it orders; their closures take a
/// [`Candidate`], so they need no type written.
pub struct Rule<'a> {
    name: String,
    key: RuleKey<'a>,
    detail: Option<RuleDetail<'a>>,
}

/// A rule's key of a candidate.
type RuleKey<'a> = Box<dyn Fn(&Candidate<'_>) -> i64 + 'a>;
/// What a rule's reason says of a candidate after the rule's name.
type RuleDetail<'a> = Box<dyn Fn(&Candidate<'_>) -> String + 'a>;

impl<'a> Rule<'a> {
    /// Those `first` holds for, before the others.
    pub fn first(name: impl Into<String>, first: impl Fn(&Candidate<'_>) -> bool + 'a) -> Self {
        Rule::least(name, move |c| i64::from(!first(c)))
    }

    /// Those `last` holds for, after the others.
    pub fn last(name: impl Into<String>, last: impl Fn(&Candidate<'_>) -> bool + 'a) -> Self {
        Rule::least(name, move |c| i64::from(last(c)))
    }

    /// Smallest `value` first (fewest pods, oldest creation time).
    pub fn least(name: impl Into<String>, value: impl Fn(&Candidate<'_>) -> i64 + 'a) -> Self {
        Rule {
            name: name.into(),
            key: Box::new(value),
            detail: None,
        }
    }

    /// Largest `value` first (most pods, the zone with most candidates).
    pub fn most(name: impl Into<String>, value: impl Fn(&Candidate<'_>) -> i64 + 'a) -> Self {
        Rule::least(name, move |c| value(c).saturating_neg())
    }

    /// What a reason this rule gives says after its name: `largest zone first: zone a has 3`.
    pub fn said<S: Into<String>>(mut self, detail: impl Fn(&Candidate<'_>) -> S + 'a) -> Self {
        self.detail = Some(Box::new(move |c| detail(c).into()));
        self
    }
}

/// A selection of `candidates` ordered by `rules`, the first deciding and each later one breaking
/// the ties of those before it (ties on every rule keep the order they came in). Each choice's
/// reason names the rule that puts it before the next one, with the rule's detail when it has
/// one; the last says which one it follows and by what rule (`after a2 by largest zone first`),
/// candidates tied on every rule say so, and a lone one is "the only candidate". Keys are read
/// once per candidate and rule.
///
/// ```
/// use rollout_ext_hooks::{choose_by_rules, count_by, testing, zone, Rule, Selection};
///
/// let candidates = testing::candidates(vec![
///     testing::node("a1", "a"),
///     testing::node("b1", "b").with_label("tier", "spot"),
///     testing::node("a2", "a"),
///     testing::node("c1", "c"),
/// ]);
/// let zones = count_by(candidates.iter(), |c| zone(c).to_string());
/// let rules = [
///     Rule::first("spot first", |c| c.label("tier").as_deref() == Some("spot")),
///     Rule::most("largest zone first", |c| zones[zone(c)] as i64)
///         .said(|c| format!("zone {} has {}", zone(c), zones[zone(c)])),
///     Rule::least("oldest first", |c| c.created.unwrap_or(i64::MIN)),
/// ];
/// let Selection::Choose(chosen) = choose_by_rules(candidates.iter(), &rules) else {
///     unreachable!()
/// };
/// let said: Vec<(&str, &str)> =
///     chosen.iter().map(|c| (c.name.as_str(), c.reason.as_str())).collect();
/// assert_eq!(
///     said,
///     [
///         ("b1", "spot first"),
///         ("a1", "tied with a2 on every rule"),
///         ("a2", "largest zone first: zone a has 2"),
///         ("c1", "after a2 by largest zone first: zone c has 1"),
///     ]
/// );
/// ```
pub fn choose_by_rules<'c>(
    candidates: impl IntoIterator<Item = Candidate<'c>>,
    rules: &[Rule<'_>],
) -> Selection {
    let mut keyed: Vec<(Vec<i64>, Candidate<'c>)> = (candidates.into_iter())
        .map(|c| (rules.iter().map(|r| (r.key)(&c)).collect(), c))
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let choices = (0..keyed.len()).map(|at| {
        let (keys, item) = &keyed[at];
        let (next, last) = (keyed.get(at + 1), at + 1 == keyed.len());
        let neighbour = next.or_else(|| keyed.get(at.checked_sub(1)?));
        let reason = match neighbour {
            None => "the only candidate".to_string(),
            Some((other, other_item)) => match (0..rules.len()).find(|&r| keys[r] != other[r]) {
                Some(r) => {
                    let rule = match &rules[r].detail {
                        Some(detail) => format!("{}: {}", rules[r].name, detail(item)),
                        None => rules[r].name.clone(),
                    };
                    // The last is placed after the one before it, not before anything.
                    match last {
                        true => format!("after {} by {rule}", other_item.name),
                        false => rule,
                    }
                }
                None => format!("tied with {} on every rule", other_item.name),
            },
        };
        Choice::new(&item.name, reason)
    });
    Selection::Choose(choices.collect())
}

/// How many of `items` there are of each `key`: candidates per zone, pods per node. A key never
/// seen counts 0 (`counts[key]` does not panic).
pub fn count_by<T, K: Ord>(items: impl IntoIterator<Item = T>, key: impl Fn(&T) -> K) -> Counts<K> {
    let mut counts = BTreeMap::new();
    for item in items {
        *counts.entry(key(&item)).or_insert(0) += 1;
    }
    Counts(counts)
}

/// Counts by key, as [`count_by`] makes them: `counts[key]` is 0 for a key never seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts<K>(pub BTreeMap<K, usize>);

impl<K: Ord> Counts<K> {
    /// The count of `key`, 0 when never seen.
    pub fn get<Q>(&self, key: &Q) -> usize
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.get(key).copied().unwrap_or(0)
    }
}

impl<K: Ord, Q: Ord + ?Sized> std::ops::Index<&Q> for Counts<K>
where
    K: std::borrow::Borrow<Q>,
{
    type Output = usize;
    fn index(&self, key: &Q) -> &usize {
        self.0.get(key).unwrap_or(&0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zone;

    #[test]
    fn a_lone_candidate_and_a_zone_never_seen_are_said_as_they_are() {
        use crate::testing;
        let one = testing::candidates(vec![testing::node("n1", "a")]);
        let zones = count_by(one.iter(), |c| zone(c).to_string());
        assert_eq!((zones["a"], zones["b"], zones.get("b")), (1, 0, 0));
        let rules = [Rule::first("spot first", |c| c.label("tier").is_some())];
        let Selection::Choose(chosen) = choose_by_rules(one.iter(), &rules) else {
            unreachable!()
        };
        assert_eq!(chosen[0].reason, "the only candidate");
    }

    #[test]
    fn a_last_rule_puts_those_it_holds_for_after_the_others() {
        use crate::testing;
        let nodes = vec![
            testing::node("db", "a").with_label("db", "yes"),
            testing::node("web", "a"),
        ];
        let all = testing::candidates(nodes);
        let db = |c: &Candidate<'_>| c.label("db").is_some();
        let rules = [
            Rule::last("databases last", db).said(|c| if db(c) { "a database" } else { "none" })
        ];
        let Selection::Choose(chosen) = choose_by_rules(all.iter(), &rules) else {
            unreachable!()
        };
        let order: Vec<(&str, &str)> = (chosen.iter())
            .map(|c| (c.name.as_str(), c.reason.as_str()))
            .collect();
        assert_eq!(
            order,
            [
                ("web", "databases last: none"),
                ("db", "after web by databases last: a database")
            ]
        );
    }
}
