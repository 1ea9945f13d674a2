//! Hook modules kept in OCI registries, laid out as the WebAssembly tools lay out theirs: one
//! `application/wasm` layer and a wasm config. A pull resolves a tag to the manifest's digest
//! (the pin a tag stands for) and keeps the module in a cache keyed by that digest, so that a
//! digest-pinned module loads without the registry once pulled. Credentials come from the docker
//! config file (`$DOCKER_CONFIG/config.json` or `~/.docker/config.json`, helpers included);
//! registries on loopback are spoken to over plain HTTP, every other one over HTTPS.

use std::future::Future;
use std::net::IpAddr;
use std::path::PathBuf;

use hyper::body::Bytes;
use serde::{Deserialize, Serialize};

use super::distribution::{Credentials, Distribution, DistributionError, sha256_digest};
use crate::policy::{ModuleSource, OciReference, Policy, PolicyError, PulledModule};

/// The layer of a WebAssembly artifact.
pub const WASM_LAYER: &str = "application/wasm";
/// The layer type of the first WebAssembly artifacts (wasm-to-oci), still read.
const WASM_LAYER_LEGACY: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// The manifest type of a pushed module.
const IMAGE_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config of a WebAssembly artifact.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// A module larger than this is refused before it is downloaded.
const MAX_MODULE_BYTES: u64 = 512 << 20;

/// Why a module could not be pushed or pulled. Each names the reference.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("cannot reach the registry of {reference}: {reason}")]
    Unreachable { reference: String, reason: String },
    #[error(
        "{reference}: the registry refused access ({reason}); credentials come from the docker config file (`docker login {registry}`, or DOCKER_CONFIG)"
    )]
    Unauthorized {
        reference: String,
        registry: String,
        reason: String,
    },
    #[error("{reference} is not in its registry ({reason})")]
    NotFound { reference: String, reason: String },
    #[error("{reference} is not a WebAssembly module artifact: {why}")]
    NotAModule { reference: String, why: String },
    #[error("{reference}: the registry failed: {reason}")]
    Failed { reference: String, reason: String },
    #[error("cannot read the credentials for {registry} from the docker config file: {reason}")]
    Credentials { registry: String, reason: String },
    #[error("cannot keep {reference} in the module cache {dir}: {reason}")]
    Cache {
        reference: String,
        dir: PathBuf,
        reason: String,
    },
}

/// Pushes and pulls modules, with the cache of pulled ones.
pub struct Registry {
    cache: PathBuf,
}

impl Registry {
    /// The registry client with the default module cache: `rollout-ext/modules` in the user's
    /// cache directory, beside the compile cache.
    pub fn new() -> Result<Registry, RegistryError> {
        let cache = super::cache_base()
            .map(|base| base.join("modules"))
            .ok_or_else(|| RegistryError::Cache {
                reference: "modules".into(),
                dir: PathBuf::from("~/.cache"),
                reason: "neither XDG_CACHE_HOME nor HOME is set".into(),
            })?;
        Ok(Registry { cache })
    }

    /// Fetches a module: from the cache when its digest is known and cached (no registry
    /// asked), else from the registry, checking each digest on the way.
    pub fn pull(&self, reference: &OciReference) -> Result<PulledModule, RegistryError> {
        if let Some(digest) = &reference.digest
            && let Some(pulled) = self.cached(digest)
        {
            return Ok(pulled);
        }
        blocking(self.fetch(reference))?
    }

    /// Pushes the module `bytes` to `reference` (its tag); returns the manifest's digest.
    pub fn push(&self, bytes: &[u8], reference: &OciReference) -> Result<String, RegistryError> {
        blocking(push(bytes, reference))?
    }

    fn cached(&self, digest: &str) -> Option<PulledModule> {
        let file = self.cache_file(digest);
        file.is_file().then(|| PulledModule {
            digest: digest.to_string(),
            file,
        })
    }

    fn cache_file(&self, digest: &str) -> PathBuf {
        self.cache
            .join(format!("{}.wasm", digest.replace(':', "-")))
    }

