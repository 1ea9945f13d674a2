//! Exports `rollout-ext:policy/metadata@0.1.0` and a gate, as a module built against an older
//! contract does (another minor version than the SDK's `wit/policy.wit`): the host must refuse
//! to load it before calling anything, and `hooks inspect` still describes it. Its WIT is
//! inline, so a bump of the real contract leaves it behind.

wit_bindgen::generate!({
    inline: r#"
        package rollout-ext:policy@0.1.0;
        interface types {
            enum hook-point { select, batch, gate }
            record info {
                name: string,
                sdk-version: string,
                wit-version: string,
                points: list<hook-point>,
            }
        }
        interface metadata {
            use types.{info};
            describe: func() -> info;
        }
        interface gates {
            check: func(batch: u32) -> bool;
        }
        world policy {
            export metadata;
            export gates;
        }
    "#,
});

use exports::rollout_ext::policy::{gates, metadata};
use rollout_ext::policy::types::{HookPoint, Info};

struct FromThePast;

impl metadata::Guest for FromThePast {
    fn describe() -> Info {
        Info {
            name: "from-the-past".into(),
            sdk_version: "0.1.0".into(),
            wit_version: "0.1.0".into(),
            points: vec![HookPoint::Gate],
        }
    }
}

impl gates::Guest for FromThePast {
    fn check(_batch: u32) -> bool {
        true
    }
}

#[cfg(target_arch = "wasm32")]
export!(FromThePast);
