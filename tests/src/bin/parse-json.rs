//! `parse-json FILE`: reads FILE and parses it into a `serde_json::Value`, nothing else. The peer
//! of an offline plan, in the benchmarks and the plan's memory guard: what reading the whole
//! snapshot as a value tree costs.

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file] = args.as_slice() else {
        anyhow::bail!("usage: parse-json FILE");
    };
    let bytes = std::fs::read(file)?;
    let value: serde_json::Value = serde_json::from_slice(&bytes)?;
    std::hint::black_box(&value);
    Ok(())
}
