//! Broken backends the conformance suites must reject.
//!
//! Each test file under `tests/` is one port: a set of wrappers over the
//! memory implementation (or small shells over core's pure state), each
//! carrying one bug a backend author might really write. A table test runs
//! every conformance case of the port against every broken backend, asserts
//! each fails at least one case (and that the honest backend fails none),
//! and prints which cases caught which backend.
//!
//! This library holds the shared driver: [`run_case`] runs one case and
//! reports whether it failed (a panic is a failure), and [`Verdicts`]
//! collects the table and asserts on it.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `case` once; `true` when it failed (panicked). The panic message is
/// kept out of the test output: the table shows which case caught what.
pub fn run_case(case: impl FnOnce()) -> bool {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let failed = catch_unwind(AssertUnwindSafe(case)).is_err();
    std::panic::set_hook(hook);
    failed
}

/// The caught-by table of one port.
#[derive(Debug, Default)]
pub struct Verdicts {
    port: &'static str,
    rows: Vec<(String, Vec<String>)>,
}

impl Verdicts {
    /// An empty table for `port`.
    #[must_use]
    pub fn new(port: &'static str) -> Self {
        Verdicts {
            port,
            rows: Vec::new(),
        }
    }

    /// Records that `backend` was caught by `cases` (empty: it survived).
    pub fn record(&mut self, backend: impl Into<String>, cases: Vec<String>) {
        self.rows.push((backend.into(), cases));
    }

    /// Prints the table and panics, at the caller's line, naming every
    /// backend no case caught, or when fewer than `at_least` backends were
    /// tried.
    #[track_caller]
    pub fn assert_all_caught(&self, at_least: usize) {
        println!("{}: {} broken backends", self.port, self.rows.len());
        for (backend, cases) in &self.rows {
            if cases.is_empty() {
                println!("  {backend}: SURVIVED");
            } else {
                println!("  {backend}: caught by {}", cases.join(", "));
            }
        }
        let survivors: Vec<&str> = self
            .rows
            .iter()
            .filter(|(_, c)| c.is_empty())
            .map(|(b, _)| b.as_str())
            .collect();
        assert!(
            survivors.is_empty(),
            "{}: broken backends no case caught: {survivors:?}",
            self.port
        );
        assert!(
            self.rows.len() >= at_least,
            "{}: {} broken backends, want at least {at_least}",
            self.port,
            self.rows.len()
        );
    }
}

/// One named conformance case of a run-time table, for a backend type `B`.
pub type NamedCase<B> = (&'static str, fn(&dyn Fn() -> B));

/// The names of the cases in `cases` that fail (panic) against backends
/// built by `factory`, in table order.
pub fn failing_cases<B>(cases: &[NamedCase<B>], factory: &dyn Fn() -> B) -> Vec<String> {
    cases
        .iter()
        .filter(|(_, case)| run_case(|| case(factory)))
        .map(|(name, _)| (*name).to_owned())
        .collect()
}

/// How a broken backend keeps what it acknowledged across a reopen: the
/// durability bugs every port's reopen cases must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Every acknowledged write is there after a reopen (the honest shell).
    Honest,
    /// Keeps everything in memory behind a durable name: a reopen starts
    /// empty.
    MemoryOnly,
    /// Loses the last acknowledged write on a reopen (an unsynced tail, a
    /// batch flushed one write late).
    LosesLastWrite,
    /// Opens without running the port's restart recovery.
    SkipsRecovery,
}

/// Every durability bug (not the honest mode).
pub const DURABILITY_BUGS: &[Durability] = &[
    Durability::MemoryOnly,
    Durability::LosesLastWrite,
    Durability::SkipsRecovery,
];

/// A broken backend's "disk": the log of the mutations it acknowledged.
/// Each open replays the log into a fresh memory backend, as the mode
/// allows.
#[derive(Debug)]
pub struct Disk<R> {
    mode: Durability,
    log: std::sync::Mutex<Vec<R>>,
}

impl<R: Clone> Disk<R> {
    /// An empty disk kept as `mode` keeps it.
    #[must_use]
    pub fn new(mode: Durability) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Disk {
            mode,
            log: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The mode.
    #[must_use]
    pub fn mode(&self) -> Durability {
        self.mode
    }

    /// The mutations an open replays: all of them; none for
    /// [`Durability::MemoryOnly`]; for [`Durability::LosesLastWrite`] all
    /// but the last, which is gone for good.
    /// A poisoned lock is taken over: the log is a plain vector that no
    /// panic can leave half-written.
    #[must_use]
    pub fn replay(&self) -> Vec<R> {
        let mut log = self
            .log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match self.mode {
            Durability::MemoryOnly => Vec::new(),
            Durability::LosesLastWrite => {
                log.pop();
                log.clone()
            }
            Durability::Honest | Durability::SkipsRecovery => log.clone(),
        }
    }

    /// Records an acknowledged mutation.
    pub fn record(&self, r: R) {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(r);
    }
}