    async fn fetch(&self, reference: &OciReference) -> Result<PulledModule, RegistryError> {
        let shown = reference.to_string();
        let fail = |e| failure(&shown, &reference.registry, e);
        let registry = connect(reference)?;
        let manifest = registry
            .manifest(&pinned_or_tag(reference))
            .await
            .map_err(fail)?;
        let digest = manifest.digest.clone();
        if let Some(pulled) = self.cached(&digest) {
            return Ok(pulled);
        }
        let not_a_module = |why| RegistryError::NotAModule {
            reference: shown.clone(),
            why,
        };
        let layer = wasm_layer(&manifest.media_type, &manifest.bytes).map_err(not_a_module)?;
        let size = usize::try_from(layer.size).unwrap_or(usize::MAX);
        let bytes = registry.blob(&layer.digest, size).await.map_err(fail)?;
        let file = self.cache_file(&digest);
        if !super::store_atomically(&file, &bytes) {
            return Err(RegistryError::Cache {
                reference: shown,
                dir: self.cache.clone(),
                reason: "cannot create or write it, or it is not private to this user".into(),
            });
        }
        Ok(PulledModule { digest, file })
    }
}

/// Pulls every registry module of `policy` and records what each resolved to; the error is at
/// the hook's entry and names the reference.
pub fn pull_modules(policy: &mut Policy) -> Result<(), PolicyError> {
    let source = policy.source.clone();
    let mut registry = None;
    for spec in &mut policy.hooks {
        let ModuleSource::Registry { reference, pulled } = &mut spec.module else {
            continue;
        };
        let at = |message: String| PolicyError {
            file: source.clone(),
            line: spec.line,
            column: 0,
            message: format!("hook {}: {message}", spec.name),
        };
        if registry.is_none() {
            registry = Some(Registry::new().map_err(|e| at(e.to_string()))?);
        }
        let fetched = (registry.as_ref().expect("set above"))
            .pull(reference)
            .map_err(|e| at(format!("cannot pull its module: {e}")))?;
        *pulled = Some(fetched);
    }
    Ok(())
}

/// A content descriptor of a manifest.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: u64,
}

/// An image manifest, as far as a module artifact needs it.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct ImageManifest {
    schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    artifact_type: Option<String>,
    config: Descriptor,
    layers: Vec<Descriptor>,
    #[serde(default, skip_serializing)]
    manifests: Option<serde_json::Value>,
}

/// The one WebAssembly layer of an artifact's manifest (`bytes`, of `media_type`).
fn wasm_layer(media_type: &str, bytes: &[u8]) -> Result<Descriptor, String> {
    let index = || Err("its manifest is an index of images, not one artifact".into());
    if media_type.contains("index") || media_type.contains("list") {
        return index();
    }
    let image: ImageManifest = serde_json::from_slice(bytes)
        .map_err(|e| format!("its manifest ({media_type}) is not an image manifest: {e}"))?;
    if image.manifests.is_some() {
        return index();
    }
    let wasm: Vec<&Descriptor> = (image.layers.iter())
        .filter(|l| l.media_type == WASM_LAYER || l.media_type == WASM_LAYER_LEGACY)
        .collect();
    match wasm[..] {
        [layer] if layer.size > MAX_MODULE_BYTES => Err(format!(
            "its module is {} bytes, more than the {MAX_MODULE_BYTES} a hook may be",
            layer.size
        )),
        [layer] => Ok(layer.clone()),
        [] => Err(format!(
            "no layer of type {WASM_LAYER} (layers: {})",
            (image.layers.iter().map(|l| l.media_type.as_str()))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => Err(format!(
            "{} WebAssembly layers, where a module artifact has one",
            wasm.len()
        )),
    }
}

async fn push(bytes: &[u8], reference: &OciReference) -> Result<String, RegistryError> {
    let shown = reference.to_string();
    let fail = |e| failure(&shown, &reference.registry, e);
    let registry = connect(reference)?;
    let layer = Bytes::copy_from_slice(bytes);
    let layer_digest = sha256_digest(&layer);
    let config = serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    });
    let config = Bytes::from(serde_json::to_vec(&config).expect("a JSON value serializes"));
    let descriptor = |media_type: &str, blob: &Bytes| Descriptor {
        media_type: media_type.to_string(),
        digest: sha256_digest(blob),
        size: blob.len() as u64,
    };
    let manifest = ImageManifest {
        schema_version: 2,
        media_type: Some(IMAGE_MANIFEST.to_string()),
        artifact_type: Some(WASM_CONFIG.to_string()),
        config: descriptor(WASM_CONFIG, &config),
        layers: vec![descriptor(WASM_LAYER, &layer)],
        manifests: None,
    };
    let manifest = Bytes::from(serde_json::to_vec(&manifest).expect("a manifest serializes"));
    let digest = sha256_digest(&manifest);
    for blob in [layer, config] {
        let blob_digest = sha256_digest(&blob);
        registry.push_blob(&blob_digest, blob).await.map_err(fail)?;
    }
    let tag = reference.tag.as_deref().unwrap_or("latest");
    (registry.push_manifest(tag, manifest, IMAGE_MANIFEST).await).map_err(fail)?;
    Ok(digest)
}

