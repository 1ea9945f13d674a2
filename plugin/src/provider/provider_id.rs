//! The fields of a Node's `spec.providerID` that provider commands use, by cloud:
//!
//! - AWS: `aws:///<zone>/<instance-id>` → `{aws.zone}`, `{aws.region}` (the zone without its
//!   final letter), `{aws.instanceID}`;
//! - GCE: `gce://<project>/<zone>/<instance>` → `{gce.project}`, `{gce.zone}`, `{gce.region}`,
//!   `{gce.instance}`, `{gce.instanceGroup}` (GKE's naming: the instance name without its last
//!   `-xxxx`, then `-grp`);
//! - Azure: `azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/
//!   virtualMachineScaleSets/<vmss>/virtualMachines/<id>` → `{azure.subscription}`,
//!   `{azure.resourceGroup}`, `{azure.scaleSet}`, `{azure.instanceID}`.

/// The placeholders this module fills, with the shape of providerID each needs.
pub const FIELDS: &[(&str, &str)] = &[
    ("{aws.instanceID}", AWS),
    ("{aws.zone}", AWS),
    ("{aws.region}", AWS),
    ("{gce.project}", GCE),
    ("{gce.zone}", GCE),
    ("{gce.region}", GCE),
    ("{gce.instance}", GCE),
    ("{gce.instanceGroup}", GCE),
    ("{azure.subscription}", AZURE),
    ("{azure.resourceGroup}", AZURE),
    ("{azure.scaleSet}", AZURE),
    ("{azure.instanceID}", AZURE),
];

const AWS: &str = "aws:///ZONE/INSTANCE-ID";
const GCE: &str = "gce://PROJECT/ZONE/INSTANCE";
const AZURE: &str = "azure:///subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/VMSS/virtualMachines/ID";

/// The value of `placeholder` (one of [`FIELDS`]) in `provider_id`, or the shape it needs.
pub fn field(provider_id: &str, placeholder: &str) -> Result<String, &'static str> {
    let shape = FIELDS
        .iter()
        .find(|(p, _)| *p == placeholder)
        .map_or("", |(_, shape)| *shape);
    let value = match placeholder.split_once('.').map(|(cloud, _)| cloud) {
        Some("{aws") => aws(provider_id, placeholder),
        Some("{gce") => gce(provider_id, placeholder),
        Some("{azure") => azure(provider_id, placeholder),
        _ => None,
    };
    value.filter(|v| !v.is_empty()).ok_or(shape)
}

fn aws(id: &str, placeholder: &str) -> Option<String> {
    let (zone, instance) = id.strip_prefix("aws:///")?.split_once('/')?;
    if instance.contains('/') || !instance.starts_with("i-") {
        return None;
    }
    Some(match placeholder {
        "{aws.instanceID}" => instance.to_string(),
        "{aws.zone}" => zone.to_string(),
        // us-east-1a → us-east-1: the zone letter goes. A Local or Wavelength Zone
        // (us-west-2-lax-1a) does not name its region this way: refused, not guessed.
        "{aws.region}" => {
            let region = zone.strip_suffix(|c: char| c.is_ascii_lowercase())?;
            let parts: Vec<&str> = region.split('-').collect();
            let regular = match parts[..] {
                [_, _, n] | [_, "gov" | "iso" | "isob", _, n] => {
                    !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())
                }
                _ => false,
            };
            regular.then(|| region.to_string())?
        }
        _ => return None,
    })
}

fn gce(id: &str, placeholder: &str) -> Option<String> {
    let mut parts = id.strip_prefix("gce://")?.split('/');
    let (project, zone, instance) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    Some(match placeholder {
        "{gce.project}" => project.to_string(),
        "{gce.zone}" => zone.to_string(),
        // us-central1-b → us-central1.
        "{gce.region}" => zone.rsplit_once('-')?.0.to_string(),
        "{gce.instance}" => instance.to_string(),
        // gke-prod-pool-90fcb815-x7k2 → gke-prod-pool-90fcb815-grp.
        "{gce.instanceGroup}" => format!("{}-grp", instance.rsplit_once('-')?.0),
        _ => return None,
    })
}

