//! Where the keys of a hook's `config` are in the policy file, so that a module's complaint
//! about a key (serde's "unknown field `maxPerZon`") points at that key's line and column. The
//! config reaches the module as JSON, which has lost the positions; the YAML text still has them.

/// A key of a config mapping (at any depth) and where it is, counted from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyAt {
    pub key: String,
    pub line: u32,
    pub column: u32,
}

/// The keys of the config value that starts at `line`:`column` of `text`: a flow mapping
/// (`{a: 1, b: 2}`) on that line, or a block mapping whose keys are indented at least as far as
/// its first one.
pub fn config_keys(text: &str, line: u32, column: u32) -> Vec<KeyAt> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(first) = lines.get(line.saturating_sub(1) as usize) else {
        return Vec::new();
    };
    let start = first
        .char_indices()
        .nth(column.saturating_sub(1) as usize)
        .map_or(first.len(), |(i, _)| i);
    if first[start..].starts_with('{') {
        return flow_keys(&first[start..], line, start as u32 + 1);
    }
    let indent = column.saturating_sub(1) as usize;
    let mut keys = Vec::new();
    for (n, l) in lines
        .iter()
        .enumerate()
        .skip(line.saturating_sub(1) as usize)
    {
        let body = l.trim_start();
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let at = l.len() - body.len();
        if at < indent {
            break;
        }
        let body = body.strip_prefix("- ").unwrap_or(body);
        let at = l.len() - body.len();
        if let Some((key, _)) = body.split_once(':') {
            let key = key.trim().trim_matches(['"', '\'']);
            if !key.is_empty() && !key.contains(['{', '[', ' ']) {
                keys.push(KeyAt {
                    key: key.to_string(),
                    line: n as u32 + 1,
                    column: at as u32 + 1,
                });
            }
        }
    }
    keys
}

/// The keys of a flow mapping written on one line, `column` being where it starts.
fn flow_keys(flow: &str, line: u32, column: u32) -> Vec<KeyAt> {
    let mut keys = Vec::new();
    let mut entry_start = 1;
    for (i, c) in flow.char_indices() {
        if c == ',' || c == '{' {
            entry_start = i + 1;
        } else if c == ':' {
            let raw = &flow[entry_start..i];
            let key = raw.trim().trim_matches(['"', '\'']);
            if !key.is_empty() && !key.contains(['{', '[', '}', ' ']) {
                let offset = entry_start + (raw.len() - raw.trim_start().len());
                keys.push(KeyAt {
                    key: key.to_string(),
                    line,
                    column: column + offset as u32,
                });
            }
            entry_start = i + 1;
        }
    }
    keys
}

/// The key a module's message names between backticks (serde's style), if the config has it.
pub fn named_in<'a>(message: &str, keys: &'a [KeyAt]) -> Option<&'a KeyAt> {
    message
        .split('`')
        .skip(1)
        .step_by(2)
        .find_map(|name| keys.iter().find(|k| k.key == name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(keys: &[KeyAt]) -> Vec<(&str, u32, u32)> {
        keys.iter()
            .map(|k| (k.key.as_str(), k.line, k.column))
            .collect()
    }

    #[test]
    fn keys_of_a_block_mapping_at_any_depth_and_no_further() {
        let text = "  - name: a\n    config:\n      maxPerZon: 1\n      # a note\n      windows:\n        - {days: [mon]}\n        - start: \"10:00\"\n  - name: b\n    config: {x: 1}\n";
        assert_eq!(
            found(&config_keys(text, 3, 7)),
            [("maxPerZon", 3, 7), ("windows", 5, 7), ("start", 7, 11)]
        );
    }

    #[test]
    fn keys_of_a_flow_mapping() {
        let text = "    config: {maxPerZone: 1, \"retry\": 2}\n";
        assert_eq!(
            found(&config_keys(text, 1, 13)),
            [("maxPerZone", 1, 14), ("retry", 1, 29)]
        );
    }

    #[test]
    fn the_key_a_message_names() {
        let keys = config_keys("config:\n  maxPerZon: 1\n", 2, 3);
        let message = "unknown field `maxPerZon`, expected `maxPerZone`";
        assert_eq!(named_in(message, &keys), Some(&keys[0]));
        assert_eq!(named_in("no names here", &keys), None);
        assert_eq!(named_in("`other`", &keys), None);
    }
}
