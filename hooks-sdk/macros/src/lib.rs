//! `#[policy]`, re-exported by `rollout-ext-hooks`: the points a hook declares are the ones its
//! `impl Policy` implements, so a point cannot be implemented and left undeclared (the host
//! never asks an undeclared point: a gate written but not declared would never hold a run); and
//! a point's method may take only the parameters it reads (`fn check(phase: Phase, batch:
//! &Batch)`), the others filled in, so that its signature stays one line; and a gate asked in
//! one phase only is written as that phase's method (`fn after_batch(batch: &Batch)`), the
//! `check` that asks it made here.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::{ToTokens, quote};
use syn::punctuated::Punctuated;
use syn::{FnArg, ImplItem, ImplItemFn, ItemImpl, Path, Type, parse_quote};

/// Each method of the `Policy` trait that serves a point, with the point (a `HookPoint`
/// variant; drain-order is declared by `ORDERS_DRAINS` instead).
const METHODS: &[(&str, Served)] = &[
    ("select", Served::Point("Select", "select")),
    ("next_batch", Served::Point("Batch", "batch")),
    ("check", Served::Point("Gate", "gate")),
    ("check_stage", Served::Point("Gate", "gate")),
    ("drain_order", Served::DrainOrder),
];

/// The methods that are a gate asked in one phase only, each with its `Phase` variant.
const PHASE_METHODS: &[(&str, &str)] = &[
    ("before_group", "BeforeGroup"),
    ("before_batch", "BeforeBatch"),
    ("after_batch", "AfterBatch"),
];

