//! Child processes that cannot outlive the tests: each is spawned from a thread that lives as
//! long as its owner, with `PR_SET_PDEATHSIG` so the kernel kills it if that thread (or the
//! whole test process, even by SIGKILL) goes away; [`Processes`] kills them on drop.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// How a child was started, to start it again.
#[derive(Clone)]
struct Spec {
    program: std::path::PathBuf,
    args: Vec<String>,
    /// Environment variables beyond the test process's own.
    env: Vec<(String, String)>,
    log: std::path::PathBuf,
}

/// The processes of one test cluster.
pub struct Processes {
    requests: Option<mpsc::Sender<SpawnRequest>>,
    children: Arc<Mutex<Vec<(String, Child)>>>,
    specs: Mutex<Vec<(String, Spec)>>,
}

impl Processes {
    pub fn new() -> Self {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        // This thread does every fork and lives until the owner drops `requests`.
        std::thread::Builder::new()
            .name("test-cluster-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("the spawner thread starts");
        Processes {
            requests: Some(tx),
            children: Arc::new(Mutex::new(Vec::new())),
            specs: Mutex::new(Vec::new()),
        }
    }

    /// Starts `program` with `args`, its output appended to `log`.
    pub fn spawn(
        &self,
        name: &str,
        program: &std::path::Path,
        args: &[String],
        log: &std::path::Path,
    ) -> anyhow::Result<u32> {
        self.spawn_with_env(name, program, args, &[], log)
    }

    /// [`Processes::spawn`] with `env` set in the child (a program that takes its kubeconfig
    /// only from `KUBECONFIG`).
    pub fn spawn_with_env(
        &self,
        name: &str,
        program: &std::path::Path,
        args: &[String],
        env: &[(String, String)],
        log: &std::path::Path,
    ) -> anyhow::Result<u32> {
        let spec = Spec {
            program: program.to_path_buf(),
            args: args.to_vec(),
            env: env.to_vec(),
            log: log.to_path_buf(),
        };
        self.specs
            .lock()
            .unwrap()
            .push((name.to_string(), spec.clone()));
        let out = std::fs::File::create(log)?;
        self.start(name, &spec, out)
    }

    fn start(&self, name: &str, spec: &Spec, out: std::fs::File) -> anyhow::Result<u32> {
        let program = &spec.program;
        let mut command = Command::new(program);
        command
            .args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        // SAFETY: prctl is async-signal-safe and touches only the child's own state.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let (tx, rx) = mpsc::channel();
        self.requests
            .as_ref()
            .expect("spawner alive")
            .send((command, tx))
            .map_err(|_| anyhow::anyhow!("the spawner thread is gone"))?;
        let child = rx
            .recv()?
            .map_err(|e| anyhow::anyhow!("cannot start {name} ({}): {e}", program.display()))?;
        let pid = child.id();
        self.children
            .lock()
            .unwrap()
            .push((name.to_string(), child));
        Ok(pid)
    }

    /// Pids of the running children, by name.
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.children
            .lock()
            .unwrap()
            .iter()
            .map(|(n, c)| (n.clone(), c.id()))
            .collect()
    }

    /// Fails if a child has exited, naming it and its status.
    pub fn check_alive(&self) -> anyhow::Result<()> {
        for (name, child) in self.children.lock().unwrap().iter_mut() {
            if let Some(status) = child.try_wait()? {
                anyhow::bail!("{name} exited: {status}{}", self.last_words(name));
            }
        }
        Ok(())
    }

    /// The end of `name`'s log, to say why it exited.
    fn last_words(&self, name: &str) -> String {
        let specs = self.specs.lock().unwrap();
        let Some((_, spec)) = specs.iter().rev().find(|(n, _)| n == name) else {
            return String::new();
        };
        let log = std::fs::read_to_string(&spec.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let last = &lines[lines.len().saturating_sub(5)..];
        match last.is_empty() {
            true => String::new(),
            false => format!(
                "; the end of its log ({}):\n{}",
                spec.log.display(),
                last.join("\n")
            ),
        }
    }

    /// Kills one child by name and starts it again with the same arguments (its log goes on in
    /// the same file): a crash and a restart, as a supervisor would do it.
    pub fn restart(&self, name: &str) -> anyhow::Result<u32> {
        let spec = self
            .specs
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
            .ok_or_else(|| anyhow::anyhow!("no process {name} was started"))?;
        self.kill(name);
        let out = std::fs::OpenOptions::new().append(true).open(&spec.log)?;
        self.start(name, &spec, out)
    }

    /// Stops one child by name (SIGSTOP): it keeps its connections but answers nothing, as a
    /// hung process does.
    pub fn pause(&self, name: &str) -> anyhow::Result<()> {
        self.signal(name, libc::SIGSTOP)
    }

    /// Lets a paused child go on (SIGCONT).
    pub fn resume(&self, name: &str) -> anyhow::Result<()> {
        self.signal(name, libc::SIGCONT)
    }

    fn signal(&self, name: &str, signal: i32) -> anyhow::Result<()> {
        let pid = self
            .pids()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, pid)| pid)
            .ok_or_else(|| anyhow::anyhow!("no running process {name}"))?;
        // SAFETY: kill has no memory-safety preconditions; the pid is a child not yet waited
        // for, so it is not reused.
        if unsafe { libc::kill(pid as i32, signal) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(())
    }

    /// Kills one child by name (to simulate a crash) and waits for it.
    pub fn kill(&self, name: &str) {
        let mut children = self.children.lock().unwrap();
        if let Some(pos) = children.iter().position(|(n, _)| n == name) {
            let (_, mut child) = children.remove(pos);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Default for Processes {
    fn default() -> Self {
        Processes::new()
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        // Stop in reverse order: scheduler and controllers, then the apiserver, then etcd.
        let mut children = self.children.lock().unwrap();
        while let Some((_, mut child)) = children.pop() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.requests.take();
    }
}
