//! Exports `rollout-ext:policy/metadata@0.2.0`: the host must refuse it before calling anything.

wit_bindgen::generate!({
    inline: r#"
        package rollout-ext:policy@0.2.0;
        interface metadata {
            describe: func() -> string;
        }
        world policy {
            export metadata;
        }
    "#,
});

struct FromTheFuture;

impl exports::rollout_ext::policy::metadata::Guest for FromTheFuture {
    fn describe() -> String {
        "from the future".into()
    }
}

#[cfg(target_arch = "wasm32")]
export!(FromTheFuture);
