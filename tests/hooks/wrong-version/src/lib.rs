//! Exports `rollout-ext:policy/metadata@0.1.0`, as a module built against an older contract does
//! (another minor version than the SDK's `wit/policy.wit`): the host must refuse it before
//! calling anything. Its WIT is inline, so a bump of the real contract leaves it behind.

wit_bindgen::generate!({
    inline: r#"
        package rollout-ext:policy@0.1.0;
        interface metadata {
            describe: func() -> string;
        }
        world policy {
            export metadata;
        }
    "#,
});

struct FromThePast;

impl exports::rollout_ext::policy::metadata::Guest for FromThePast {
    fn describe() -> String {
        "from the past".into()
    }
}

#[cfg(target_arch = "wasm32")]
export!(FromThePast);