/// The parameters of each point's method, in the trait's order (`None`: not a point's method).
fn parameters(sdk: &Path, method: &str) -> Option<Vec<(&'static str, Type)>> {
    Some(match method {
        "before_group" | "before_batch" | "after_batch" => vec![
            ("ctx", parse_quote!(&#sdk::Context)),
            ("batch", parse_quote!(&#sdk::Batch)),
            ("summary", parse_quote!(&#sdk::ValidationSummary)),
        ],
        "select" => vec![
            ("ctx", parse_quote!(&#sdk::Context)),
            ("group", parse_quote!(&#sdk::Group)),
            ("candidates", parse_quote!(&#sdk::Instances)),
        ],
        "next_batch" => vec![
            ("ctx", parse_quote!(&#sdk::Context)),
            ("progress", parse_quote!(&#sdk::Progress)),
        ],
        "check" => vec![
            ("ctx", parse_quote!(&#sdk::Context)),
            ("phase", parse_quote!(#sdk::Phase)),
            ("batch", parse_quote!(&#sdk::Batch)),
            ("summary", parse_quote!(&#sdk::ValidationSummary)),
        ],
        "check_stage" => vec![
            ("ctx", parse_quote!(&#sdk::Context)),
            ("stage", parse_quote!(&#sdk::Stage)),
            ("previous", parse_quote!(Option<&#sdk::StageOutcome>)),
        ],
        "drain_order" => vec![
            ("ctx", parse_quote!(&#sdk::Context)),
            ("node", parse_quote!(&str)),
            ("pods", parse_quote!(&[#sdk::DrainPod])),
        ],
        _ => return None,
    })
}

/// A type as written, without its paths' prefixes or spaces: `&sdk::Batch` and `& Batch` are
/// one shape, `&Batch`.
fn shape(ty: &Type) -> String {
    let text: Vec<char> = ty.to_token_stream().to_string().chars().collect();
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::new();
    let mut i = 0;
    while i < text.len() {
        if word(text[i]) {
            let start = i;
            while i < text.len() && word(text[i]) {
                i += 1;
            }
            let mut after = i;
            while text.get(after) == Some(&' ') {
                after += 1;
            }
            if text.get(after..after + 2) == Some(&[':', ':']) {
                // A path's prefix: `sdk ::` of `sdk :: Batch`.
                i = after + 2;
            } else {
                out.extend(&text[start..i]);
            }
        } else if text.get(i..i + 2) == Some(&[':', ':']) {
            i += 2;
        } else {
            if text[i] != ' ' {
                out.push(text[i]);
            }
            i += 1;
        }
    }
    out
}

/// Fills in the parameters a point's method left out (each it takes is one of the trait's, in
/// the trait's order, by type); a method that takes them all is left as written.
fn fill_parameters(sdk: &Path, f: &mut ImplItemFn) -> syn::Result<()> {
    let Some(expected) = parameters(sdk, &f.sig.ident.to_string()) else {
        return Ok(());
    };
    if f.sig.inputs.len() >= expected.len() {
        return Ok(());
    }
    let given: Vec<FnArg> = f.sig.inputs.iter().cloned().collect();
    let mut inputs: Punctuated<FnArg, syn::Token![,]> = Punctuated::new();
    let mut next = given.iter().peekable();
    for (_, ty) in &expected {
        let matches = |arg: &&FnArg| matches!(arg, FnArg::Typed(t) if shape(&t.ty) == shape(ty));
        match next.next_if(matches) {
            Some(arg) => inputs.push(arg.clone()),
            None => inputs.push(parse_quote!(_: #ty)),
        }
    }
    if let Some(stray) = next.next() {
        let all: Vec<String> = (expected.iter())
            .map(|(name, ty)| format!("{name}: {}", shape(ty)))
            .collect();
        return Err(syn::Error::new_spanned(
            stray,
            format!(
                "`{}` takes, in this order, any of ({}): this parameter is none of them, or out of order",
                f.sig.ident,
                all.join(", ")
            ),
        ));
    }
    f.sig.inputs = inputs;
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum Served {
    /// A `HookPoint` variant and the point's name in a policy file.
    Point(&'static str, &'static str),
    DrainOrder,
}

/// On `impl Policy for MyPolicy { … }`: declares the points the impl implements (`POINTS`,
/// and `ORDERS_DRAINS` when it writes `drain_order`). An impl that writes `POINTS` itself does
/// not build when it leaves out a point it implements. A point's method may take only the
/// parameters it reads, in the trait's order (`fn check(phase: Phase, batch: &Batch)`): the
/// others are filled in. `#[policy(crate = sdk)]` names the SDK when the dependency is renamed.
#[proc_macro_attribute]
pub fn policy(attr: TokenStream, item: TokenStream) -> TokenStream {
    match expand(attr.into(), item.into()) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(attr: Tokens, item: Tokens) -> syn::Result<Tokens> {
    let sdk = sdk_path(attr)?;
    let mut imp: ItemImpl = syn::parse2(item)?;
    let Some((_, trait_path, _)) = imp.trait_.clone() else {
        return Err(syn::Error::new_spanned(
            &imp.self_ty,
            "#[policy] goes on the policy's trait impl: `impl Policy for MyPolicy { … }`",
        ));
    };
    let written =
        |name: &str| (imp.items.iter()).any(|i| matches!(i, ImplItem::Const(c) if c.ident == name));
    let (points_written, orders_written) = (written("POINTS"), written("ORDERS_DRAINS"));
    move_phase_gates(&sdk, &mut imp)?;
    let mut served: Vec<(&str, Served)> = Vec::new();
    for item in &mut imp.items {
        if let ImplItem::Fn(f) = item {
            fill_parameters(&sdk, f)?;
            let name = f.sig.ident.to_string();
            if let Some((method, point)) = METHODS.iter().find(|(m, _)| *m == name) {
                served.push((method, *point));
            }
        }
    }
    let mut variants: Vec<&str> = Vec::new();
    for (_, point) in &served {
        if let Served::Point(variant, _) = point
            && !variants.contains(variant)
        {
            variants.push(variant);
        }
    }
    let orders = served.iter().any(|(_, p)| *p == Served::DrainOrder);
    if !points_written {
        let variants = variants
            .iter()
            .map(|v| syn::Ident::new(v, proc_macro2::Span::call_site()));
        imp.items.push(parse_quote! {
            const POINTS: &'static [#sdk::HookPoint] = &[#(#sdk::HookPoint::#variants),*];
        });
    }
    if orders && !orders_written {
        imp.items
            .push(parse_quote! { const ORDERS_DRAINS: bool = true; });
    }
    // Written by hand: each point implemented must be among them, checked when it compiles (a
    // generic impl is not checked: its consts are not known until it is used).
    let mut checks = Tokens::new();
    if imp.generics.params.is_empty() {
        let self_ty = &imp.self_ty;
        let type_name = self_ty.to_token_stream().to_string();
        for (method, point) in &served {
            let check = match point {
                Served::Point(variant, name) if points_written => {
                    let message = format!(
                        "{type_name} implements `{method}` (point {name}) but its POINTS leaves out HookPoint::{variant}: add it, or remove POINTS (#[policy] declares the points implemented)"
                    );
                    let variant = syn::Ident::new(variant, proc_macro2::Span::call_site());
                    quote! {
                        #sdk::__declares(<#self_ty as #trait_path>::POINTS, #sdk::HookPoint::#variant),
                        #message
                    }
                }
                Served::DrainOrder if orders_written => {
                    let message = format!(
                        "{type_name} implements `drain_order` but sets ORDERS_DRAINS to false: set it to true, or remove it (#[policy] sets it)"
                    );
                    quote! { <#self_ty as #trait_path>::ORDERS_DRAINS, #message }
                }
                _ => continue,
            };
            checks.extend(quote! { const _: () = ::core::assert!(#check); });
        }
    }
    let phase_gates = take_phase_gates(&mut imp);
    Ok(quote! { #imp #phase_gates #checks })
}

/// The phase methods (`after_batch`, …) found in the impl, in the order written.
fn phase_methods(imp: &ItemImpl) -> Vec<(String, &'static str)> {
    (imp.items.iter())
        .filter_map(|item| match item {
            ImplItem::Fn(f) => PHASE_METHODS
                .iter()
                .find(|(m, _)| f.sig.ident == m)
                .map(|(m, variant)| (m.to_string(), *variant)),
            _ => None,
        })
        .collect()
}

/// When the impl writes phase methods: the `check` that asks each in its phase (and defers in
/// the others) joins the impl; a `check` written too is refused, since it is asked in every
/// phase.
fn move_phase_gates(sdk: &Path, imp: &mut ItemImpl) -> syn::Result<()> {
    let phases = phase_methods(imp);
    if phases.is_empty() {
        return Ok(());
    }
    if let Some(check) =
        (imp.items.iter()).find(|i| matches!(i, ImplItem::Fn(f) if f.sig.ident == "check"))
    {
        let names: Vec<&str> = phases.iter().map(|(m, _)| m.as_str()).collect();
        return Err(syn::Error::new_spanned(
            check,
            format!(
                "this impl writes `check`, asked in every phase, and {}, asked in one: keep `check` or the phase methods",
                names.join(" and ")
            ),
        ));
    }
    let arms = phases.iter().map(|(method, variant)| {
        let method = syn::Ident::new(method, proc_macro2::Span::call_site());
        let variant = syn::Ident::new(variant, proc_macro2::Span::call_site());
        quote! { #sdk::Phase::#variant => Self::#method(ctx, batch, summary), }
    });
    let others = (phases.len() < PHASE_METHODS.len())
        .then(|| quote! { _ => ::core::result::Result::Ok(#sdk::Verdict::Defer), });
    imp.items.push(parse_quote! {
        fn check(
            ctx: &#sdk::Context,
            phase: #sdk::Phase,
            batch: &#sdk::Batch,
            summary: &#sdk::ValidationSummary,
        ) -> ::core::result::Result<#sdk::Verdict, ::std::string::String> {
            match phase {
                #(#arms)*
                #others
            }
        }
    });
    Ok(())
}

/// The phase methods, taken out of the trait impl (they are not the trait's) into an inherent
/// impl of the same type.
fn take_phase_gates(imp: &mut ItemImpl) -> Tokens {
    let (methods, rest): (Vec<ImplItem>, Vec<ImplItem>) =
        imp.items.drain(..).partition(|item| {
            matches!(item, ImplItem::Fn(f) if PHASE_METHODS.iter().any(|(m, _)| f.sig.ident == m))
        });
    imp.items = rest;
    if methods.is_empty() {
        return Tokens::new();
    }
    let (generics, self_ty) = (&imp.generics, &imp.self_ty);
    let (params, _, where_clause) = generics.split_for_impl();
    quote! { impl #params #self_ty #where_clause { #(#methods)* } }
}

/// The SDK's path: `rollout_ext_hooks`, or what `crate = …` names.
fn sdk_path(attr: Tokens) -> syn::Result<Path> {
    if attr.is_empty() {
        return Ok(parse_quote!(::rollout_ext_hooks));
    }
    let arg: syn::MetaNameValue = syn::parse2(attr)?;
    if !arg.path.is_ident("crate") {
        return Err(syn::Error::new_spanned(
            &arg.path,
            "#[policy] takes only `crate = path` (the SDK's name, when the dependency is renamed)",
        ));
    }
    match arg.value {
        syn::Expr::Path(p) => Ok(p.path),
        other => Err(syn::Error::new_spanned(
            other,
            "`crate = ` takes a path: crate = sdk",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expanded(attr: Tokens, item: Tokens) -> String {
        expand(attr, item).unwrap().to_string()
    }

    #[test]
    fn the_points_declared_are_those_implemented() {
        let out = expanded(
            Tokens::new(),
            quote! {
                impl Policy for Site {
                    const NAME: &'static str = "site";
                    fn check() {}
                    fn check_stage() {}
                    fn select() {}
                    fn validate_config() {}
                }
            },
        );
        let points = "const POINTS : & 'static [:: rollout_ext_hooks :: HookPoint] = & [:: rollout_ext_hooks :: HookPoint :: Gate , :: rollout_ext_hooks :: HookPoint :: Select] ;";
        assert!(out.contains(points), "{out}");
        assert!(!out.contains("ORDERS_DRAINS"), "{out}");
        assert!(!out.contains("assert"), "nothing written to check: {out}");
    }

    #[test]
    fn drain_order_sets_orders_drains_and_a_renamed_sdk_is_used() {
        let out = expanded(
            quote!(crate = sdk),
            quote! { impl sdk::Policy for Tiers { fn drain_order() {} } },
        );
        assert!(
            out.contains("const POINTS : & 'static [sdk :: HookPoint] = & [] ;"),
            "{out}"
        );
        assert!(out.contains("const ORDERS_DRAINS : bool = true ;"), "{out}");
    }

    #[test]
    fn points_written_by_hand_are_checked_against_those_implemented() {
        let out = expanded(
            Tokens::new(),
            quote! {
                impl Policy for Site {
                    const POINTS: &'static [HookPoint] = &[HookPoint::Select];
                    fn select() {}
                    fn next_batch() {}
                }
            },
        );
        assert_eq!(out.matches(":: core :: assert !").count(), 2, "{out}");
        assert!(
            out.contains("\"Site implements `next_batch` (point batch) but its POINTS leaves out HookPoint::Batch: add it, or remove POINTS (#[policy] declares the points implemented)\""),
            "{out}"
        );
    }

    #[test]
    fn a_method_may_take_only_the_parameters_it_reads() {
        let out = expanded(
            Tokens::new(),
            quote! {
                impl Policy for Site {
                    fn check(phase: Phase, b: &rollout_ext_hooks::Batch) -> Result<Verdict, String> {}
                    fn select(candidates: &Instances) -> Result<Selection, String> {}
                    fn next_batch(_: &Context, p: &Progress) -> Result<BatchSize, String> {}
                }
            },
        );
        let check = "fn check (_ : & :: rollout_ext_hooks :: Context , phase : Phase , b : & rollout_ext_hooks :: Batch , _ : & :: rollout_ext_hooks :: ValidationSummary)";
        assert!(out.contains(check), "{out}");
        let select = "fn select (_ : & :: rollout_ext_hooks :: Context , _ : & :: rollout_ext_hooks :: Group , candidates : & Instances)";
        assert!(out.contains(select), "{out}");
        // All of them: as written.
        assert!(
            out.contains("fn next_batch (_ : & Context , p : & Progress)"),
            "{out}"
        );
    }

    #[test]
    fn a_phase_method_is_asked_by_a_check_made_for_it() {
        let out = expanded(
            Tokens::new(),
            quote! {
                impl Policy for Site {
                    fn after_batch(b: &Batch) -> Result<Verdict, String> {}
                    fn before_group(_: &Context) -> Result<Verdict, String> {}
                }
            },
        );
        let arms = ":: rollout_ext_hooks :: Phase :: AfterBatch => Self :: after_batch (ctx , batch , summary) , :: rollout_ext_hooks :: Phase :: BeforeGroup => Self :: before_group (ctx , batch , summary) , _ => :: core :: result :: Result :: Ok (:: rollout_ext_hooks :: Verdict :: Defer) ,";
        assert!(out.contains(arms), "{out}");
        assert!(out.contains("HookPoint :: Gate]"), "{out}");
        // The phase methods move to an inherent impl, their parameters filled in.
        let inherent = "impl Site { fn after_batch (_ : & :: rollout_ext_hooks :: Context , b : & Batch , _ : & :: rollout_ext_hooks :: ValidationSummary)";
        assert!(out.contains(inherent), "{out}");
        let all = expanded(
            Tokens::new(),
            quote! { impl Policy for S { fn before_group() {} fn before_batch() {} fn after_batch() {} } },
        );
        assert!(!all.contains("_ =>"), "every phase served: {all}");
    }

    #[test]
    fn check_and_a_phase_method_are_refused_together() {
        let e = expand(
            Tokens::new(),
            quote! { impl Policy for S { fn after_batch() {} fn check() {} } },
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "this impl writes `check`, asked in every phase, and after_batch, asked in one: keep `check` or the phase methods"
        );
    }

    #[test]
    fn shapes_ignore_paths_and_spaces() {
        let shape_of = |ty: Type| shape(&ty);
        assert_eq!(shape_of(parse_quote!(&[sdk::DrainPod])), "&[DrainPod]");
        assert_eq!(
            shape_of(parse_quote!(Option<&::a::b::StageOutcome>)),
            "Option<&StageOutcome>"
        );
        assert_eq!(shape_of(parse_quote!(&str)), "&str");
    }

    #[test]
    fn a_parameter_that_is_none_of_the_points_is_refused_with_the_list() {
        let e = expand(
            Tokens::new(),
            quote! { impl Policy for S { fn check(b: &Batch, phase: Phase) -> Result<Verdict, String> {} } },
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "`check` takes, in this order, any of (ctx: &Context, phase: Phase, batch: &Batch, summary: &ValidationSummary): this parameter is none of them, or out of order"
        );
    }

    #[test]
    fn anything_but_a_trait_impl_is_refused() {
        let e = expand(Tokens::new(), quote! { impl Site { fn select() {} } }).unwrap_err();
        assert!(
            e.to_string()
                .contains("#[policy] goes on the policy's trait impl"),
            "{e}"
        );
        let e = expand(quote!(sdk = x), quote! { impl Policy for S {} }).unwrap_err();
        assert!(e.to_string().contains("takes only `crate = path`"), "{e}");
    }
}