/// What a pull asks the registry for: the digest when pinned, else the tag.
fn pinned_or_tag(reference: &OciReference) -> String {
    (reference.digest.clone())
        .or_else(|| reference.tag.clone())
        .unwrap_or_else(|| "latest".into())
}

/// A client of `reference`'s repository, with the docker config's credentials.
fn connect(reference: &OciReference) -> Result<Distribution, RegistryError> {
    // Docker Hub's name and the host of its API differ.
    let host = match reference.registry.as_str() {
        "docker.io" => "registry-1.docker.io",
        other => other,
    };
    Ok(Distribution::new(
        host,
        &reference.repository,
        on_loopback(&reference.registry),
        credentials(&reference.registry)?,
    ))
}

/// The docker config file's credentials for `registry` (helpers included); anonymous when
/// there is no such file or it has none for this registry.
fn credentials(registry: &str) -> Result<Credentials, RegistryError> {
    use docker_credential::{CredentialRetrievalError as E, DockerCredential};
    let Some(file) = docker_config_file().filter(|f| f.is_file()) else {
        return Ok(Credentials::Anonymous);
    };
    let unreadable = |reason: String| RegistryError::Credentials {
        registry: registry.to_string(),
        reason: format!("{}: {reason}", file.display()),
    };
    let reader = std::fs::File::open(&file).map_err(|e| unreadable(e.to_string()))?;
    match docker_credential::get_credential_from_reader(std::io::BufReader::new(reader), registry) {
        Ok(DockerCredential::UsernamePassword(user, password)) => {
            Ok(Credentials::Basic { user, password })
        }
        Ok(DockerCredential::IdentityToken(token)) => Ok(Credentials::IdentityToken(token)),
        Err(E::NoCredentialConfigured) => Ok(Credentials::Anonymous),
        Err(e) => Err(unreadable(format!("{e:?}"))),
    }
}

/// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`, as docker reads it.
fn docker_config_file() -> Option<PathBuf> {
    let dir = std::env::var_os("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker")))?;
    Some(dir.join("config.json"))
}

/// Whether `registry` (host and port) is on this machine: spoken to over plain HTTP.
fn on_loopback(registry: &str) -> bool {
    let host = match registry.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => registry.split(':').next().unwrap_or_default(),
    };
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A client error as the operator reads it: the reference and what to do.
fn failure(reference: &str, registry: &str, e: DistributionError) -> RegistryError {
    let reference = reference.to_string();
    match e {
        DistributionError::Unreachable(reason) => RegistryError::Unreachable { reference, reason },
        DistributionError::Refused(reason) => RegistryError::Unauthorized {
            reference,
            registry: registry.to_string(),
            reason,
        },
        DistributionError::NotFound(reason) => RegistryError::NotFound { reference, reason },
        DistributionError::Failed(reason) => RegistryError::Failed { reference, reason },
    }
}

