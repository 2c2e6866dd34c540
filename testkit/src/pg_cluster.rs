//! A private PostgreSQL cluster for tests and benchmarks.
//!
//! [`Cluster::start`] runs `initdb` into a fresh temporary directory (owned
//! by an unprivileged user when the caller is root, since PostgreSQL refuses
//! to run as root), starts the server on `127.0.0.1` at a free port with its
//! own Unix-socket directory, `fsync = on`, `synchronous_commit = on` and
//! password (SCRAM) authentication for one role, and waits until it accepts
//! connections. [`Cluster::kill`] SIGKILLs the postmaster (the crash tests),
//! [`Cluster::restart`] starts it again over the same data directory, and
//! dropping the value stops the server (`immediate`) and removes the
//! directory. A watchdog process stops the server too if the owning process
//! dies without dropping it (a test binary's statics are never dropped).
//!
//! The binaries come from `CUSTOS_PG_BIN` when set, else the highest
//! `/usr/lib/postgresql/<major>/bin`, else `pg_config --bindir`. A machine
//! without them gets [`ClusterError::NoServer`], whose message says what to
//! install — a test fails loudly; nothing is skipped.

use std::fmt;
use std::fs;
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The role every test connection uses.
pub const ROLE: &str = "custos";
/// The database every test connection uses.
pub const DATABASE: &str = "custos";

/// Why a cluster could not be started or driven.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No PostgreSQL server binaries on this machine.
    #[error(
        "NoServer: no PostgreSQL server binaries found (looked in {looked}); install the \
         `postgresql` package (Debian: apt-get install -y postgresql) or set CUSTOS_PG_BIN \
         to the directory holding initdb and postgres"
    )]
    NoServer {
        /// Where it looked.
        looked: String,
    },
    /// A step (initdb, start, stop, createdb) failed.
    #[error("ClusterStep: {step} failed: {detail}")]
    Step {
        /// The step.
        step: &'static str,
        /// Its output or error.
        detail: String,
    },
    /// Local I/O failed.
    #[error("ClusterIo: {what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> ClusterError {
    move |source| ClusterError::Io { what, source }
}

/// A running (or killed) private cluster. Dropping it stops the server and
/// removes its directory.
pub struct Cluster {
    bin: PathBuf,
    root: PathBuf,
    port: u16,
    password: String,
    run_as: Option<String>,
    watchdog: Option<std::process::Child>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("root", &self.root)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// The server binaries' directory.
pub fn server_bin() -> Result<PathBuf, ClusterError> {
    let mut looked = Vec::new();
    if let Some(dir) = std::env::var_os("CUSTOS_PG_BIN") {
        let dir = PathBuf::from(dir);
        if dir.join("initdb").is_file() && dir.join("postgres").is_file() {
            return Ok(dir);
        }
        looked.push(format!("CUSTOS_PG_BIN={}", dir.display()));
    }
    let base = Path::new("/usr/lib/postgresql");
    let mut majors: Vec<(u32, PathBuf)> = fs::read_dir(base)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file()).then_some((major, bin))
        })
        .collect();
    majors.sort();
    if let Some((_, bin)) = majors.pop() {
        return Ok(bin);
    }
    looked.push(format!("{}/<major>/bin", base.display()));
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").is_file() && dir.join("postgres").is_file() {
            return Ok(dir);
        }
    }
    looked.push("pg_config --bindir".to_owned());
    Err(ClusterError::NoServer {
        looked: looked.join(", "),
    })
}

/// Whether this process runs as root (PostgreSQL refuses to).
fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|rest| rest.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

fn free_port() -> Result<u16, ClusterError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(io_err("find a free port"))?;
    Ok(l.local_addr().map_err(io_err("find a free port"))?.port())
}

