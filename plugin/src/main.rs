//! The `kubectl-rollout_ext` binary: kubectl runs it for `kubectl rollout-ext`.

/// A plan or a live view of a large cluster is mostly small allocations (each pod's strings and
/// labels): mimalloc made the offline plan of 150,000 pods a third faster than the system's
/// allocator (BENCHMARKS.md, issue 43).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    rollout_ext::cli::main()
}
