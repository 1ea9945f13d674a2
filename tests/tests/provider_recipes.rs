//! The `exec` recipes of docs/providers.md, read from the file itself: each runs through the exec
//! provider against stand-in `aws`, `gcloud` and `az` executables (tests/standins) that record
//! their arguments and print what the real commands print, so the templates, the providerID
//! fields and the commands' shapes are checked together.

use std::path::PathBuf;

use rollout_ext::policy::Policy;
use rollout_ext::provider::{Provider, Target};
use rollout_ext_e2e::cluster::TestCluster;
use rollout_ext_e2e::workspace_root;
use serde_json::Value;

/// The recipes of docs/providers.md: the YAML block after each `<!-- recipe: NAME -->`.
fn recipes() -> Vec<(String, Provider)> {
    let text = std::fs::read_to_string(workspace_root().join("docs/providers.md")).unwrap();
    let mut found = Vec::new();
    for (at, _) in text.match_indices("<!-- recipe: ") {
        let rest = &text[at + "<!-- recipe: ".len()..];
        let name = rest[..rest.find(" -->").unwrap()].to_string();
        let block = rest.split("```yaml\n").nth(1).unwrap();
        let block = &block[..block.find("```").unwrap()];
        let indented: String = block.lines().map(|l| format!("  {l}\n")).collect();
        let policy =
            format!("apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n{indented}");
        let policy = Policy::parse(&policy, &name, std::path::Path::new("."))
            .unwrap_or_else(|e| panic!("recipe {name}: {e}"));
        let provider = Provider::from_spec(policy.provider.as_ref().unwrap()).unwrap();
        found.push((name, provider));
    }
    found
}

/// The commands the stand-ins ran since the last call, each as its arguments.
fn ran(log: &PathBuf) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    std::fs::write(log, "").unwrap();
    text.lines()
        .map(|l| {
            l.split('\u{1f}')
                .filter(|a| !a.is_empty())
                .map(String::from)
                .collect()
        })
        .collect()
}

fn target(provider_id: &str) -> Target {
    Target {
        node: "node-1".into(),
        provider_id: provider_id.into(),
        group: "nodes".into(),
        machine: None,
    }
}

fn args(line: &str) -> Vec<String> {
    line.split(' ').map(String::from).collect()
}

#[tokio::test]
async fn every_recipe_runs_the_commands_its_cloud_expects() {
    // The stand-ins come first on PATH; this binary holds this one test, so nothing else reads
    // the environment while it changes.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ran");
    let standins = workspace_root().join("tests/standins");
    let path = format!("{}:{}", standins.display(), std::env::var("PATH").unwrap());
    // SAFETY: set before any thread of this test process reads the environment.
    unsafe {
        std::env::set_var("PATH", path);
        std::env::set_var("STANDIN_LOG", &log);
    }
    let cluster = TestCluster::shared();
    let live = cluster.live().await;
    let recipes = recipes();
    let names: Vec<&str> = recipes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["aws-asg", "aws-asg-surge", "gce-mig", "azure-vmss"]);

    let aws = target("aws:///us-west-2a/i-0abcd1234ef567890");
    let gce = target("gce://my-proj/us-central1-b/gke-prod-default-pool-90fcb815-x7k2");
    let azure = target(
        "azure:///subscriptions/0f3c/resourceGroups/mc_prod_aks_eastus/providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-12345678-vmss/virtualMachines/3",
    );
    for (name, provider) in &recipes {
        let (target, surges) = match name.as_str() {
            "aws-asg" | "aws-asg-surge" => (&aws, name == "aws-asg-surge"),
            "gce-mig" => (&gce, false),
            _ => (&azure, false),
        };
        assert_eq!(provider.can_surge(), surges, "{name}");
        // A node of another cloud is refused before anything runs.
        let other = if target == &aws { &gce } else { &aws };
        let refused = provider.check(other).unwrap_err().to_string();
        assert!(refused.contains("not of the shape"), "{name}: {refused}");
        assert!(ran(&log).is_empty(), "{name}: nothing ran");

        provider.check(target).unwrap();
        if surges {
            let printed = provider.detach(&live, target).await.unwrap();
            let answer: Value = serde_json::from_str(&printed).unwrap();
            assert_eq!(
                answer["Activities"][0]["Description"],
                "Detaching EC2 instance: i-0abcd1234ef567890"
            );
            assert_eq!(
                ran(&log),
                [args(
                    "aws autoscaling detach-instances --region us-west-2 --auto-scaling-group-name nodes.prod.example.com --instance-ids i-0abcd1234ef567890 --no-should-decrement-desired-capacity --output json"
                )]
            );
        }
        let printed = provider.terminate(&live, target).await.unwrap();
        let answer: Value = serde_json::from_str(&printed).unwrap();
        let commands = ran(&log);
        match name.as_str() {
            "aws-asg" => {
                assert_eq!(
                    commands,
                    [args(
                        "aws autoscaling terminate-instance-in-auto-scaling-group --region us-west-2 --instance-id i-0abcd1234ef567890 --no-should-decrement-desired-capacity --output json"
                    )]
                );
                assert_eq!(answer["Activity"]["StatusCode"], "InProgress");
            }
            "aws-asg-surge" => {
                assert_eq!(
                    commands,
                    [args(
                        "aws ec2 terminate-instances --region us-west-2 --instance-ids i-0abcd1234ef567890 --output json"
                    )]
                );
                assert_eq!(
                    answer["TerminatingInstances"][0]["CurrentState"]["Name"],
                    "shutting-down"
                );
            }
            "gce-mig" => {
                assert_eq!(
                    commands,
                    [args(
                        "gcloud compute instance-groups managed recreate-instances gke-prod-default-pool-90fcb815-grp --instances=gke-prod-default-pool-90fcb815-x7k2 --zone=us-central1-b --project=my-proj --format=json"
                    )]
                );
                assert_eq!(answer[0]["status"], "SUCCESS");
            }
            _ => {
                let vmss = "--resource-group mc_prod_aks_eastus --name aks-nodepool1-12345678-vmss";
                assert_eq!(
                    commands,
                    [
                        args(&format!(
                            "az vmss get-instance-view {vmss} --instance-id 3 --output none"
                        )),
                        args(&format!(
                            "az vmss show {vmss} --query sku.capacity --output tsv"
                        )),
                        args(&format!("az vmss delete-instances {vmss} --instance-ids 3")),
                        args(&format!(
                            "az vmss scale {vmss} --new-capacity 3 --output json"
                        )),
                    ]
                );
                assert_eq!(answer["sku"]["capacity"], 3);
            }
        }
    }
}
