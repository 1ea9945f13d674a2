//! The `kubectl-rollout_ext` binary: kubectl runs it for `kubectl rollout-ext`.

fn main() -> std::process::ExitCode {
    rollout_ext::cli::main()
}