fn azure(id: &str, placeholder: &str) -> Option<String> {
    let parts: Vec<&str> = id.strip_prefix("azure:///")?.split('/').collect();
    let [subs, sub, rgs, rg, providers, compute, sets, set, vms, vm] = parts[..] else {
        return None;
    };
    let keys = [subs, rgs, providers, compute, sets, vms];
    let expected = [
        "subscriptions",
        "resourcegroups",
        "providers",
        "microsoft.compute",
        "virtualmachinescalesets",
        "virtualmachines",
    ];
    if keys
        .iter()
        .zip(expected)
        .any(|(k, e)| !k.eq_ignore_ascii_case(e))
    {
        return None;
    }
    Some(match placeholder {
        "{azure.subscription}" => sub.to_string(),
        "{azure.resourceGroup}" => rg.to_string(),
        "{azure.scaleSet}" => set.to_string(),
        "{azure.instanceID}" => vm.to_string(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn each_cloud_gives_its_fields() {
        let cases = [
            (
                "aws:///us-west-2a/i-0abcd1234ef567890",
                "{aws.instanceID}",
                "i-0abcd1234ef567890",
            ),
            (
                "aws:///us-west-2a/i-0abcd1234ef567890",
                "{aws.zone}",
                "us-west-2a",
            ),
            (
                "aws:///us-west-2a/i-0abcd1234ef567890",
                "{aws.region}",
                "us-west-2",
            ),
            (
                "gce://my-proj/us-central1-b/gke-prod-default-pool-90fcb815-x7k2",
                "{gce.project}",
                "my-proj",
            ),
            (
                "gce://my-proj/us-central1-b/gke-prod-default-pool-90fcb815-x7k2",
                "{gce.zone}",
                "us-central1-b",
            ),
            (
                "gce://my-proj/us-central1-b/gke-prod-default-pool-90fcb815-x7k2",
                "{gce.region}",
                "us-central1",
            ),
            (
                "gce://my-proj/us-central1-b/gke-prod-default-pool-90fcb815-x7k2",
                "{gce.instance}",
                "gke-prod-default-pool-90fcb815-x7k2",
            ),
            (
                "gce://my-proj/us-central1-b/gke-prod-default-pool-90fcb815-x7k2",
                "{gce.instanceGroup}",
                "gke-prod-default-pool-90fcb815-grp",
            ),
        ];
        for (id, placeholder, want) in cases {
            assert_eq!(
                field(id, placeholder).as_deref(),
                Ok(want),
                "{id} {placeholder}"
            );
        }
        let vmss = "azure:///subscriptions/1234/resourceGroups/mc_rg_aks_eastus/providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-12345678-vmss/virtualMachines/3";
        let azure = [
            ("{azure.subscription}", "1234"),
            ("{azure.resourceGroup}", "mc_rg_aks_eastus"),
            ("{azure.scaleSet}", "aks-nodepool1-12345678-vmss"),
            ("{azure.instanceID}", "3"),
        ];
        for (placeholder, want) in azure {
            assert_eq!(
                field(vmss, placeholder).as_deref(),
                Ok(want),
                "{placeholder}"
            );
        }
    }

    #[test]
    fn a_provider_id_of_another_shape_names_the_one_needed() {
        let standalone = "azure:///subscriptions/1/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/aks-pool-0";
        for (id, placeholder, shape) in [
            ("gce://p/z/n", "{aws.instanceID}", "aws:///ZONE/INSTANCE-ID"),
            ("aws:///us-west-2a/i-1/x", "{aws.instanceID}", "aws:///"),
            ("aws:///us-west-2-lax-1a/i-1", "{aws.zone}", ""),
            ("aws:////i-1", "{aws.zone}", "aws:///"),
            (
                "sim:///nodes/n1",
                "{gce.zone}",
                "gce://PROJECT/ZONE/INSTANCE",
            ),
            (standalone, "{azure.scaleSet}", "virtualMachineScaleSets"),
            ("", "{azure.instanceID}", "azure:///"),
        ] {
            match field(id, placeholder) {
                Ok(v) if shape.is_empty() => assert!(!v.is_empty()),
                Ok(v) => panic!("{id} {placeholder}: {v}"),
                Err(needed) => assert!(needed.contains(shape), "{id}: {needed}"),
            }
        }
        // A Local Zone has no region in its name: refused rather than guessed.
        assert!(field("aws:///us-west-2-lax-1a/i-1", "{aws.region}").is_err());
    }
}
