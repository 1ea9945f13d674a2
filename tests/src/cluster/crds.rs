//! CustomResourceDefinitions the test clusters serve (Cluster API, Karpenter, NodeMaintenance): the
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
        let served = async {
            established.await?;
            served(client, crd).await
        };
        tokio::time::timeout(ESTABLISHED_WITHIN, served)
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "CustomResourceDefinition {name} was not established and served within {ESTABLISHED_WITHIN:?}"
                )
            })??;
    }
    Ok(())
}

/// Waits until a list of `crd`'s resources is answered: an Established definition may still
/// answer 429 for a moment while its storage starts, which a test's first run would meet.
async fn served(client: &kube::Client, crd: &CustomResourceDefinition) -> anyhow::Result<()> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
    let spec = &crd.spec;
    let version = (spec.versions.iter())
        .find(|v| v.served)
        .map(|v| v.name.clone())
        .unwrap_or_default();
    let gvk = GroupVersionKind::gvk(&spec.group, &version, &spec.names.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &spec.names.plural);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut retry = tokio::time::interval(Duration::from_millis(100));
    loop {
        match api.list(&ListParams::default().limit(1)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 429 || status.code == 404 => {
                // Nothing to watch for: the apiserver says nothing when its storage is ready.
                retry.tick().await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}
