//! Where a hook's module comes from: a file beside the policy, or an OCI registry
//! (`oci://REGISTRY/REPOSITORY:TAG` or `…@sha256:DIGEST`). Parsing only: pulling is the hooks
//! layer's, which records what it pulled here so that the plan can show the digest.

use std::fmt;
use std::path::{Path, PathBuf};

/// The scheme that marks a module kept in a registry.
pub const OCI_SCHEME: &str = "oci://";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleSource {
    /// A file, resolved against the policy's directory.
    File(PathBuf),
    /// An artifact in a registry; `pulled` once the hooks layer fetched it.
    Registry {
        reference: OciReference,
        pulled: Option<PulledModule>,
    },
}

/// A registry module as fetched: the manifest digest its reference resolved to (the pin a tag
/// stands for) and the cached file holding its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledModule {
    pub digest: String,
    pub file: PathBuf,
}

impl ModuleSource {
    /// The file to read: a local module's path, or a pulled module's cached copy.
    pub fn file(&self) -> Option<&Path> {
        match self {
            ModuleSource::File(path) => Some(path),
            ModuleSource::Registry { pulled, .. } => pulled.as_ref().map(|p| p.file.as_path()),
        }
    }
}

impl fmt::Display for ModuleSource {
    /// A file's path; a registry module's reference, with the digest a tag resolved to.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModuleSource::File(path) => write!(f, "{}", path.display()),
            ModuleSource::Registry {
                reference,
                pulled: Some(pulled),
            } if reference.digest.is_none() => {
                write!(f, "{}", reference.pinned(&pulled.digest))
            }
            ModuleSource::Registry { reference, .. } => write!(f, "{reference}"),
        }
    }
}

/// `REGISTRY/REPOSITORY` with a tag, a digest (`sha256:` and 64 hex digits), or both (the
/// digest decides then; the tag is a reminder, as in every OCI client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciReference {
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

impl OciReference {
    /// Parses `oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<OciReference, String> {
        let rest = text
            .strip_prefix(OCI_SCHEME)
            .ok_or_else(|| format!("{text:?}: a registry module starts with {OCI_SCHEME}"))?;
        let (name, digest) = match rest.split_once('@') {
            Some((name, digest)) => (name, Some(digest)),
            None => (rest, None),
        };
        let digest = digest.map(parse_digest).transpose()?;
        let (registry, path) = name.split_once('/').ok_or_else(|| {
            format!(
                "{text:?}: expected oci://REGISTRY/REPOSITORY:TAG (the registry is not optional)"
            )
        })?;
        if registry.is_empty() || !registry.chars().all(registry_char) {
            return Err(format!("{text:?}: invalid registry {registry:?}"));
        }
        // A tag follows the last ':' after the last '/' (a registry's port comes before).
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repository, tag)) if !tag.contains('/') => (repository, Some(tag)),
            _ => (path, None),
        };
        if !repository.split('/').all(valid_path_component) {
            return Err(format!(
                "{text:?}: invalid repository {repository:?} (lowercase letters, digits, and '.', '_', '-' between them)"
            ));
        }
        if let Some(tag) = tag
            && !valid_tag(tag)
        {
            return Err(format!(
                "{text:?}: invalid tag {tag:?} (up to 128 letters, digits, '_', '.', '-', not starting with '.' or '-')"
            ));
        }
        if tag.is_none() && digest.is_none() {
            return Err(format!(
                "{text:?}: name a tag (…:v1) or a digest (…@sha256:…); no tag is assumed, so that the policy says which module it runs"
            ));
        }
        Ok(OciReference {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest,
        })
    }

    /// The reference as OCI clients write it: `REGISTRY/REPOSITORY:TAG@DIGEST`, no scheme.
    pub fn target(&self) -> String {
        let mut s = format!("{}/{}", self.registry, self.repository);
        if let Some(tag) = &self.tag {
            s.push(':');
            s.push_str(tag);
        }
        if let Some(digest) = &self.digest {
            s.push('@');
            s.push_str(digest);
        }
        s
    }

    /// The same reference pinned to `digest`.
    pub fn pinned(&self, digest: &str) -> OciReference {
        OciReference {
            digest: Some(digest.to_string()),
            ..self.clone()
        }
    }
}

