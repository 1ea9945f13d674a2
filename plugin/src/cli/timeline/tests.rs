use super::*;
use crate::plan::estimate::Estimate;
use crate::plan::forecast::{Forecast, Stall};
use crate::plan::hook::{DecidedBy, GroupInfo, Phase};
use crate::plan::{
    BatchPlan, GateStep, GateVerdict, GroupPlan, PLAN_API_VERSION, PauseStep, Plan, Role,
};

/// 2026-11-27T12:00:00Z.
const NOW: i64 = 1_795_780_800;

fn at(seconds_after_now: i64) -> String {
    jiff::Timestamp::from_second(NOW + seconds_after_now)
        .unwrap()
        .to_string()
}

fn estimate(seconds: u64, p90_seconds: u64, ends_after_now: i64) -> Estimate {
    Estimate {
        seconds,
        p90_seconds,
        ends_at: Some(at(ends_after_now)),
        foreseen_wait_seconds: 0,
        basis: "defaults: no history".into(),
    }
}

fn batch(names: &[&str], e: Estimate) -> BatchPlan {
    BatchPlan {
        instances: names.iter().map(|n| n.to_string()).collect(),
        canary: false,
        surge: false,
        decided_by: DecidedBy::BuiltIn,
        size_reason: "maxUnavailable 1".into(),
        pause: None,
        gate: None,
        soak_seconds: None,
        forecast: None,
        after_gate: None,
        shadow: Vec::new(),
        likely_set_aside: Vec::new(),
        moves_runner: Vec::new(),
        estimate: Some(e),
    }
}

fn gate(phase: Phase, seconds: u32, reason: &str) -> GateStep {
    GateStep {
        phase,
        verdict: GateVerdict::Wait,
        seconds: Some(seconds),
        reason: Some(reason.into()),
        decided_by: DecidedBy::Hook("slo".into()),
    }
}

/// Group `nodes`: a gate waits 60 s before it; batch 1 (a canary) waits for a window of an hour
/// and a gate of 30 s, works 10 minutes and soaks 5; batch 2 is blocked by a budget.
fn plan() -> Plan {
    let mut first = batch(&["n1"], estimate(3600 + 30 + 600 + 300, 5000, 60 + 4530));
    first.canary = true;
    first.pause = Some(PauseStep {
        seconds: 3600,
        reason: "outside the window <mon 22:00>".into(),
        decided_by: DecidedBy::Hook("window".into()),
    });
    first.gate = Some(gate(Phase::BeforeBatch, 30, "2 pods not Ready"));
    first.soak_seconds = Some(300);
    let mut second = batch(&["n2", "n3"], estimate(900, 1200, 60 + 4530 + 900));
    second.forecast = Some(Forecast {
        blocks: vec![Stall {
            pdb: "shop/db".into(),
            pods: vec!["shop/db-0".into()],
            reason: "allows 0 disruptions".into(),
            waves: 0,
        }],
        ..Default::default()
    });
    Plan {
        api_version: PLAN_API_VERSION,
        kind: "Plan",
        groups: vec![GroupPlan {
            group: GroupInfo {
                name: "nodes".into(),
                role: Role::Node,
                size: 3,
                up_to_date: 0,
                selected: 3,
                max_surge: 0,
                max_unavailable: 2,
            },
            concurrency: 1,
            disabled: false,
            note: None,
            gate: Some(gate(Phase::BeforeGroup, 60, "error budget low")),
            others_disrupting: Vec::new(),
            shadow: Vec::new(),
            instances: Vec::new(),
            batches: vec![first, second],
            aborted: None,
            estimate: Some(estimate(60 + 4530 + 900, 60 + 4530 + 1200, 60 + 4530 + 900)),
        }],
        warnings: vec!["a warning & <b>markup</b>".into()],
        stopped: None,
        undrainable: None,
        modules: Vec::new(),
        estimate: Some(estimate(5490, 5790, 5490)),
    }
}

#[test]
fn batches_sit_on_the_axis_where_their_estimates_put_them() {
    let t = of_node_plan(&plan(), NOW, vec![Fact::new("Cluster", "snapshot s.json")]);
    assert_eq!((t.now, t.end, t.end_p90), (NOW, NOW + 5490, NOW + 5790));
    let row = &t.rows[0];
    assert_eq!(row.label, "nodes");
    let lead = row.lead.as_ref().expect("the before-group gate's wait");
    assert_eq!((lead.from, lead.to), (NOW, NOW + 60));
    assert!(lead.reason.contains("error budget low"), "{}", lead.reason);

    let [canary, blocked] = &row.bars[..] else {
        panic!("two bars: {:?}", row.bars)
    };
    assert_eq!(canary.label, "canary 1");
    assert!(canary.canary);
    assert_eq!((canary.from, canary.to), (NOW + 60, NOW + 4590));
    assert_eq!(canary.to_p90, NOW + 60 + 5000);
    // The window's pause, then the gate's wait, from the batch's start; the soak at its end.
    let waits: Vec<(i64, i64)> = canary.waits.iter().map(|w| (w.from, w.to)).collect();
    assert_eq!(waits, [(NOW + 60, NOW + 3660), (NOW + 3660, NOW + 3690)]);
    assert!(
        canary.waits[0]
            .reason
            .starts_with("pause: outside the window")
    );
    assert!(
        canary.waits[1]
            .reason
            .starts_with("gate before-batch: wait 30s")
    );
    let soak = canary.soak.as_ref().unwrap();
    assert_eq!((soak.from, soak.to), (NOW + 4290, NOW + 4590));
    assert_eq!(canary.drain, "ok");

    assert_eq!(blocked.label, "batch 2");
    assert_eq!((blocked.from, blocked.to), (NOW + 4590, NOW + 5490));
    assert_eq!(blocked.drain, "blocks");
    let said: Vec<String> = (blocked.details.iter())
        .map(|f| format!("{}: {}", f.name, f.value))
        .collect();
    assert!(said.contains(&"nodes: n2, n3".to_string()), "{said:?}");
    assert!(
        (said.iter()).any(|l| l.starts_with("blocks on: PodDisruptionBudget shop/db")),
        "{said:?}"
    );
    assert_eq!(t.facts[0], Fact::new("Cluster", "snapshot s.json"));
    assert!(t.facts.iter().any(|f| f.name == "Estimate"));
}

