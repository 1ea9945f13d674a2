//! kubectl rollout-ext: rotate nodes with kops semantics and roll controllers with the "simple
//! rolling update" design, with site policy in sandboxed WebAssembly hooks.

pub mod cli;
pub mod cluster;
pub mod duration;
pub mod error_chain;
pub mod events;
pub mod fleet;
pub mod hooks;
pub mod kernel;
pub mod keys;
pub mod labels;
pub mod metrics;
pub mod plan;
pub mod policy;
pub mod progress;
pub mod provider;
pub mod quantity;
pub mod report;
pub mod rotate;
pub mod scheduling;
pub mod snapshot;
pub mod tls;
pub mod workload;
