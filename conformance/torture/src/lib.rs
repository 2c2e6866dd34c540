//! The SIGKILL torture harness shared by every store's kill test.
//!
//! A kill test re-executes its own test binary as a child (one named
//! `#[test]` that is a no-op unless its environment names a store), lets
//! the child print what it acknowledged, SIGKILLs it at a moment drawn from
//! a seed, reopens the store and checks every acknowledged operation. This
//! crate holds the parts that are the same for every store:
//!
//! - [`iterations`]: the kill count, `CUSTOS_TORTURE_ITERATIONS` or the
//!   test's default (`make torture` sets 1,000);
//! - [`seed`]: `CUSTOS_SIGKILL_SEED` to replay a run, else one from the
//!   clock, printed either way; [`Replay`] prints it again when an
//!   assertion fails inside an iteration;
//! - [`xorshift`] and [`splitmix`]: the small generators the delays and the
//!   children's choices are drawn from (no dependency: a replay needs the
//!   same numbers on every machine, whatever crate versions are locked);
//! - [`child`], [`Running`] and [`Killed`]: the child process, its
//!   stdout read line by line, the kill, and only the *complete* lines (a
//!   line cut off by the kill was never acknowledged);
//! - [`Out`]: the child's side, a line written and flushed at once;
//! - [`complete_lines`] for a child that records to a file instead;
//! - [`KillChild`]: one iteration's child, its seed and its kill delay
//!   drawn from the run's seed, and [`Kills`], the counts every kill test
//!   prints.
//!
//! Test-only (`publish = false`): it panics on a failure of the harness
//! itself (a child that cannot be spawned), as a test should.

#![allow(clippy::panic, clippy::expect_used)]

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The environment variable that sets the kill count.
pub const ITERATIONS_ENV: &str = "CUSTOS_TORTURE_ITERATIONS";
/// The environment variable that replays a run's seed.
pub const SEED_ENV: &str = "CUSTOS_SIGKILL_SEED";

/// The kill count: `CUSTOS_TORTURE_ITERATIONS` when it parses, else
/// `default` (the count `cargo test` runs).
#[must_use]
pub fn iterations(default: u64) -> u64 {
    std::env::var(ITERATIONS_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The run's seed: `CUSTOS_SIGKILL_SEED` when it parses, else `fallback`
/// when given (a test with a fixed default seed), else one drawn from the
/// clock (odd, so never zero). Printed as `torture <store>: seed S
/// (replay with CUSTOS_SIGKILL_SEED=S)`.
#[must_use]
pub fn seed(store: &str, fallback: Option<u64>) -> u64 {
    let seed = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .or(fallback)
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64 | 1)
        });
    eprintln!("torture {store}: seed {seed} (replay with {SEED_ENV}={seed})");
    seed
}

/// xorshift64*: advances `state` and answers the next number. `state`
/// must not be zero.
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// splitmix64 finaliser, made odd: a well-spread, never-zero seed derived
/// from `x` (a child's seed from the run's seed and its iteration).
#[must_use]
pub fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) | 1
}

/// Prints the store, the seed and the iteration when an assertion fails
/// while it is alive (hold one per iteration).
#[derive(Debug)]
pub struct Replay {
    /// The store's name as the test prints it (`session`, `ledger`, …).
    pub store: &'static str,
    /// The run's seed.
    pub seed: u64,
    /// The iteration in progress.
    pub iteration: u64,
}

impl Drop for Replay {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "torture {}: FAILED at iteration {}; replay with {SEED_ENV}={}",
                self.store, self.iteration, self.seed
            );
        }
    }
}

