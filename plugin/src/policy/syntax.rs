//! What the YAML parser says of a policy file it cannot read, told in the file's own terms.

/// The parser's `error` for the file `text`, at `line`: its message without its own position,
/// or for a key left without a value, what to write there.
pub(super) fn message(text: &str, line: u32, error: &str) -> String {
    let message = first_line(error);
    left_empty(text, line, &message).unwrap_or(message)
}

/// A key left without a value where a list or a mapping belongs (`contextResources:` and
/// nothing under it): YAML reads null there, and the parser says only what it expected, at the
/// key's line or the next token's (the next key, or past the end of the file): the key is the
/// line given, or the nearest written line above it, that ends with `:`.
fn left_empty(text: &str, line: u32, message: &str) -> Option<String> {
    let (wanted, empty) = match message {
        "expected sequence start" => ("a list", "[]"),
        "expected mapping start" => ("a mapping", "{}"),
        _ => return None,
    };
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let at = usize::try_from(line).ok()?.min(lines.len());
    let written = |l: &&&str| !l.trim().is_empty() && !l.trim_start().starts_with('#');
    let given = lines.get(at.checked_sub(1)?).filter(written);
    let above = lines[..at.saturating_sub(1)].iter().rev().find(written);
    let key = (given.into_iter().chain(above))
        .find_map(|l| l.strip_suffix(':'))?
        .trim();
    let key = key.strip_prefix("- ").unwrap_or(key).trim();
    (!key.is_empty() && !key.contains(char::is_whitespace)).then(|| {
        format!("{key} has no value: give it {wanted} (`{key}: {empty}` for none) or leave it out")
    })
}

/// The parser's message without its own position prefix (`error: line L column C: `), which
/// the error already gives as `file:line:column`.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or(text);
    let line = line.strip_prefix("error: ").unwrap_or(line);
    match line
        .strip_prefix("line ")
        .and_then(|rest| rest.split_once(": "))
    {
        Some((position, message)) if position.contains(" column ") => message.to_string(),
        _ => line.to_string(),
    }
}
