//! Where each kind's items lie in a snapshot file, found by skimming it once: hooks that read
//! objects offline get the items of the kinds they ask for, and no item of any other kind is
//! ever parsed (a snapshot is mostly pods, which no hook lists).

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::SnapshotError;

/// The byte ranges of a list's items, by apiVersion and kind.
#[derive(Debug, Default)]
pub struct KindIndex {
    by_kind: HashMap<(String, String), Vec<Range<usize>>>,
}

#[derive(Deserialize)]
struct SkimmedList<'a> {
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    items: Vec<&'a RawValue>,
}

/// An item's identity; the rest of it is skipped, not built.
#[derive(Deserialize)]
struct Identity<'a> {
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Cow<'a, str>,
}

impl KindIndex {
    /// Skims `bytes`, a list as [`super::Snapshot::from_json`] reads it. Items of an API list
    /// page (`NodeList`) carry no kind of their own: they take the list's.
    pub fn read(bytes: &[u8]) -> Result<KindIndex, SnapshotError> {
        let list: SkimmedList = serde_json::from_slice(bytes).map_err(SnapshotError::Json)?;
        let list_kind = list.kind.strip_suffix("List").unwrap_or_default();
        let mut by_kind: HashMap<(String, String), Vec<Range<usize>>> = HashMap::new();
        for (index, item) in list.items.iter().enumerate() {
            let text = item.get();
            let identity: Identity = serde_json::from_str(text)
                .map_err(|source| SnapshotError::Unreadable { index, source })?;
            let kind = Some(identity.kind).filter(|k| !k.is_empty());
            let api_version = Some(identity.api_version).filter(|v| !v.is_empty());
            // The item borrows from `bytes`, so its place in them is where its text starts.
            let start = text.as_ptr() as usize - bytes.as_ptr() as usize;
            by_kind
                .entry((
                    api_version
                        .unwrap_or(Cow::Borrowed(&list.api_version))
                        .into_owned(),
                    kind.unwrap_or(Cow::Borrowed(list_kind)).into_owned(),
                ))
                .or_default()
                .push(start..start + text.len());
        }
        Ok(KindIndex { by_kind })
    }

    /// Whether the list holds any item of `kind` in `api_version`.
    pub fn holds(&self, api_version: &str, kind: &str) -> bool {
        self.ranges(api_version, kind).next().is_some()
    }

    /// The text of each item of `kind` in `api_version`, in the list's order; `bytes` are the
    /// ones the index was read from.
    pub fn items<'b>(
        &self,
        bytes: &'b [u8],
        api_version: &str,
        kind: &str,
    ) -> impl Iterator<Item = &'b str> {
        // Each range is the text of a RawValue, valid UTF-8 that starts and ends on a boundary.
        self.ranges(api_version, kind)
            .map(move |r| std::str::from_utf8(&bytes[r]).unwrap_or_default())
    }

    fn ranges(&self, api_version: &str, kind: &str) -> impl Iterator<Item = Range<usize>> + '_ {
        (self
            .by_kind
            .get(&(api_version.to_string(), kind.to_string())))
        .into_iter()
        .flatten()
        .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_kinds_items_and_gives_list_pages_their_kind() {
        let list = br#"{"kind": "List", "apiVersion": "v1", "items": [
            {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "a"}},
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d\u00e9"}},
            {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "b"}}]}"#;
        let index = KindIndex::read(list).unwrap();
        let pods: Vec<&str> = index.items(list, "v1", "Pod").collect();
        assert_eq!(pods.len(), 2);
        assert!(pods[0].contains(r#""name": "a""#) && pods[1].contains(r#""name": "b""#));
        let deployment: serde_json::Value =
            serde_json::from_str(index.items(list, "apps/v1", "Deployment").next().unwrap())
                .unwrap();
        assert_eq!(deployment["metadata"]["name"], "dé");
        assert!(!index.holds("apps/v1", "Pod") && !index.holds("v1", "Deployment"));

        let page =
            br#"{"kind": "NodeList", "apiVersion": "v1", "items": [{"metadata": {"name": "n"}}]}"#;
        assert!(KindIndex::read(page).unwrap().holds("v1", "Node"));
    }

    #[test]
    fn says_which_item_is_malformed() {
        let list = br#"{"kind": "List", "items": [{"kind": "Pod"}, ["not", "an", "object"]]}"#;
        let error = KindIndex::read(list).unwrap_err().to_string();
        assert!(error.starts_with("item 1"), "{error}");
        assert!(KindIndex::read(b"{\"items\": [").is_err());
    }
}