#[test]
fn the_svg_is_well_formed_with_one_bar_per_batch_and_no_colour_alone() {
    let t = of_node_plan(&plan(), NOW, Vec::new());
    let svg = t.draw(Picture::Svg);
    let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
    let batches: Vec<roxmltree::Node> = (doc.descendants())
        .filter(|n| {
            n.attribute("class")
                .is_some_and(|c| c.split(' ').any(|w| w == "batch"))
        })
        .collect();
    assert_eq!(batches.len(), 2);
    let second = batches[1];
    assert_eq!(second.attribute("data-label"), Some("batch 2"));
    assert_eq!(
        second.attribute("data-from"),
        Some((NOW + 4590).to_string().as_str())
    );
    assert_eq!(
        second.attribute("data-to"),
        Some((NOW + 5490).to_string().as_str())
    );
    assert_eq!(second.attribute("data-drain"), Some("blocks"));
    // A blocked drain is patterned and says so in words.
    let texts: Vec<&str> = second.descendants().filter_map(|n| n.text()).collect();
    assert!(texts.iter().any(|t| t.contains("blocks")), "{texts:?}");
    assert!(
        (second.descendants()).any(|n| n.attribute("class") == Some("work drain-blocks")),
        "the blocked batch's work is cross-hatched"
    );
    // Reasons are text, never markup.
    assert!(svg.contains("outside the window &lt;mon 22:00&gt;"));
    assert!(!svg.contains("<mon 22:00>"));
    // Now and the estimated end are marked.
    let words: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    assert!(words.contains(&"now"), "{words:?}");
    assert!(
        words.iter().any(|w| w.starts_with("estimated end ")),
        "{words:?}"
    );
}

#[test]
fn the_page_loads_nothing_and_lists_every_batch() {
    let t = of_node_plan(&plan(), NOW, vec![Fact::new("Policy", "site.yaml")]);
    let html = t.draw(Picture::Html);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
    ));
    assert!(!html.contains("<script"), "no script");
    for attr in ["src=\"", "href=\"", "url(http", "@import"] {
        let outside = (html.match_indices(attr))
            .filter(|(i, _)| !html[i + attr.len()..].starts_with("data:"))
            .count();
        assert_eq!(outside, 0, "{attr} loads from elsewhere");
    }
    assert_eq!(html.matches("<tr class=\"batch ").count(), 2);
    assert!(html.contains("<tr class=\"batch drain-blocks\" data-row=\"nodes\" data-index=\"1\">"));
    assert!(html.contains("<dt>Policy</dt><dd>site.yaml</dd>"));
    assert!(html.contains("<li>a warning &amp; &lt;b&gt;markup&lt;/b&gt;</li>"));
    // The page carries the same picture.
    assert!(html.contains("<svg xmlns=\"http://www.w3.org/2000/svg\""));
}

#[test]
fn a_plan_that_stops_says_where() {
    let mut p = plan();
    p.groups[0].aborted = Some("gate after-batch: abort: error budget spent".into());
    p.stopped = Some("nodes: error budget spent".into());
    let t = of_node_plan(&p, NOW, Vec::new());
    assert_eq!(
        t.rows[0].stops.as_deref(),
        Some("gate after-batch: abort: error budget spent")
    );
    let svg = t.draw(Picture::Svg);
    assert!(svg.contains("The run stops: nodes: error budget spent"));
    let html = t.draw(Picture::Html);
    assert!(html.contains("<strong>A gate stops the run:</strong> nodes: error budget spent"));
    assert!(html.contains("<strong>stops here:</strong> gate after-batch: abort"));
}

#[test]
fn a_long_wait_is_drawn_short_so_the_batches_stay_readable() {
    let svg = of_node_plan(&plan(), NOW, Vec::new()).draw(Picture::Svg);
    // The gate before the group, the window's hour and the gate before the canary: no work.
    assert!(svg.contains("≈ 1h1m drawn short"), "{svg}");
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let blocked = (doc.descendants())
        .find(|n| n.attribute("data-label") == Some("batch 2"))
        .unwrap();
    let work = (blocked.descendants())
        .find(|n| n.attribute("class") == Some("work drain-blocks"))
        .unwrap();
    let width: i64 = work.attribute("width").unwrap().parse().unwrap();
    // Drawn to scale, its 15 minutes of 1h31m would take about 140 pixels.
    assert!(width > 250, "batch 2 is {width} pixels wide");
    // The times themselves are unchanged.
    assert_eq!(
        blocked.attribute("data-from"),
        Some((NOW + 4590).to_string().as_str())
    );
}

#[test]
fn a_drain_word_near_the_right_edge_is_drawn_whole() {
    use super::svg::word_at;
    // At the bar, where it fits; moved left, never past the chart's edge, where it would not.
    assert_eq!(word_at(500, "blocks"), 500);
    let end = word_at(1095, "blocks") + 7 * 6;
    assert!(end <= 1100 - 30, "{end}");
}
