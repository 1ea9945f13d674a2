//! `spec.estimates`: the durations a site states for a cluster this tool has no history of, so
//! that a first plan's estimate rests on the site's own figures rather than built-in defaults.
//! Once runs have recorded what they measured, the history is used instead.

use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{Located, PolicyError, parse_duration};

/// The longest duration a stage may be stated to take.
const MAX_STATED: Duration = Duration::from_secs(7 * 24 * 3600);

/// An `estimates` section as written (a policy's `spec.estimates`, a `hooks test` fixture's
/// `estimates`): each stage a duration such as `5m`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawEstimates {
    drain: Option<Spanned<String>>,
    replacement: Option<Spanned<String>>,
    validation: Option<Spanned<String>>,
    pods_back: Option<Spanned<String>>,
}

/// The stated durations; none where the policy states none.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StatedDurations {
    /// A batch's drain, per budget wave.
    pub drain: Option<Duration>,
    /// From termination to the replacements Ready.
    pub replacement: Option<Duration>,
    /// From the replacements Ready to the cluster validated.
    pub validation: Option<Duration>,
    /// From termination to the evicted pods Ready again (groups kept by their pods).
    pub pods_back: Option<Duration>,
}

impl Located<'_> {
    /// The `estimates` section: each a duration more than 0 and at most 7 days.
    pub(super) fn estimates(&self, raw: RawEstimates) -> Result<StatedDurations, PolicyError> {
        raw.stated(|value, message| self.of(value, message))
    }
}

impl RawEstimates {
    /// The durations stated, each more than 0 and at most 7 days; `at` places an error at the
    /// value it is about.
    pub fn stated<E>(
        self,
        at: impl Fn(&Spanned<String>, String) -> E,
    ) -> Result<StatedDurations, E> {
        let stated = |value: Option<Spanned<String>>, field: &str| {
            let Some(value) = value else {
                return Ok(None);
            };
            let d = parse_duration(&value.value).map_err(|m| at(&value, m))?;
            if d.is_zero() || d > MAX_STATED {
                let message = format!(
                    "estimates.{field} {:?}: expected more than 0 and at most 7d",
                    value.value
                );
                return Err(at(&value, message));
            }
            Ok(Some(d))
        };
        Ok(StatedDurations {
            drain: stated(self.drain, "drain")?,
            replacement: stated(self.replacement, "replacement")?,
            validation: stated(self.validation, "validation")?,
            pods_back: stated(self.pods_back, "podsBack")?,
        })
    }
}
