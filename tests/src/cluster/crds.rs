//! CustomResourceDefinitions for the machine-controller stand-ins (Cluster API, Karpenter): the
//! plugin meets their resources as it would in a real cluster.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};

/// How long a definition may take to be served.
const ESTABLISHED_WITHIN: Duration = Duration::from_secs(30);

/// Creates every CustomResourceDefinition of `yaml` (documents separated by `---`) and waits
/// until each is Established, so that its resources may be created right away.
pub(crate) async fn load_crds(client: &kube::Client, yaml: &str) -> anyhow::Result<()> {
    let crds: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(yaml)
        .map_err(|e| anyhow::anyhow!("the CustomResourceDefinitions do not parse: {e}"))?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in &crds {
        match api.create(&PostParams::default(), crd).await {
            // A definition already served (a restarted stand-in) is as good as a new one.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            other => {
                other?;
            }
        }
    }
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        tokio::time::timeout(ESTABLISHED_WITHIN, established)
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "CustomResourceDefinition {name} was not established within {ESTABLISHED_WITHIN:?}"
                )
            })??;
    }
    Ok(())
}