/// Runs `work` to completion on a runtime of its own, on a thread of its own: callable from
/// any context, inside another runtime's blocking section too.
fn blocking<T: Send>(work: impl Future<Output = T> + Send) -> Result<T, RegistryError> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| RegistryError::Failed {
                        reference: "(none yet)".into(),
                        reason: format!("cannot start the async runtime: {e}"),
                    })?;
                Ok(runtime.block_on(work))
            })
            .join()
            .expect("a registry call does not panic")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_registries_are_told_apart_from_remote_ones() {
        for local in [
            "127.0.0.1:5000",
            "localhost:5000",
            "localhost",
            "[::1]:5000",
            "127.1.2.3",
        ] {
            assert!(on_loopback(local), "{local}");
        }
        for remote in [
            "registry.example",
            "10.0.0.1:5000",
            "registry.example:443",
            "[2001:db8::1]:5000",
        ] {
            assert!(!on_loopback(remote), "{remote}");
        }
    }

    #[test]
    fn an_artifact_has_exactly_one_wasm_layer_of_bounded_size() {
        let layer = |media_type: &str, size: u64| serde_json::json!({"mediaType": media_type, "digest": "sha256:00", "size": size});
        let manifest = |layers: Vec<serde_json::Value>| {
            let config = layer(WASM_CONFIG, 2);
            serde_json::to_vec(&serde_json::json!({
                "schemaVersion": 2, "config": config, "layers": layers
            }))
            .unwrap()
        };
        let layer_of = |layers| wasm_layer(IMAGE_MANIFEST, &manifest(layers));
        let refusal = |layers| layer_of(layers).unwrap_err();
        assert_eq!(layer_of(vec![layer(WASM_LAYER, 10)]).unwrap().size, 10);
        assert!(layer_of(vec![layer(WASM_LAYER_LEGACY, 10)]).is_ok());
        let tar = layer("application/vnd.oci.image.layer.v1.tar", 1);
        assert!(refusal(vec![tar]).contains("no layer of type application/wasm"));
        let two = vec![layer(WASM_LAYER, 1), layer(WASM_LAYER, 1)];
        assert!(refusal(two).contains("2 WebAssembly layers"));
        let large = layer(WASM_LAYER, MAX_MODULE_BYTES + 1);
        assert!(refusal(vec![large]).contains("more than"));
        let index = br#"{"schemaVersion": 2, "manifests": []}"#;
        let e = wasm_layer("application/vnd.oci.image.index.v1+json", index).unwrap_err();
        assert!(e.contains("index of images"), "{e}");
        let index = br#"{"schemaVersion": 2, "config": {"mediaType": "a", "digest": "b", "size": 1}, "layers": [], "manifests": []}"#;
        let e = wasm_layer("application/json", index).unwrap_err();
        assert!(e.contains("index of images"), "{e}");
        let e = wasm_layer(IMAGE_MANIFEST, b"{}").unwrap_err();
        assert!(e.contains("not an image manifest"), "{e}");
    }

    #[test]
    fn a_digest_pinned_module_in_the_cache_is_read_without_the_registry() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry {
            cache: dir.path().to_path_buf(),
        };
        let digest = format!("sha256:{}", "a".repeat(64));
        let file = registry.cache_file(&digest);
        std::fs::write(&file, b"\0asm").unwrap();
        // A registry on a port nothing listens on: only the cache can answer.
        let reference =
            OciReference::parse(&format!("oci://127.0.0.1:1/hooks/site@{digest}")).unwrap();
        let pulled = registry.pull(&reference).unwrap();
        assert_eq!(pulled.file, file);
        assert_eq!(pulled.digest, digest);
        let tagged = OciReference::parse("oci://127.0.0.1:1/hooks/site:v1").unwrap();
        let e = registry.pull(&tagged).unwrap_err();
        assert!(
            matches!(e, RegistryError::Unreachable { .. }),
            "a tag is resolved by the registry: {e}"
        );
        assert!(
            e.to_string().contains("oci://127.0.0.1:1/hooks/site:v1"),
            "{e}"
        );
    }
}
