//! `gen-snapshot`: writes a synthetic cluster as a v1 List on stdout, for benchmarks and for
//! trying plans at scale.
//!
//!   gen-snapshot [--nodes N] [--groups G] [--zones Z] [--pods-per-node P] [--pdbs B] [--seed S]

use rollout_ext_e2e::synthetic::{Shape, cluster};

fn main() -> anyhow::Result<()> {
    let mut shape = Shape {
        nodes: 500,
        groups: 10,
        zones: 3,
        pods_per_node: 30,
        pdbs: 200,
        seed: 1,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let [flag, value] = pair else {
            anyhow::bail!("expected --FLAG VALUE pairs, got {pair:?}");
        };
        let slot = match flag.as_str() {
            "--nodes" => &mut shape.nodes,
            "--groups" => &mut shape.groups,
            "--zones" => &mut shape.zones,
            "--pods-per-node" => &mut shape.pods_per_node,
            "--pdbs" => &mut shape.pdbs,
            "--seed" => {
                shape.seed = value.parse()?;
                continue;
            }
            other => anyhow::bail!("unknown flag {other}"),
        };
        *slot = value.parse()?;
    }
    println!("{}", cluster(shape));
    Ok(())
}
