//! `nodes --dry-run=server`: the plan's mutating calls (cordon, evictions, node deletion) sent to
//! the API server with `dryRun=All`. The server checks budgets, admission and permissions and
//! changes nothing; every refusal is reported. Instances are not terminated, and nothing waits.

use std::sync::Arc;

use super::nodes::NodesArgs;
use super::{Failure, KubeFlags, OutputFormat, output, tokio_runtime};
use crate::cluster::LiveObjects;
use crate::cluster::drain::Cordon;
use crate::cluster::eviction::Eviction;
use crate::hooks::ObjectSource;
use crate::plan::PlanOptions;
use crate::plan::drain::{PodFate, classify, ladder_in_words};
use crate::policy::Policy;
use crate::progress::{Collect, Event, Lines, Reporter};

/// What the server said about one planned call.
#[derive(Debug, serde::Serialize)]
struct Refusal {
    node: String,
    call: String,
    reason: String,
}

pub fn run(
    kube: &KubeFlags,
    args: &NodesArgs,
    policy: &Policy,
    options: PlanOptions,
) -> Result<(), Failure> {
    // Structured output is the list of refusals alone; people also see each accepted call.
    let reporter: Box<dyn Reporter> = match args.output.text() {
        OutputFormat::Json | OutputFormat::Yaml => Box::new(Collect::default()),
        _ => Box::new(Lines),
    };
    let runtime = tokio_runtime()?;
    let cluster = runtime.block_on(super::nodes::connect(kube, args, policy))?;
    let snapshot = runtime.block_on(cluster.snapshot())?;
    let objects: Arc<dyn ObjectSource> = Arc::new(LiveObjects {
        cluster: cluster.clone(),
        handle: runtime.handle().clone(),
    });
    let plan = super::nodes::plan_with_hooks(&snapshot, policy, &options, objects)?;
    let refusals = runtime.block_on(async {
        let version = cluster.policy_version().await?;
        let mut refusals = Vec::new();
        for group in plan.groups.iter().filter(|g| !g.disabled) {
            for instance in group.instances.iter().filter(|i| i.update) {
                let node = instance.name.as_str();
                // A Machine whose Node never registered has no Node to cordon, drain or
                // delete: the run only removes the Machine.
                if snapshot
                    .nodes
                    .iter()
                    .any(|n| n.name == node && !n.registered)
                {
                    continue;
                }
                let refuse = |call: String, reason: String| Refusal {
                    node: node.to_string(),
                    call,
                    reason,
                };
                if !options.cloud_only {
                    let read = snapshot.nodes.iter().find(|n| n.name == node);
                    let cordon = Cordon::of(read, &options.drain.rules);
                    if let Err(e) = cluster.cordon(node, cordon, true, reporter.as_ref()).await {
                        refusals.push(refuse("cordon".into(), e.to_string()));
                    }
                    for pod in cluster.pods_on(node).await? {
                        let id = pod.id();
                        match classify(&pod, &options.drain) {
                            PodFate::Refuse(reason) => {
                                refusals.push(refuse(format!("drain {id}"), reason.to_string()))
                            }
                            PodFate::Skip(_) => {}
                            // Nothing is sent for a held pod until its wait ends.
                            PodFate::Hold(hold) => reporter.report(Event::PodHeld {
                                node: node.into(),
                                pod: id,
                                reason: hold.describe(),
                                timeout_seconds: hold.timeout(&options.drain.rules).as_secs(),
                            }),
                            PodFate::Evict { .. } => {
                                let grace = (args.grace_period >= 0).then_some(args.grace_period);
                                match cluster
                                    .evict(version, &pod, grace, true)
                                    .await
                                {
                                    Ok(Eviction::Evicted) => reporter.report(Event::Evicted {
                                        node: node.into(),
                                        pod: id,
                                    }),
                                    // (409: started again under its name since it was listed.)
                                    Ok(Eviction::Gone | Eviction::Conflict { .. }) => {}
                                    Ok(Eviction::Blocked { message }) => {
                                        let mut why =
                                            cluster.why_blocked(&pod, version, &message).await;
                                        if let Some(ladder) = ladder_in_words(&options.drain.rules)
                                        {
                                            why.push_str(&format!("; escalation ladder: {ladder}"));
                                        }
                                        refusals.push(refuse(format!("evict {id}"), why));
                                    }
                                    Ok(Eviction::MultipleBudgets { message }) => {
                                        let budgets =
                                            cluster.budgets_named(&pod, version, &message).await;
                                        refusals.push(refuse(
                                            format!("evict {id}"),
                                            format!("selected by more than one PodDisruptionBudget ({budgets}): the eviction API refuses such a pod"),
                                        ));
                                    }
                                    Ok(Eviction::NamespaceTerminating { message }) => {
                                        refusals.push(refuse(format!("evict {id}"), message))
                                    }
                                    Err(e) => {
                                        refusals.push(refuse(format!("evict {id}"), e.to_string()))
                                    }
                                }
                            }
                        }
                    }
                }
                if let Err(e) = cluster.delete_node_dry_run(node).await {
                    refusals.push(refuse("delete node".into(), e.to_string()));
                }
            }
        }
        Ok::<_, Failure>(refusals)
    })?;
    match args.output.text() {
        OutputFormat::Json | OutputFormat::Yaml => {
            super::print_structured(&refusals, args.output.text())?
        }
        _ if refusals.is_empty() => println!("The API server would accept every planned call."),
        _ => {
            let mut rows = vec![vec![
                "NODE".to_string(),
                "CALL".into(),
                "REFUSED BECAUSE".into(),
            ]];
            rows.extend(
                refusals
                    .iter()
                    .map(|r| vec![r.node.clone(), r.call.clone(), r.reason.clone()]),
            );
            print!("{}", output::align(&rows));
        }
    }
    let table = !matches!(args.output.text(), OutputFormat::Json | OutputFormat::Yaml);
    if table && !options.cloud_only && options.drain.rules.exclude_from_load_balancers {
        println!(
            "Each cordon also labels its node {}={} (drain.excludeFromLoadBalancers): external load balancers stop sending it new connections before its pods are evicted.",
            crate::keys::EXCLUDE_FROM_LOAD_BALANCERS,
            crate::keys::EXCLUDED_BY_US
        );
    }
    if refusals.is_empty() {
        Ok(())
    } else {
        Err(Failure::failed(format!(
            "the API server would refuse {} planned call(s) now",
            refusals.len()
        )))
    }
}
