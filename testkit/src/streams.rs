//! Stream checkers: each machine's invariants, checked after every step of a
//! stream of requests.
//!
//! A checker takes a sequence of small, closed operations (derivable with
//! `arbitrary` behind the `arbitrary` feature), turns them into real
//! requests, runs them through the machine's decision function, and checks
//! invariants stated independently of how the machine decides. The fuzz
//! targets (`fuzz/`), the property tests and the checked-in corpus replay all
//! call the same checkers, so a failure found by one is reproducible by all.
//!
//! One module per machine, each with the same three entry points:
//! `check_<machine>_stream` (the real machine), `check_<machine>_stream_with`
//! (any decision function of the machine's signature — how the tests show a
//! checker catches a broken machine) and, with `arbitrary`,
//! `check_<machine>_bytes` (bytes decoded into a stream, what the fuzz
//! targets and the corpus replay run):
//!
//! - [`lease`] — the writer lease;
//! - [`fence`] — writer-fence epochs and imported floors;
//! - [`custody`] — custody transitions, through the catalogue;
//! - [`world`] — the control catalog;
//! - [`deployment`] — the deployment catalog, its compilation and pages;
//! - [`ledger`] — the execution ledger;
//! - [`migration`] — the migration workflow, run in [`crate::simulate`].

pub mod custody;
pub mod deployment;
pub mod fence;
pub mod lease;
pub mod ledger;
pub mod migration;
pub mod world;

/// An invariant a checker found broken, with the step at which it broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The invariant's name.
    pub invariant: &'static str,
    /// The index of the operation that broke it.
    pub step: usize,
    /// What was observed.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invariant `{}` broken at step {}: {}",
            self.invariant, self.step, self.detail
        )
    }
}

impl std::error::Error for Violation {}

/// The violation of `invariant` at `step`, with what was observed.
pub fn violation(invariant: &'static str, step: usize, detail: String) -> Violation {
    Violation {
        invariant,
        step,
        detail,
    }
}

/// Decodes `data` as a stream of at most `max_ops` operations (bounded work
/// per input). An undecodable tail is ignored: every input is a stream.
#[cfg(feature = "arbitrary")]
pub fn decode_ops<T: for<'a> arbitrary::Arbitrary<'a>>(data: &[u8], max_ops: usize) -> Vec<T> {
    let mut u = arbitrary::Unstructured::new(data);
    let mut ops = Vec::new();
    while !u.is_empty() && ops.len() < max_ops {
        match T::arbitrary(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    ops
}