/// The child's side of the protocol: each line is written and flushed at
/// once, so a kill can cut off at most the line being written.
#[derive(Debug)]
pub struct Out(std::io::StdoutLock<'static>);

impl Out {
    /// Locks the process's stdout.
    #[must_use]
    pub fn stdout() -> Self {
        Self(std::io::stdout().lock())
    }

    /// Prints `s` and a newline and flushes.
    pub fn line(&mut self, s: &str) {
        use std::io::Write as _;
        writeln!(self.0, "{s}").expect("write to the parent");
        self.0.flush().expect("flush to the parent");
    }
}

/// A command that re-executes the running test binary as a child running
/// only the test named `test` (with `--nocapture`, one thread, stderr
/// discarded). The caller adds the environment that turns it into a child.
#[must_use]
pub fn child(test: &str) -> Command {
    let exe = std::env::current_exe().expect("the test binary's own path");
    let mut c = Command::new(exe);
    c.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .stderr(Stdio::null());
    c
}

/// A child being watched: its complete stdout lines arrive on a channel as
/// it prints them.
#[derive(Debug)]
pub struct Running {
    child: Child,
    lines: Receiver<String>,
    reader: Option<JoinHandle<()>>,
    seen: Vec<String>,
}

/// What a killed child left: its complete output lines, and whether it had
/// already exited by itself before the kill (`Some`: the kill did not land).
#[derive(Debug)]
pub struct Killed {
    /// Every complete (newline-terminated) line the child printed, in order,
    /// without the newline.
    pub lines: Vec<String>,
    /// The child's status when it had exited before the kill.
    pub exited_early: Option<ExitStatus>,
}

impl Running {
    /// Spawns `cmd` with its stdout piped and read line by line.
    #[must_use]
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn the child");
        let stdout = child.stdout.take().expect("the child's piped stdout");
        let (tx, lines) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    // A last line without its newline was cut off by the
                    // kill: never acknowledged, never passed on.
                    Ok(0) | Err(_) => break,
                    Ok(_) if !line.ends_with('\n') => break,
                    Ok(_) => {
                        line.pop();
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Self {
            child,
            lines,
            reader: Some(reader),
            seen: Vec::new(),
        }
    }

    /// Reads lines until `done` (called on each line as it arrives) answers
    /// true, the child closes its stdout, or no line comes for `patience`.
    /// Answers whether `done` was reached. The lines stay in the output.
    pub fn wait_until(&mut self, patience: Duration, mut done: impl FnMut(&str) -> bool) -> bool {
        loop {
            match self.lines.recv_timeout(patience) {
                Ok(line) => {
                    let hit = done(&line);
                    self.seen.push(line);
                    if hit {
                        return true;
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return false,
            }
        }
    }

    /// Sleeps `delay`, then SIGKILLs the child (unless it already exited),
    /// reaps it, and answers everything it printed.
    #[must_use]
    pub fn kill_after(mut self, delay: Duration) -> Killed {
        let until = Instant::now() + delay;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left);
        }
        let exited_early = self.child.try_wait().expect("poll the child");
        if exited_early.is_none() {
            // SIGKILL on Unix; a child that exited in between is reaped below.
            let _ = self.child.kill();
        }
        self.child.wait().expect("reap the child");
        if let Some(r) = self.reader.take() {
            r.join().expect("the reader thread");
        }
        let mut lines = std::mem::take(&mut self.seen);
        lines.extend(self.lines.try_iter());
        Killed {
            lines,
            exited_early,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A test that panics mid-iteration leaves no child behind.
        if self.reader.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A kill test's child: the test it re-executes, and the environment
/// variables that hand it its store (their presence makes the test a
/// child), its tag and its seed.
#[derive(Clone, Copy, Debug)]
pub struct KillChild {
    /// The child's test name.
    pub test: &'static str,
    /// The variable naming the store's path.
    pub store_env: &'static str,
    /// The variable carrying the child's tag (the iteration).
    pub tag_env: &'static str,
    /// The variable carrying the child's seed.
    pub seed_env: &'static str,
}

impl KillChild {
    /// Iteration `iteration` of a run seeded `seed`: runs the child on the
    /// store at `store`, tagged with the iteration, with a seed and a kill
    /// delay (20 to 149 ms) both drawn from the run's seed and the
    /// iteration, SIGKILLs it, and answers its complete lines. Panics when
    /// the child exited by itself before the kill.
    #[must_use]
    pub fn run(&self, store: &Path, seed: u64, iteration: u64) -> Vec<String> {
        let s = splitmix(seed ^ iteration);
        let delay = Duration::from_millis(20 + s % 130);
        let mut cmd = child(self.test);
        cmd.env(self.store_env, store)
            .env(self.tag_env, iteration.to_string())
            .env(self.seed_env, splitmix(s).to_string());
        let killed = Running::spawn(cmd).kill_after(delay);
        assert!(
            killed.exited_early.is_none(),
            "iteration {iteration}: the child exited by itself ({:?}):\n{}",
            killed.exited_early,
            killed.lines.join("\n")
        );
        killed.lines
    }
}

/// What every kill test counts over its run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Kills {
    /// Acknowledged operations checked.
    pub acks: u64,
    /// Acknowledged operations found lost (a failure).
    pub lost: u64,
    /// Kills that landed after the child acknowledged at least one
    /// operation.
    pub killed_with_acks: u64,
    /// Requests cut off by a kill and found committed.
    pub cut_committed: u64,
    /// Requests cut off by a kill and found not committed.
    pub cut_not: u64,
}

impl Kills {
    /// Counts one killed child's `acks` acknowledged operations.
    pub fn acked(&mut self, acks: u64) {
        self.acks += acks;
        if acks > 0 {
            self.killed_with_acks += 1;
        }
    }

    /// Asserts what every kill test promises of its run: nothing
    /// acknowledged was lost, and at least half the kills landed after an
    /// acknowledgment (a child that rarely acknowledges tests little).
    #[track_caller]
    pub fn assert_held(&self, seed: u64, iterations: u64) {
        assert_eq!(self.lost, 0, "acknowledged operations lost (seed {seed})");
        assert!(
            self.killed_with_acks >= iterations / 2,
            "the child rarely got to acknowledge anything"
        );
    }

    /// The counts as a kill test prints them: `N acknowledged operations
    /// checked, L lost; K kills landed after at least one ack; C requests
    /// cut off (X found committed, Y not)`.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "{} acknowledged operations checked, {} lost; {} kills landed after at least one \
             ack; {} requests cut off ({} found committed, {} not)",
            self.acks,
            self.lost,
            self.killed_with_acks,
            self.cut_committed + self.cut_not,
            self.cut_committed,
            self.cut_not
        )
    }
}

/// The complete (newline-terminated) lines of `text`, without their
/// newlines: a torn last line, cut off by the kill, is left out.
#[must_use]
pub fn complete_lines(text: &str) -> Vec<String> {
    text.split_inclusive('\n')
        .filter_map(|l| l.strip_suffix('\n'))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_torn_last_line_is_not_complete() {
        assert_eq!(complete_lines("ACK 1\nACK 2\nACK 3"), ["ACK 1", "ACK 2"]);
        assert_eq!(complete_lines("ACK 1\n"), ["ACK 1"]);
        assert!(complete_lines("").is_empty());
    }

    #[test]
    fn generators_replay_and_never_stick_at_zero() {
        let (mut a, mut b) = (splitmix(7), splitmix(7));
        let xs: Vec<u64> = (0..4).map(|_| xorshift(&mut a)).collect();
        let ys: Vec<u64> = (0..4).map(|_| xorshift(&mut b)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|&x| x != 0));
        assert_ne!(xs[0], xs[1]);
        assert_eq!(splitmix(0) & 1, 1);
    }

    #[test]
    fn a_killed_child_yields_only_its_complete_lines() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "printf 'OPEN\\nACK 1\\nACK 2\\nAC'; exec sleep 30"]);
        let mut run = Running::spawn(cmd);
        let mut acks = 0;
        assert!(run.wait_until(Duration::from_secs(10), |l| {
            acks += usize::from(l.starts_with("ACK "));
            acks == 2
        }));
        let killed = run.kill_after(Duration::from_millis(20));
        assert!(killed.exited_early.is_none());
        assert_eq!(killed.lines, ["OPEN", "ACK 1", "ACK 2"]);
    }

    #[test]
    fn a_child_that_exits_first_is_reported() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo done"]);
        let killed = Running::spawn(cmd).kill_after(Duration::from_millis(300));
        assert!(killed.exited_early.is_some_and(|s| s.success()));
        assert_eq!(killed.lines, ["done"]);
    }
}
