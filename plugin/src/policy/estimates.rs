//! `spec.estimates`: the durations a site states for a cluster this tool has no history of, so
//! that a first plan's estimate rests on the site's own figures rather than built-in defaults.
//! Once runs have recorded what they measured, the history is used instead.

use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{Located, PolicyError, parse_duration};

/// The longest duration a stage may be stated to take.
const MAX_STATED: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawEstimates {
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
        let stated = |value: Option<Spanned<String>>, field: &str| {
            let Some(value) = value else {
                return Ok(None);
            };
            let d = parse_duration(&value.value).map_err(|m| self.of(&value, m))?;
            if d.is_zero() || d > MAX_STATED {
                let message = format!(
                    "estimates.{field} {:?}: expected more than 0 and at most 7d",
                    value.value
                );
                return Err(self.of(&value, message));
            }
            Ok(Some(d))
        };
        Ok(StatedDurations {
            drain: stated(raw.drain, "drain")?,
            replacement: stated(raw.replacement, "replacement")?,
            validation: stated(raw.validation, "validation")?,
            pods_back: stated(raw.pods_back, "podsBack")?,
        })
    }
}
