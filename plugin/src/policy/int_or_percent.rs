//! Kubernetes' IntOrString as budgets use it: a count, or a percentage of the group.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer};

/// An absolute count or a percentage of the group's instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(u32),
    Percent(u32),
}

impl fmt::Display for IntOrPercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrPercent::Int(n) => write!(f, "{n}"),
            IntOrPercent::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl std::str::FromStr for IntOrPercent {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let expected =
            "expected a whole number (like 2) or a percentage from 0% to 100% (like 25%)";
        let text = text.trim();
        if let Some(p) = text.strip_suffix('%') {
            return match p.parse::<u32>() {
                Ok(p) if p <= 100 => Ok(IntOrPercent::Percent(p)),
                _ => Err(format!("invalid value {text:?}: {expected}")),
            };
        }
        text.parse::<u32>()
            .map(IntOrPercent::Int)
            .map_err(|_| format!("invalid value {text:?}: {expected}"))
    }
}

impl<'de> Deserialize<'de> for IntOrPercent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = IntOrPercent;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a whole number (like 2) or a percentage string (like \"25%\")")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrPercent, E> {
                u32::try_from(v)
                    .map(IntOrPercent::Int)
                    .map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrPercent, E> {
                if v < 0 {
                    return Err(E::custom(format!(
                        "invalid value {v}: must not be negative"
                    )));
                }
                self.visit_u64(v as u64)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<IntOrPercent, E> {
                Err(E::custom(format!(
                    "invalid value {v}: expected a whole number or a percentage like \"25%\""
                )))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrPercent, E> {
                // As Kubernetes' IntOrString: a string must be a percentage.
                if !v.trim().ends_with('%') {
                    return Err(E::custom(format!(
                        "invalid value {v:?}: a string must be a percentage like \"25%\"; write a count without quotes"
                    )));
                }
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}
