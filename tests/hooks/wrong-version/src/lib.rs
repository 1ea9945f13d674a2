//! Exports `rollout-ext:policy/metadata@0.1.0`, as a module built against the previous contract
//! does: the host must refuse it before calling anything.

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
