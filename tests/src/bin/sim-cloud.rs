//! `sim-cloud VERB TARGET`: the simulated cloud's command line, for the plugin's `exec` provider.
//! Verbs: `terminate NODE`, `detach NODE`, `surge GROUP`, `list [GROUP]`. The socket comes from
//! `--socket PATH` or `$SIM_CLOUD_SOCKET`. Prints the cloud's JSON answer; exit 1 on error.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut socket = std::env::var("SIM_CLOUD_SOCKET").ok();
    if let Some(pos) = args.iter().position(|a| a == "--socket") {
        if pos + 1 >= args.len() {
            eprintln!("sim-cloud: --socket needs a path");
            return ExitCode::from(2);
        }
        socket = Some(args.remove(pos + 1));
        args.remove(pos);
    }
    let (Some(socket), Some(verb)) = (socket, args.first()) else {
        eprintln!("usage: sim-cloud [--socket PATH] terminate|detach|surge|list [TARGET]");
        return ExitCode::from(2);
    };
    let target = args.get(1).cloned().unwrap_or_default();
    let request = serde_json::json!({"verb": verb, "target": target});
    let answer = (|| -> std::io::Result<String> {
        let mut stream = UnixStream::connect(&socket)?;
        stream.write_all(format!("{request}\n").as_bytes())?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line)?;
        Ok(line)
    })();
    match answer.map(|l| serde_json::from_str::<serde_json::Value>(&l)) {
        Ok(Ok(reply)) if reply.get("ok").is_some() => {
            println!("{}", reply["ok"]);
            ExitCode::SUCCESS
        }
        Ok(Ok(reply)) => {
            eprintln!("sim-cloud: {}", reply["error"].as_str().unwrap_or("error"));
            ExitCode::FAILURE
        }
        Ok(Err(e)) => {
            eprintln!("sim-cloud: bad answer: {e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("sim-cloud: cannot reach the cloud at {socket}: {e}");
            ExitCode::FAILURE
        }
    }
}
