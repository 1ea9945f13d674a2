use super::*;

fn parse(text: &str) -> Result<Policy, PolicyError> {
    Policy::parse(text, "policy.yaml", Path::new("/p"))
}

const FULL: &str = "\
apiVersion: rollout-ext/v1alpha1
kind: RolloutPolicy
spec:
  groupLabel: pool
  rollingUpdate: {maxSurge: 0, maxUnavailable: 1}
  groups:
    - name: nodes-a
      rollingUpdate:
        maxSurge: 25%
  hooks:
    - name: zone-spread
      module: hooks/zone_spread.wasm
      sha256: \"sha256:ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789\"
      points: [select, batch]
      config: {maxPerZone: 1}
      timeout: 500ms
      memory: 32Mi
      failurePolicy: Ignore
  contextResources:
    - {apiVersion: v1, kind: ConfigMap, namespace: ops}
  provider:
    exec:
      terminate: [sim-cloud, terminate, \"{node}\"]
      detach: [sim-cloud, detach, \"{node}\"]
      timeout: 1m
";

#[test]
fn reads_a_full_policy() {
    let p = parse(FULL).unwrap();
    assert_eq!(p.group_label.as_deref(), Some("pool"));
    assert_eq!(p.rolling_update.max_surge, Some(IntOrPercent::Int(0)));
    let g = p.group("nodes-a").unwrap();
    assert_eq!(g.rolling_update.max_surge, Some(IntOrPercent::Percent(25)));
    assert_eq!(g.rolling_update.max_unavailable, None);
    assert_eq!(g.max_surge_line, 9);
    let h = &p.hooks[0];
    assert_eq!(
        h.module.file(),
        Some(Path::new("/p/hooks/zone_spread.wasm"))
    );
    assert_eq!(
        h.sha256.as_deref(),
        Some("abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789")
    );
    assert_eq!(
        h.points.as_deref(),
        Some(&[HookPoint::Select, HookPoint::Batch][..])
    );
    assert_eq!(h.config, r#"{"maxPerZone":1}"#);
    assert_eq!(h.config_line, 15);
    assert_eq!(h.timeout, Duration::from_millis(500));
    assert_eq!(h.memory, 32 << 20);
    assert_eq!(h.failure_policy, FailurePolicy::Ignore);
    assert_eq!(h.line, 11);
    assert_eq!(p.context_resources[0].kind, "ConfigMap");
    match p.provider.unwrap() {
        ProviderSpec::Exec(e) => assert_eq!(e.terminate, ["sim-cloud", "terminate", "{node}"]),
        other => panic!("expected exec, got {other:?}"),
    }
}

#[test]
fn defaults_for_a_hook() {
    let p = parse(
            "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n  - {name: g, module: g.wasm}\n",
        )
        .unwrap();
    let h = &p.hooks[0];
    assert_eq!(h.points, None, "every point the module implements");
    assert_eq!(h.config_line, 5);
    assert_eq!(h.timeout, DEFAULT_HOOK_TIMEOUT);
    assert_eq!(h.memory, DEFAULT_HOOK_MEMORY);
    assert_eq!(h.failure_policy, FailurePolicy::Fail);
    assert_eq!(h.config, "{}");
}

/// Each bad input, the line the error must name, and a fragment of its message.
#[test]
fn bad_policies_name_the_line() {
    let head = "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n";
    let cases: &[(&str, u32, &str)] = &[
        ("  rollingUpdate: {maxSurge: 150%}\n", 4, "percentage"),
        ("  rollingUpdate: {maxSurge: -1}\n", 4, "negative"),
        (
            "  rollingUpdate: {maxUnavailable: 1.5}\n",
            4,
            "whole number",
        ),
        (
            "  rollingUpdate: {maxUnavailable: \"3\"}\n",
            4,
            "without quotes",
        ),
        ("  rollingUpdate: {maxSurge: 1, surge: 2}\n", 4, "surge"),
        ("  groupLable: x\n", 4, "groupLable"),
        (
            "  contextResources:\n",
            4,
            "contextResources has no value: give it a list (`contextResources: []` for none) or leave it out",
        ),
        (
            "  hooks:\n  rollingUpdate: {maxSurge: 1}\n",
            4,
            "hooks has no value: give it a list",
        ),
        (
            "  hooks:\n  - {name: a, module: a.wasm, points: [pick]}\n",
            5,
            "pick",
        ),
        (
            "  hooks:\n  - {name: a, module: a.wasm, points: []}\n",
            5,
            "enables no points",
        ),
        (
            "  hooks:\n  - {name: a, module: a.wasm, points: [gate], timeout: 2 s}\n",
            5,
            "duration",
        ),
        (
            "  hooks:\n  - {name: a, module: a.wasm, points: [gate], memory: 1TB}\n",
            5,
            "invalid quantity",
        ),
        (
            "  hooks:\n  - {name: a, module: a.wasm, points: [gate], memory: 1Ti}\n",
            5,
            "between 1Mi and 4Gi",
        ),
        (
            "  hooks:\n  - {name: a, module: a.wasm, points: [gate], sha256: abc}\n",
            5,
            "64 hexadecimal",
        ),
        (
            "  hooks:\n  - {name: a, module: a.wasm, points: [gate], failurePolicy: Maybe}\n",
            5,
            "Maybe",
        ),
        (
            "  hooks:\n  - {name: a, module: a.wasm, points: [gate]}\n  - {name: a, module: b.wasm, points: [gate]}\n",
            6,
            "twice",
        ),
        (
            "  hooks:\n  - {name: A_1, module: a.wasm, points: [gate]}\n",
            5,
            "lowercase",
        ),
        ("  groups:\n  - {name: g}\n  - {name: g}\n", 6, "twice"),
        (
            "  provider:\n    exec: {terminate: [kill, \"{instance}\"]}\n",
            5,
            "unknown placeholder {instance}",
        ),
        ("  provider:\n    ssh: {}\n", 5, "ssh"),
        (
            "  provider:\n    clusterAPI: {terminate: Drop}\n",
            5,
            "unknown variant `Drop`, expected one of ScaleDown, DeleteMachine",
        ),
        (
            "  provider:\n    clusterAPI: {timeout: soon}\n",
            5,
            "clusterAPI timeout",
        ),
        (
            "  othersDisruptions: Skip\n",
            4,
            "unknown variant `Skip`, expected one of Count, Ignore",
        ),
    ];
    for (body, line, fragment) in cases {
        let err = parse(&format!("{head}{body}")).expect_err(body);
        assert_eq!(err.line, *line, "{body}: {err}");
        assert!(err.message.contains(fragment), "{body}: {err}");
        assert!(err.to_string().starts_with("policy.yaml:"), "{err}");
    }
}

#[test]
fn wrong_header() {
    let err = parse("apiVersion: v1\nkind: RolloutPolicy\n").unwrap_err();
    assert_eq!(err.line, 1);
    assert!(err.message.contains(API_VERSION), "{err}");
    let err = parse("apiVersion: rollout-ext/v1alpha1\nkind: Policy\n").unwrap_err();
    assert_eq!(err.line, 2);
    let err = parse("apiVersion: [").unwrap_err();
    assert!(err.line >= 1, "{err}");
}

#[test]
fn durations_and_quantities() {
    assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    assert!(parse_duration("1.5s").is_err());
    assert!(parse_duration("s").is_err());
    assert_eq!(parse_memory("64Mi"), Ok(64 << 20));
    assert_eq!(parse_memory("1G"), Ok(1_000_000_000));
    assert!(parse_memory("Mi").is_err());
}

#[test]
fn soak_times_for_the_policy_and_a_group_within_a_day() {
    let p = parse(
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  soakTime: 10m\n  groups:\n  - {name: slow, soakTime: 1h}\n  - {name: plain}\n",
    )
    .unwrap();
    assert_eq!(p.soak, Some(Duration::from_secs(600)));
    assert_eq!(
        p.group("slow").unwrap().soak,
        Some(Duration::from_secs(3600))
    );
    assert_eq!(p.group("plain").unwrap().soak, None);
    let long = parse(
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  groups:\n  - name: slow\n    soakTime: 25h\n",
    )
    .unwrap_err();
    assert_eq!(long.line, 6, "{long}");
    assert!(
        long.message
            .contains("soakTime \"25h\": expected at most 24h"),
        "{long}"
    );
}

const DRAIN: &str = "\
apiVersion: rollout-ext/v1alpha1
kind: RolloutPolicy
spec:
  drain:
    doNotDisruptTimeout: 30m
    afterTimeout: Evict
    jobTimeout: 3h
    order:
      - {order: 1, podSelector: \"tier=frontend\"}
      - {order: 2, namespaces: [payments], priorityClassNames: [high]}
    escalation:
      - {rung: Retry, wait: 10m}
      - {rung: DeleteUnready, wait: 5m}
      - {rung: Stop}
";

#[test]
fn reads_the_drain_section() {
    use drain::{AfterTimeout, Rung, RungAction};
    let d = parse(DRAIN).unwrap().drain;
    assert_eq!(d.do_not_disrupt_timeout, Duration::from_secs(1800));
    assert_eq!(d.after_timeout, AfterTimeout::Evict);
    assert_eq!(d.job_timeout, Duration::from_secs(3 * 3600));
    assert_eq!(d.order.len(), 2);
    assert_eq!(d.order[0].order, 1);
    assert!(d.order[0].pod_selector.is_some());
    assert_eq!(d.order[1].namespaces, ["payments"]);
    assert_eq!(d.order[1].priority_class_names, ["high"]);
    assert_eq!(
        d.escalation,
        [
            Rung {
                action: RungAction::Retry,
                wait: Duration::from_secs(600)
            },
            Rung {
                action: RungAction::DeleteUnready,
                wait: Duration::from_secs(300)
            },
        ]
    );
    // Without the section: kubectl's drain, with the documented waits.
    let plain = parse("apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\n").unwrap();
    assert_eq!(plain.drain, drain::DrainPolicy::default());
    assert_eq!(
        plain.drain.do_not_disrupt_timeout,
        Duration::from_secs(3600)
    );
    assert_eq!(plain.drain.job_timeout, Duration::from_secs(7200));
    // Cordoned nodes leave external load balancers unless the policy says otherwise.
    assert!(plain.drain.exclude_from_load_balancers);
    assert!(d.exclude_from_load_balancers);
    let off = parse(
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  drain:\n    excludeFromLoadBalancers: false\n",
    )
    .unwrap();
    assert!(!off.drain.exclude_from_load_balancers);
    // Nothing waits between the label and the first eviction, and an undrainable node stops
    // the run, unless the policy says otherwise.
    assert_eq!(plain.drain.load_balancer_drain_delay, Duration::ZERO);
    assert_eq!(plain.drain.undrainable, drain::Undrainable::default());
    assert_eq!(
        plain.drain.undrainable.action,
        drain::UndrainableAction::Stop
    );
    assert!(!plain.drain.undrainable.sets_aside(0));
    let set_aside = parse(
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  drain:\n    loadBalancerDrainDelay: 30s\n    undrainable: {action: Quarantine, maxQuarantined: 2}\n",
    )
    .unwrap();
    assert_eq!(
        set_aside.drain.load_balancer_drain_delay,
        Duration::from_secs(30)
    );
    let undrainable = set_aside.drain.undrainable;
    assert_eq!(undrainable.action, drain::UndrainableAction::Quarantine);
    assert_eq!(undrainable.max_quarantined, 2);
    assert!(undrainable.sets_aside(0) && undrainable.sets_aside(1));
    assert!(!undrainable.sets_aside(2));
    let one = parse(
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  drain:\n    undrainable: {action: Quarantine}\n",
    )
    .unwrap();
    assert_eq!(one.drain.undrainable.max_quarantined, 1);
}

#[test]
fn drain_mistakes_name_their_line() {
    let cases = [
        ("    doNotDisruptTimeout: 0s\n", 5, "expected more than 0"),
        ("    afterTimeout: Later\n", 5, "Later"),
        ("    order:\n      - {order: 1}\n", 6, "matches every pod"),
        (
            "    order:\n      - {order: 1, podSelector: \"a in (\"}\n",
            6,
            "podSelector",
        ),
        (
            "    escalation:\n      - {rung: Retry}\n",
            6,
            "expected a wait",
        ),
        (
            "    escalation:\n      - {rung: Stop}\n      - {rung: Retry, wait: 1m}\n",
            6,
            "comes last",
        ),
        (
            "    escalation:\n      - {rung: Drop, wait: 1m}\n",
            6,
            "Drop",
        ),
        ("    escalation:\n      - {rung: Stop}\n", 6, "Stop alone"),
        ("    drainTimeout: 1m\n", 5, "drainTimeout"),
        (
            "    excludeFromLoadBalancers: sometimes\n",
            5,
            "invalid boolean",
        ),
        ("    loadBalancerDrainDelay: soon\n", 5, "duration"),
        ("    undrainable: {action: Cordon}\n", 5, "Cordon"),
        ("    undrainable: {maxQuarantined: -1}\n", 5, "invalid u32"),
        ("    undrainable: {action: Stop, max: 2}\n", 5, "max"),
    ];
    for (lines, line, says) in cases {
        let text = format!(
            "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  drain:\n{lines}"
        );
        let e = parse(&text).unwrap_err();
        assert_eq!(e.line, line, "{lines}: {e}");
        assert!(e.to_string().contains(says), "{lines}: {e}");
    }
}

const METRICS: &str = "\
apiVersion: rollout-ext/v1alpha1
kind: RolloutPolicy
spec:
  metricsSources:
    - name: prom
      url: http://prometheus.monitoring:9090/
      timeout: 3s
      bearerTokenFile: token
    - name: thanos
      url: https://thanos.example
  hooks:
    - name: slo
      module: slo.wasm
      metrics: [prom]
    - name: other
      module: other.wasm
";

#[test]
fn metrics_sources_are_granted_per_hook() {
    let p = parse(METRICS).unwrap();
    let prom = &p.metrics_sources[0];
    assert_eq!(prom.url, "http://prometheus.monitoring:9090");
    assert_eq!(prom.timeout, Duration::from_secs(3));
    assert_eq!(
        prom.bearer_token_file.as_deref(),
        Some(Path::new("/p/token"))
    );
    assert_eq!(prom.line, 5);
    assert_eq!(p.metrics_sources[1].timeout, metrics::DEFAULT_TIMEOUT);
    assert_eq!(p.hooks[0].metrics, ["prom"]);
    assert!(
        p.hooks[1].metrics.is_empty(),
        "nothing is granted by default"
    );
}

#[test]
fn metrics_mistakes_name_their_line() {
    let cases = [
        (
            "      url: http://prometheus.monitoring:9090/",
            "      url: file:///etc/passwd",
            6,
            "the scheme \"file\" is not allowed",
        ),
        (
            "      url: https://thanos.example",
            "      url: thanos:9090",
            10,
            "expected an http:// or https:// URL",
        ),
        (
            "      timeout: 3s",
            "      timeout: 0s",
            7,
            "expected more than 0",
        ),
        ("    - name: thanos", "    - name: prom", 9, "listed twice"),
        (
            "      metrics: [prom]",
            "      metrics: [prometheus]",
            14,
            "does not define (defined: prom, thanos)",
        ),
        (
            "      metrics: [prom]",
            "      metrics: [prom, prom]",
            14,
            "twice",
        ),
        (
            "      bearerTokenFile: token",
            "      bearerToken: abc",
            8,
            "bearerToken",
        ),
    ];
    for (from, to, line, says) in cases {
        assert!(METRICS.contains(from), "{from}");
        let err = parse(&METRICS.replacen(from, to, 1)).unwrap_err();
        assert_eq!(err.line, line, "{to}: {err}");
        assert!(err.message.contains(says), "{to}: {err}");
    }
}

#[test]
fn a_group_may_name_its_own_provider_checked_at_its_line() {
    let text = "\
apiVersion: rollout-ext/v1alpha1
kind: RolloutPolicy
spec:
  groups:
  - name: gpu
    provider:
      exec:
        terminate: [gcloud, compute, \"{gce.instance}\"]
  - name: spot
    provider:
      deleteNode: {}
  - name: md-workers
    provider:
      clusterAPI: {terminate: DeleteMachine}
  - name: general
    provider:
      karpenter: {}
";
    let policy = parse(text).unwrap();
    assert!(policy.provider.is_none());
    assert!(matches!(
        policy.groups[0].provider,
        Some(ProviderSpec::Exec(_))
    ));
    assert!(matches!(
        policy.groups[1].provider,
        Some(ProviderSpec::DeleteNode {})
    ));
    assert_eq!(
        policy.groups[2].provider,
        Some(ProviderSpec::ClusterApi(
            crate::policy::provider::ClusterApiSpec {
                terminate: crate::policy::provider::CapiTerminate::DeleteMachine,
                timeout: None,
            }
        ))
    );
    assert_eq!(policy.groups[3].provider, Some(ProviderSpec::Karpenter {}));
    let bad = text.replace("[gcloud, compute, \"{gce.instance}\"]", "[]");
    let err = parse(&bad).unwrap_err().to_string();
    assert!(
        err.starts_with("policy.yaml:7:") && err.contains("the command is empty"),
        "{err}"
    );
}

#[test]
fn a_registry_module_is_a_reference_and_a_bad_one_is_refused_at_its_entry() {
    let policy = |module: &str| {
        format!(
            "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n    - name: site\n      module: {module}\n"
        )
    };
    let p = parse(&policy("oci://127.0.0.1:5000/hooks/site:v1")).unwrap();
    let ModuleSource::Registry { reference, pulled } = &p.hooks[0].module else {
        panic!("a registry module: {:?}", p.hooks[0].module)
    };
    assert_eq!(reference.target(), "127.0.0.1:5000/hooks/site:v1");
    assert_eq!(*pulled, None, "parsing reads nothing");
    let e = parse(&policy("oci://127.0.0.1:5000/hooks/site")).unwrap_err();
    assert_eq!(e.line, 5, "{e}");
    assert!(e.message.contains("hook site module"), "{e}");
    assert!(e.message.contains("name a tag"), "{e}");
}

#[test]
fn others_disruptions_are_counted_unless_the_policy_ignores_them() {
    let head = "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n";
    let counted = parse(&format!("{head}  groupLabel: g\n")).unwrap();
    assert_eq!(counted.others_disruptions, OthersDisruptions::Count);
    let ignored = parse(&format!("{head}  othersDisruptions: Ignore\n")).unwrap();
    assert_eq!(ignored.others_disruptions, OthersDisruptions::Ignore);
}