fn random_word() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::new();
    for i in 0..2u8 {
        let mut h = RandomState::new().build_hasher();
        h.write_u8(i);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

impl Cluster {
    /// Initialises and starts a new private cluster.
    pub fn start() -> Result<Cluster, ClusterError> {
        Self::start_inner(None)
    }

    /// Initialises and starts a new private cluster that offers TLS with
    /// the given certificate chain and private key (PEM; a test makes them
    /// at run time). Plain connections are still accepted, so a client's
    /// `sslmode` decides.
    pub fn start_with_tls(cert_pem: &str, key_pem: &str) -> Result<Cluster, ClusterError> {
        Self::start_inner(Some((cert_pem, key_pem)))
    }

    fn start_inner(tls: Option<(&str, &str)>) -> Result<Cluster, ClusterError> {
        let bin = server_bin()?;
        let root = std::env::temp_dir().join(format!("custos-pg-{}", random_word()));
        fs::create_dir_all(root.join("sock")).map_err(io_err("create the cluster directory"))?;
        let password = random_word();
        fs::write(root.join("pwfile"), format!("{password}\n"))
            .map_err(io_err("write the password file"))?;
        let run_as = if is_root() {
            let user = std::env::var("CUSTOS_PG_USER").unwrap_or_else(|_| "postgres".to_owned());
            let st = Command::new("chown")
                .args(["-R", &format!("{user}:"), &root.display().to_string()])
                .status()
                .map_err(io_err("chown the cluster directory"))?;
            if !st.success() {
                return Err(ClusterError::Step {
                    step: "chown",
                    detail: format!(
                        "cannot give {} to user {user:?} (as root the server runs as an \
                         unprivileged user: set CUSTOS_PG_USER)",
                        root.display()
                    ),
                });
            }
            Some(user)
        } else {
            None
        };
        let port = free_port()?;
        let mut cluster = Cluster {
            bin,
            root,
            port,
            password,
            run_as,
            watchdog: None,
        };
        cluster.initdb()?;
        if let Some((cert, key)) = tls {
            cluster.enable_tls(cert, key)?;
        }
        cluster.watch()?;
        cluster.launch()?;
        cluster.create_database()?;
        Ok(cluster)
    }

    fn command(&self, program: &str) -> Command {
        let exe = self.bin.join(program);
        match &self.run_as {
            Some(user) => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={user}"),
                    &format!("--regid={user}"),
                    "--init-groups",
                    "--",
                ])
                .arg(exe);
                c
            }
            None => Command::new(exe),
        }
    }

    fn run(&self, step: &'static str, c: &mut Command) -> Result<(), ClusterError> {
        let out = c
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .output()
            .map_err(io_err(step))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(ClusterError::Step {
                step,
                detail: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            })
        }
    }

    fn initdb(&self) -> Result<(), ClusterError> {
        let mut c = self.command("initdb");
        c.arg("-D")
            .arg(self.data())
            .args([
                "-U",
                ROLE,
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--no-locale",
            ])
            .arg(format!("--pwfile={}", self.root.join("pwfile").display()));
        self.run("initdb", &mut c)?;
        let conf = format!(
            "\nlisten_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\n\
             fsync = on\nsynchronous_commit = on\nfull_page_writes = on\nmax_connections = 200\n\
             shared_buffers = 64MB\nlog_min_messages = warning\n",
            self.port,
            self.root.join("sock").display()
        );
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(self.data().join("postgresql.conf"))
            .map_err(io_err("open postgresql.conf"))?;
        io::Write::write_all(&mut f, conf.as_bytes()).map_err(io_err("write postgresql.conf"))
    }

    /// Writes the server's certificate and key into the data directory
    /// (the key readable by the server's user only) and turns `ssl` on.
    fn enable_tls(&self, cert_pem: &str, key_pem: &str) -> Result<(), ClusterError> {
        use std::os::unix::fs::PermissionsExt;
        let data = self.data();
        fs::write(data.join("server.crt"), cert_pem).map_err(io_err("write server.crt"))?;
        fs::write(data.join("server.key"), key_pem).map_err(io_err("write server.key"))?;
        fs::set_permissions(data.join("server.key"), fs::Permissions::from_mode(0o600))
            .map_err(io_err("chmod server.key"))?;
        if let Some(user) = &self.run_as {
            let st = Command::new("chown")
                .arg(format!("{user}:"))
                .arg(data.join("server.crt"))
                .arg(data.join("server.key"))
                .status()
                .map_err(io_err("chown the certificate"))?;
            if !st.success() {
                return Err(ClusterError::Step {
                    step: "chown",
                    detail: format!("cannot give the certificate to user {user:?}"),
                });
            }
        }
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .map_err(io_err("open postgresql.conf"))?;
        io::Write::write_all(
            &mut f,
            b"ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n",
        )
        .map_err(io_err("write postgresql.conf"))
    }

    /// A process that stops the server once this process is gone.
    fn watch(&mut self) -> Result<(), ClusterError> {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {ctl} -D '{data}' stop -m immediate >/dev/null 2>&1; rm -rf '{root}'",
            pid = std::process::id(),
            ctl = self.command_line("pg_ctl"),
            data = self.data().display(),
            root = self.root.display()
        );
        let child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io_err("start the watchdog"))?;
        self.watchdog = Some(child);
        Ok(())
    }

    fn command_line(&self, program: &str) -> String {
        let exe = self.bin.join(program).display().to_string();
        match &self.run_as {
            Some(u) => format!("setpriv --reuid={u} --regid={u} --init-groups -- {exe}"),
            None => exe,
        }
    }

    fn launch(&self) -> Result<(), ClusterError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut c = self.command("pg_ctl");
            c.arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(self.root.join("server.log"))
                .args(["-w", "-t", "30", "start"])
                .stdout(Stdio::null());
            match self.run("start", &mut c) {
                Ok(()) => return Ok(()),
                // After a SIGKILL the old backends may still hold the
                // shared-memory interlock for a moment (the last failure,
                // with the server's log, is what a timeout reports).
                Err(_) if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(200));
                }
                Err(ClusterError::Step { step, detail }) => {
                    let log = fs::read_to_string(self.root.join("server.log")).unwrap_or_default();
                    return Err(ClusterError::Step {
                        step,
                        detail: format!("{detail}\nserver log:\n{log}"),
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn create_database(&self) -> Result<(), ClusterError> {
        let mut c = self.command("createdb");
        c.args([
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-U",
            ROLE,
            DATABASE,
        ])
        .env("PGPASSWORD", &self.password);
        self.run("createdb", &mut c)
    }

    fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    /// The loopback TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster's directory (data, socket, log).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The role's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// A connection URL over TCP loopback, password included.
    pub fn url(&self) -> String {
        format!(
            "postgresql://{ROLE}:{}@127.0.0.1:{}/{DATABASE}",
            self.password, self.port
        )
    }

    /// The postmaster's pid (from `postmaster.pid`).
    pub fn postmaster_pid(&self) -> Result<u32, ClusterError> {
        let text = fs::read_to_string(self.data().join("postmaster.pid"))
            .map_err(io_err("read postmaster.pid"))?;
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| ClusterError::Step {
                step: "read postmaster.pid",
                detail: "no pid on its first line".to_owned(),
            })
    }

    /// SIGKILLs the postmaster (its backends exit when they see it gone).
    pub fn kill(&self) -> Result<(), ClusterError> {
        let pid = self.postmaster_pid()?;
        let st = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .map_err(io_err("kill the postmaster"))?;
        if st.success() {
            Ok(())
        } else {
            Err(ClusterError::Step {
                step: "kill",
                detail: format!("kill -KILL {pid} failed"),
            })
        }
    }

    /// Starts the server again over the same data directory (crash
    /// recovery replays the WAL).
    pub fn restart(&self) -> Result<(), ClusterError> {
        self.launch()
    }

    /// Stops the server (`fast`).
    pub fn stop(&self) -> Result<(), ClusterError> {
        let mut c = self.command("pg_ctl");
        c.arg("-D")
            .arg(self.data())
            .args(["-w", "-m", "fast", "stop"]);
        self.run("stop", &mut c)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.root.join("server.log")).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut c = self.command("pg_ctl");
        c.arg("-D")
            .arg(self.data())
            .args(["-w", "-m", "immediate", "stop"]);
        let _ = self.run("stop", &mut c);
        let _ = fs::remove_dir_all(&self.root);
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

static SHARED: std::sync::OnceLock<Result<Cluster, String>> = std::sync::OnceLock::new();

/// One cluster per process, started on first use (tests of one binary share
/// it; each test uses its own schema, [`unique_schema`]). The watchdog stops
/// it when the process exits.
pub fn shared() -> Result<&'static Cluster, String> {
    SHARED
        .get_or_init(|| Cluster::start().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

/// A schema name no other call in this cluster's life returns:
/// `<prefix>_<pid>_<n>`.
pub fn unique_schema(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