impl fmt::Display for OciReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{OCI_SCHEME}{}", self.target())
    }
}

fn parse_digest(digest: &str) -> Result<String, String> {
    let hex = digest.strip_prefix("sha256:").unwrap_or("");
    if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!(
            "digest {digest:?}: expected sha256: and 64 hexadecimal digits"
        ));
    }
    Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
}

fn registry_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']')
}

/// A repository path component: lowercase alphanumerics, separated by one '.', '_' or '-'
/// (or two '_').
fn valid_path_component(part: &str) -> bool {
    let lower_alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !part.is_empty()
        && part.starts_with(lower_alnum)
        && part.ends_with(lower_alnum)
        && part
            .chars()
            .all(|c| lower_alnum(c) || matches!(c, '.' | '_' | '-'))
        && !part.contains("..")
}

fn valid_tag(tag: &str) -> bool {
    (1..=128).contains(&tag.len())
        && tag.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_reference_names_registry_repository_tag_and_digest() {
        let r = OciReference::parse("oci://127.0.0.1:5000/hooks/zone-spread:v1").unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "hooks/zone-spread");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.digest, None);
        assert_eq!(r.target(), "127.0.0.1:5000/hooks/zone-spread:v1");
        let pinned =
            OciReference::parse(&format!("oci://registry.example/site/policy@{D}")).unwrap();
        assert_eq!(pinned.tag, None);
        assert_eq!(pinned.digest.as_deref(), Some(D));
        let upper = D.replace("abcdef", "ABCDEF");
        let both = OciReference::parse(&format!("oci://r.example/p:v2@{upper}"));
        assert_eq!(
            both.unwrap().digest.as_deref(),
            Some(D),
            "kept in lowercase"
        );
        assert_eq!(
            r.pinned(D).to_string(),
            format!("oci://127.0.0.1:5000/hooks/zone-spread:v1@{D}")
        );
    }

    #[test]
    fn a_reference_without_tag_or_digest_or_registry_is_refused_with_why() {
        let e = OciReference::parse("oci://r.example/policy").unwrap_err();
        assert!(e.contains("name a tag"), "{e}");
        let e = OciReference::parse("oci://policy:v1").unwrap_err();
        assert!(e.contains("registry is not optional"), "{e}");
        let e = OciReference::parse("oci://r.example/Policy:v1").unwrap_err();
        assert!(e.contains("invalid repository"), "{e}");
        let e = OciReference::parse("oci://r.example/p:.v1").unwrap_err();
        assert!(e.contains("invalid tag"), "{e}");
        let e = OciReference::parse("oci://r.example/p@sha256:abc").unwrap_err();
        assert!(e.contains("64 hexadecimal digits"), "{e}");
        let e = OciReference::parse("r.example/p:v1").unwrap_err();
        assert!(e.contains("starts with oci://"), "{e}");
    }

    #[test]
    fn a_pulled_tag_shows_the_digest_it_resolved_to() {
        let reference = OciReference::parse("oci://r.example/p:v1").unwrap();
        let source = ModuleSource::Registry {
            reference: reference.clone(),
            pulled: None,
        };
        assert_eq!(source.to_string(), "oci://r.example/p:v1");
        assert_eq!(source.file(), None, "nothing to read before the pull");
        let source = ModuleSource::Registry {
            reference,
            pulled: Some(PulledModule {
                digest: D.into(),
                file: "/cache/m.wasm".into(),
            }),
        };
        assert_eq!(source.to_string(), format!("oci://r.example/p:v1@{D}"));
        assert_eq!(source.file(), Some(Path::new("/cache/m.wasm")));
    }
}
