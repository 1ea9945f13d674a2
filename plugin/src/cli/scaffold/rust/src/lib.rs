//! {{name}}: a rollout-ext policy hook, as `kubectl rollout-ext hooks new` wrote it. Its rules:
//! - select: the built-in choice, oldest first, never a node labelled `example.com/hold=true`;
//! - batch: at most 2 nodes at a time;
//! - gate: after each batch, wait (3 checks, 30 s apart) while a pod of namespace `default` is
//!   not Ready, then abort.
//!
//! Change them, and the tests (src/tests.rs) and fixtures (fixtures/) with them.

use rollout_ext_hooks::*;

const HOLD: &str = "example.com/hold";

pub struct Hook;

// Declares the points implemented here: select, batch and gate.
#[policy]
impl Policy for Hook {
    const NAME: &'static str = "{{name}}";

    fn select(candidates: &Instances) -> Result<Selection, String> {
        let held = |c: &Candidate| c.label(HOLD).as_deref() == Some("true");
        let mut chosen: Vec<Candidate> = candidates.chosen().filter(|c| !held(c)).collect();
        // An unknown creation time first, as the oldest; names break ties.
        chosen.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
        let choice = |c: &Candidate| Choice::new(&c.name, "oldest first");
        Ok(Selection::Choose(chosen.iter().map(choice).collect()))
    }

    fn next_batch(p: &Progress) -> Result<BatchSize, String> {
        Ok(BatchSize::at_most(2, p, "at most 2 at a time"))
    }

    // A gate asked after each batch only (`check` is asked in every phase).
    fn after_batch(b: &Batch) -> Result<Verdict, String> {
        let pods = host::pods(Some("default"), None)?;
        let not_ready = pods.iter().filter(|p| !p.is_ready()).map(|p| p.key());
        Ok(hold_while(b, 3, 30, "pods of default not Ready", not_ready.collect()))
    }
}

export_policy!(Hook);

#[cfg(test)]
mod tests;
