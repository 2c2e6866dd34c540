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
//! collects the table and asserts on it ([`Verdicts::of`] builds it from a
//! list of broken backends); [`assert_reopen_caught`] is a port's reopen
//! table test, and
//! [`reopen_failing_cases`] runs the reopen cases over a [`Disk`] kept as
//! a [`Durability`] keeps it. The `forward_*` macros write the reads a
//! broken backend leaves honest (forwarded to the memory backend it wraps).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use custos_conformance::Place;

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

    /// The table of `port` over the broken backends `broken`, each
    /// recorded with the cases `failures` says it fails.
    #[must_use]
    pub fn of<D: std::fmt::Debug>(
        port: &'static str,
        broken: impl IntoIterator<Item = D>,
        failures: impl Fn(D) -> Vec<String>,
    ) -> Self {
        let mut verdicts = Verdicts::new(port);
        for d in broken {
            let name = format!("{d:?}");
            verdicts.record(name, failures(d));
        }
        verdicts
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

/// The place a reopen case opens: a [`Disk`] every open of which replays
/// it into a new store (through the shell's `open`).
#[derive(Debug)]
pub struct DiskPlace<R, S> {
    disk: Arc<Disk<R>>,
    open: fn(&Arc<Disk<R>>) -> S,
}

impl<R: Clone, S> DiskPlace<R, S> {
    /// A place over a new, empty disk kept as `mode` keeps it.
    #[must_use]
    pub fn new(mode: Durability, open: fn(&Arc<Disk<R>>) -> S) -> Self {
        DiskPlace {
            disk: Disk::new(mode),
            open,
        }
    }
}

impl<R, S> Place for DiskPlace<R, S> {
    type Store = S;
    fn open(&self) -> S {
        (self.open)(&self.disk)
    }
}

/// The names of the reopen cases in `cases` that fail when each case's
/// place is a new disk kept as `mode` keeps it, opened by `open`.
pub fn reopen_failing_cases<R: Clone, S>(
    cases: &[NamedCase<DiskPlace<R, S>>],
    mode: Durability,
    open: fn(&Arc<Disk<R>>) -> S,
) -> Vec<String> {
    failing_cases(cases, &move || DiskPlace::new(mode, open))
}

/// A port's reopen table test: asserts the durable shell fails no reopen
/// case in any mode of `honest` (the honest mode, and a bug the port
/// cannot show, such as skipping a recovery it does not have), records
/// the cases each mode of `broken` fails (`failures`), and asserts every
/// one was caught. `broken` must include every mode of [`LOSSES`].
#[track_caller]
pub fn assert_reopen_caught(
    port: &'static str,
    honest: &[Durability],
    broken: &[Durability],
    failures: impl Fn(Durability) -> Vec<String>,
) {
    // Every port must catch at least the bugs that lose acknowledged
    // writes: a shorter `broken` list is itself a failure.
    for loss in LOSSES {
        assert!(
            broken.contains(loss),
            "{port}: the durability bugs checked must include {loss:?}"
        );
    }
    for &mode in honest {
        let failed = failures(mode);
        assert!(
            failed.is_empty(),
            "the durable shell ({mode:?}) fails {failed:?}"
        );
    }
    Verdicts::of(port, broken.iter().copied(), failures).assert_all_caught(broken.len());
}

/// The honest modes of a port without open-time recovery: skipping it
/// changes nothing.
pub const HONEST_WITHOUT_RECOVERY: &[Durability] = &[Durability::Honest, Durability::SkipsRecovery];

/// The durability bugs of a port without open-time recovery: those that
/// lose acknowledged writes.
pub const LOSSES: &[Durability] = &[Durability::MemoryOnly, Durability::LosesLastWrite];

/// The port types the `forward_*` macros name.
#[doc(hidden)]
pub mod __port {
    pub use custos_core::catalogue::custody::Custody;
    pub use custos_core::catalogue::{
        CatalogueError, Delegate, Deletion, Move, Page, Recent, Registration, Visibility,
    };
    pub use custos_core::migration::control::{AdminError, ControlSnapshot};
    pub use custos_core::migration::departure::Departures;
    pub use custos_core::migration::Destination;
    pub use custos_core::storage::{
        BranchScan, Entry, EntryHead, EntryScan, KeyPrefix, Namespace, RecordId, Register,
        RegisterKey, Stats, StorageError, UsageRow, UsageScan,
    };
    pub use custos_core::world::{SignatureRecord, WorldError, WorldInfo, WorldRecord};
}

/// Inside an `impl Catalogue for …`: every read of the port (all but
/// `apply`), forwarded to the field `$inner`.
#[macro_export]
macro_rules! forward_catalogue_reads {
    ($inner:ident) => {
        $crate::catalogue_reads!(
            (field $inner)
            get, by_request_key, page, workspace_default, recent_folders, custody, moving,
            deletion, deleting, delegate_for, delegate_of, delegates_held, revision
        );
    };
}

/// Inside an `impl Catalogue for …` of a shell over core's pure catalogue
/// state with a `read(&self, f: impl FnOnce(&CatalogueState) -> T) -> T`:
/// the named reads, each answered by the state's own.
#[macro_export]
macro_rules! catalogue_state_reads {
    ($($read:ident),+ $(,)?) => {
        $crate::catalogue_reads!((state) $($read),+);
    };
}

/// The reads behind [`forward_catalogue_reads!`] and
/// [`catalogue_state_reads!`]: `(field f)` forwards to the field `f`,
/// `(state)` reads the shell's state.
#[doc(hidden)]
#[macro_export]
macro_rules! catalogue_reads {
    ($via:tt $($read:ident),+ $(,)?) => {
        $($crate::catalogue_reads!(@ $via $read);)+
    };
    (@ $via:tt get) => {
        fn get(
            &self,
            id: &str,
        ) -> Result<Option<$crate::__port::Registration>, $crate::__port::CatalogueError> {
            $crate::catalogue_reads!(@call $via self get(id))
        }
    };
    (@ $via:tt by_request_key) => {
        fn by_request_key(
            &self,
            key: &str,
        ) -> Result<Option<$crate::__port::Registration>, $crate::__port::CatalogueError> {
            $crate::catalogue_reads!(@call $via self by_request_key(key))
        }
    };
    (@ $via:tt page) => {
        fn page(
            &self,
            v: $crate::__port::Visibility,
            after: Option<&str>,
            limit: usize,
        ) -> Result<$crate::__port::Page, $crate::__port::CatalogueError> {
            $crate::catalogue_reads!(@call $via self page(v, after, limit))
        }
    };
    (@ $via:tt workspace_default) => {
        fn workspace_default(
            &self,
            w: &str,
        ) -> Result<Option<String>, $crate::__port::CatalogueError> {
            $crate::catalogue_reads!(@try $via self workspace_default(w))
        }
    };
    (@ $via:tt recent_folders) => {
        fn recent_folders(
            &self,
        ) -> Result<Vec<$crate::__port::Recent>, $crate::__port::CatalogueError> {
            $crate::catalogue_reads!(@call $via self recent_folders())
        }
    };
    (@ $via:tt custody) => {
        fn custody(
            &self,
            id: &str,
        ) -> Result<$crate::__port::Custody, $crate::__port::CatalogueError> {
            $crate::catalogue_reads!(@try $via self custody(id))
        }
    };
    (@ $via:tt moving) => {
        fn moving(&self) -> Result<Vec<$crate::__port::Move>, $crate::__port::CatalogueError> {
            $crate::catalogue_reads!(@call $via self moving())
        }
    };
    (@ $via:tt deletion) => {
        fn deletion(
            &self,
            id: &str,
        ) -> Result<$crate::__port::Deletion, $crate::__port::CatalogueError> {
            $crate::catalogue_reads!(@try $via self deletion(id))
        }
    };
    (@ $via:tt deleting) => {
        fn deleting(&self) -> Result<Vec<String>, $crate::__port::CatalogueError> {
            $crate::catalogue_reads!(@call $via self deleting())
        }
    };
    (@ $via:tt delegate_for) => {
        fn delegate_for(
            &self,
            spawner: &str,
            parent: &str,
        ) -> Result<Option<$crate::__port::Delegate>, $crate::__port::CatalogueError> {
            $crate::catalogue_reads!(@try $via self delegate_for(spawner, parent))
        }
    };
    (@ $via:tt delegate_of) => {
        fn delegate_of(
            &self,
            id: &str,
        ) -> Result<Option<$crate::__port::Delegate>, $crate::__port::CatalogueError> {
            $crate::catalogue_reads!(@call $via self delegate_of(id))
        }
    };
    (@ $via:tt delegates_held) => {
        fn delegates_held(&self, spawner: &str) -> Result<u32, $crate::__port::CatalogueError> {
            $crate::catalogue_reads!(@call $via self delegates_held(spawner))
        }
    };
    (@ $via:tt revision) => {
        fn revision(&self) -> Result<u64, $crate::__port::CatalogueError> {
            $crate::catalogue_reads!(@call $via self revision())
        }
    };
    // A forwarded read answers the inner port's result as it is.
    (@call (field $inner:ident) $this:ident $read:ident($($arg:expr),*)) => {
        $this.$inner.$read($($arg),*)
    };
    (@try (field $inner:ident) $this:ident $read:ident($($arg:expr),*)) => {
        $this.$inner.$read($($arg),*)
    };
    // The state's infallible reads are wrapped in `Ok`; its checked ones
    // answer their own result.
    (@call (state) $this:ident revision()) => {
        Ok($this.read(|s| s.revision))
    };
    (@call (state) $this:ident $read:ident($($arg:expr),*)) => {
        Ok($this.read(|s| s.$read($($arg),*)))
    };
    (@try (state) $this:ident $read:ident($($arg:expr),*)) => {
        $this.read(|s| s.$read($($arg),*))
    };
}

/// Inside an `impl Storage for …`: every read of the session-storage port
/// (all but `commit` and `close`), forwarded to the field `$inner`.
#[macro_export]
macro_rules! forward_storage_reads {
    ($inner:ident) => {
        fn get_entries(
            &self,
            ids: &[$crate::__port::RecordId],
        ) -> Result<Vec<Option<$crate::__port::Entry>>, $crate::__port::StorageError> {
            self.$inner.get_entries(ids)
        }
        fn get_register(
            &self,
            n: &$crate::__port::Namespace,
            k: &$crate::__port::RegisterKey,
        ) -> Result<Option<$crate::__port::Register>, $crate::__port::StorageError> {
            self.$inner.get_register(n, k)
        }
        fn list_registers(
            &self,
            n: &$crate::__port::Namespace,
            p: &$crate::__port::KeyPrefix,
        ) -> Result<Vec<$crate::__port::Register>, $crate::__port::StorageError> {
            self.$inner.list_registers(n, p)
        }
        fn scan_branch(
            &self,
            q: &$crate::__port::BranchScan,
        ) -> Result<Vec<$crate::__port::Entry>, $crate::__port::StorageError> {
            self.$inner.scan_branch(q)
        }
        fn scan_entries(
            &self,
            q: &$crate::__port::EntryScan,
        ) -> Result<Vec<$crate::__port::Entry>, $crate::__port::StorageError> {
            self.$inner.scan_entries(q)
        }
        fn scan_entry_heads(
            &self,
            q: &$crate::__port::EntryScan,
        ) -> Result<Vec<$crate::__port::EntryHead>, $crate::__port::StorageError> {
            self.$inner.scan_entry_heads(q)
        }
        fn scan_usage(
            &self,
            q: &$crate::__port::UsageScan,
        ) -> Result<Vec<$crate::__port::UsageRow>, $crate::__port::StorageError> {
            self.$inner.scan_usage(q)
        }
        fn stats(&self) -> Result<$crate::__port::Stats, $crate::__port::StorageError> {
            self.$inner.stats()
        }
    };
}

/// Inside an `impl ControlCatalog for …`: the catalog's reads
/// (`discover_worlds`, `open_world_readonly`, `list_signatures`),
/// forwarded to the field `$inner`.
#[macro_export]
macro_rules! forward_control_reads {
    ($inner:ident) => {
        fn discover_worlds(
            &self,
        ) -> Result<Vec<$crate::__port::WorldRecord>, $crate::__port::WorldError> {
            self.$inner.discover_worlds()
        }
        fn open_world_readonly(
            &self,
            world_id: &str,
        ) -> Result<$crate::__port::WorldInfo, $crate::__port::WorldError> {
            self.$inner.open_world_readonly(world_id)
        }
        fn list_signatures(
            &self,
        ) -> Result<Vec<$crate::__port::SignatureRecord>, $crate::__port::WorldError> {
            self.$inner.list_signatures()
        }
    };
}

/// Inside an `impl ControlAdmin for …`: the named loads of the
/// administration (`export_snapshot`, `load_destination`,
/// `load_departures`, `stored_receipt`), forwarded to the field `$inner`.
#[macro_export]
macro_rules! forward_admin_reads {
    ($inner:ident: $($read:ident),+ $(,)?) => {
        $($crate::forward_admin_reads!(@ $inner $read);)+
    };
    (@ $inner:ident export_snapshot) => {
        fn export_snapshot(
            &self,
        ) -> Result<$crate::__port::ControlSnapshot, $crate::__port::AdminError> {
            self.$inner.export_snapshot()
        }
    };
    (@ $inner:ident load_destination) => {
        fn load_destination(
            &self,
        ) -> Result<$crate::__port::Destination, $crate::__port::AdminError> {
            self.$inner.load_destination()
        }
    };
    (@ $inner:ident load_departures) => {
        fn load_departures(
            &self,
        ) -> Result<$crate::__port::Departures, $crate::__port::AdminError> {
            self.$inner.load_departures()
        }
    };
    (@ $inner:ident stored_receipt) => {
        fn stored_receipt(&self) -> Result<Option<Vec<u8>>, $crate::__port::AdminError> {
            self.$inner.stored_receipt()
        }
    };
}
