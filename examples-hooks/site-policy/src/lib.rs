//! A site's rules, written from the docs as a new user would (the tests are in `tests.rs`):
//! fewest pods first and never a node labelled `example.com/pinned=true`; at most 2 nodes per
//! batch, never two of one `example.com/rack`; after each batch, wait (3 checks, 20 s apart)
//! while a pod in namespace `payments` is not Ready, then abort.

use rollout_ext_hooks::*;

const PINNED: &str = "example.com/pinned";
const RACK: &str = "example.com/rack";

pub struct SitePolicy;

#[policy]
impl Policy for SitePolicy {
    const NAME: &'static str = "site-policy";

    fn select(candidates: &Instances) -> Result<Selection, String> {
        let pinned = |c: &Candidate| c.label(PINNED).as_deref() == Some("true");
        let chosen = candidates.iter().filter(|c| !c.up_to_date && !pinned(c));
        Ok(choose_by(
            chosen,
            |c| c.pods,
            |c| format!("{} pods to move", c.pods),
        ))
    }

    fn next_batch(p: &Progress) -> Result<BatchSize, String> {
        let two = p.pending.len() > 1 && p.pending.label(0, RACK) != p.pending.label(1, RACK);
        let size = 1 + u32::from(two);
        Ok(BatchSize::size(size, "at most 2, one per rack"))
    }

    fn after_batch(b: &Batch) -> Result<Verdict, String> {
        let pods = host::pods(Some("payments"), None)?;
        let n = pods.iter().filter(|p| !p.is_ready()).count();
        let held = || hold(b, 3, 20, format!("{n} payments pod(s) not Ready"));
        Ok(if n == 0 { Verdict::Proceed } else { held() })
    }
}

export_policy!(SitePolicy);

#[cfg(test)]
mod tests;
