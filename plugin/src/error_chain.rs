//! An error as one line for the operator: the clients' errors (kube's, the registry's) keep the
//! useful part (the refused connection, the server's words) in their sources.

/// An error and its sources, each said once.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}
