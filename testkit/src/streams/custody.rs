//! The custody stream checker, shared by the fuzz target
//! (`fuzz/fuzz_targets/custody.rs`), the property tests and the corpus
//! replay (`core/tests/custody_corpus.rs`).
//!
//! Three catalogues each hold one session's registration (or none). A stream
//! of small operations becomes real [`catalogue::Request`]s decided by
//! [`catalogue::decide`] (which calls [`custos_core::catalogue::custody::decide`]); after
//! every step the checker checks rules stated independently of how the
//! machine decides:
//!
//! - a refusal persists nothing;
//! - a transition is one of the allowed ones (`Resident → Moving`,
//!   `Imported(op') → Moving(op)` with a new op, `Moving(op) → Moved(op)`,
//!   `Moving(op) → Resident`, absent `→ Imported`, `Moved(op') → Imported(op)`
//!   with a new op), or a delete of a `Resident` or `Imported` session;
//! - a request that answers "unchanged" leaves every row and the revision
//!   alone, and one that changes a row moves the revision by exactly one;
//! - the same request decided again right after is an unchanged repeat;
//! - a `Moved` row never becomes `Resident` or `Moving`, and no delete
//!   removes a `Moving` or `Moved` session.

use super::{violation, Violation};
use custos_core::catalogue::custody::{Custody, MoveOp, Peer};
use custos_core::catalogue::{self, CatalogueState, Creation, Outcome};

/// One step of a custody stream. Catalogue and peer indices are taken mod 3,
/// ops mod 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum CustodyOp {
    /// `begin_move(op, to)` at `cat`.
    Begin {
        /// Catalogue index.
        cat: u8,
        /// Op index.
        op: u8,
        /// Peer index.
        to: u8,
    },
    /// `finish_move(op)` at `cat`.
    Finish {
        /// Catalogue index.
        cat: u8,
        /// Op index.
        op: u8,
    },
    /// `abort_move(op)` at `cat`.
    Abort {
        /// Catalogue index.
        cat: u8,
        /// Op index.
        op: u8,
    },
    /// `import_session(op, from)` at `cat`.
    Import {
        /// Catalogue index.
        cat: u8,
        /// Op index.
        op: u8,
        /// Peer index.
        from: u8,
    },
    /// `delete` at `cat`.
    Delete {
        /// Catalogue index.
        cat: u8,
    },
}

/// The session every stream moves.
pub const SESSION: &str = "session-1";
const PEERS: [&str; 3] = ["cat-a", "cat-b", "cat-c"];
const OPS: [&str; 4] = ["op-1", "op-2", "op-3", "op-4"];

fn creation() -> Creation {
    Creation::local("key-1", "session", "/work")
}

/// The decision function of the catalogue, as the checker takes it.
pub type CatalogueDecide = fn(
    &CatalogueState,
    &catalogue::Request,
) -> Result<catalogue::Decision, catalogue::CatalogueError>;

/// Runs a custody stream through [`catalogue::decide`] and checks the
/// module's rules after every step.
pub fn check_custody_stream(ops: &[CustodyOp]) -> Result<(), Violation> {
    check_custody_stream_with(catalogue::decide, ops)
}

fn request(op: &CustodyOp) -> Result<(usize, catalogue::Request), Violation> {
    let bad = |e: custos_core::catalogue::custody::CustodyError| {
        violation("literals-valid", 0, e.to_string())
    };
    let mop = |i: u8| MoveOp::new(OPS[usize::from(i) % OPS.len()]).map_err(bad);
    let peer = |i: u8| Peer::new(PEERS[usize::from(i) % PEERS.len()]).map_err(bad);
    let id = SESSION.to_owned();
    Ok(match *op {
        CustodyOp::Begin { cat, op, to } => (
            usize::from(cat) % 3,
            catalogue::Request::BeginMove {
                session_id: id,
                op: mop(op)?,
                to: peer(to)?,
            },
        ),
        CustodyOp::Finish { cat, op } => (
            usize::from(cat) % 3,
            catalogue::Request::FinishMove {
                session_id: id,
                op: mop(op)?,
            },
        ),
        CustodyOp::Abort { cat, op } => (
            usize::from(cat) % 3,
            catalogue::Request::AbortMove {
                session_id: id,
                op: mop(op)?,
            },
        ),
        CustodyOp::Import { cat, op, from } => (
            usize::from(cat) % 3,
            catalogue::Request::ImportSession {
                session_id: id,
                creation: creation(),
                op: mop(op)?,
                from: peer(from)?,
                now: 7,
            },
        ),
        CustodyOp::Delete { cat } => (
            usize::from(cat) % 3,
            catalogue::Request::Delete { session_id: id },
        ),
    })
}

fn allowed(before: Option<&Custody>, after: Option<&Custody>, req: &catalogue::Request) -> bool {
    use Custody as C;
    match (req, before, after) {
        (catalogue::Request::Delete { .. }, Some(C::Resident | C::Imported { .. }), None) => true,
        (_, Some(C::Resident), Some(C::Moving { .. })) => true,
        (_, Some(C::Imported { op: a, .. }), Some(C::Moving { op: b, .. })) => a != b,
        (_, Some(C::Moving { op: a, to: t }), Some(C::Moved { op: b, to: u })) => a == b && t == u,
        (_, Some(C::Moving { .. }), Some(C::Resident)) => true,
        (_, None, Some(C::Imported { .. })) => true,
        (_, Some(C::Moved { op: a, .. }), Some(C::Imported { op: b, .. })) => a != b,
        _ => false,
    }
}

/// [`check_custody_stream`] over any decision function with the catalogue's
/// signature — how the tests show the checker catches a broken machine.
pub fn check_custody_stream_with(
    decide: CatalogueDecide,
    ops: &[CustodyOp],
) -> Result<(), Violation> {
    let mut cats: [CatalogueState; 3] = Default::default();
    // The first catalogue registers the session.
    let first = decide(
        &cats[0],
        &catalogue::Request::Reserve {
            session_id: SESSION.to_owned(),
            creation: creation(),
            now: 0,
        },
    )
    .map_err(|e| violation("reserve-succeeds", 0, e.to_string()))?;
    cats[0] = first.next;
    for (step, op) in ops.iter().enumerate() {
        let (c, req) = request(op)?;
        let before = cats[c].clone();
        let Ok(d) = decide(&before, &req) else {
            continue; // a refusal persists nothing
        };
        check_step(step, &req, &before, &d)?;
        if !matches!(req, catalogue::Request::Delete { .. }) {
            match decide(&d.next, &req) {
                Ok(again) if again.next == d.next => {}
                other => {
                    return Err(violation(
                        "a-repeat-is-idempotent",
                        step,
                        format!("{req:?} repeated: {other:?}"),
                    ))
                }
            }
        }
        cats[c] = d.next;
    }
    Ok(())
}

/// One accepted decision's rules: the outcome matches the request, an
/// unchanged answer writes nothing, a change moves the revision once and is
/// a listed transition, the answer is the stored custody, and `Moved` is
/// undone only by a new import.
fn check_step(
    step: usize,
    req: &catalogue::Request,
    before: &CatalogueState,
    d: &catalogue::Decision,
) -> Result<(), Violation> {
    let was = before.sessions.get(SESSION).map(|r| &r.custody);
    let now = d.next.sessions.get(SESSION).map(|r| &r.custody);
    let changed = match &d.outcome {
        Outcome::Custody { changed, .. } | Outcome::Done { changed } => *changed,
        other => {
            return Err(violation(
                "outcome-matches-request",
                step,
                format!("{req:?} answered {other:?}"),
            ))
        }
    };
    if !changed {
        if d.next != *before {
            return Err(violation(
                "unchanged-writes-nothing",
                step,
                format!("{req:?}: {before:?} -> {:?}", d.next),
            ));
        }
    } else {
        if d.next.revision != before.revision + 1 {
            return Err(violation(
                "a-change-moves-the-revision-once",
                step,
                format!("{} -> {}", before.revision, d.next.revision),
            ));
        }
        if !allowed(was, now, req) {
            return Err(violation(
                "transition-is-listed",
                step,
                format!("{req:?}: {was:?} -> {now:?}"),
            ));
        }
    }
    if let Outcome::Custody { custody, .. } = &d.outcome {
        if Some(custody) != now {
            return Err(violation(
                "answer-is-the-stored-custody",
                step,
                format!("answered {custody:?}, stored {now:?}"),
            ));
        }
    }
    if matches!(was, Some(Custody::Moved { .. }))
        && matches!(now, Some(Custody::Resident | Custody::Moving { .. }) | None)
    {
        return Err(violation(
            "moved-is-undone-only-by-a-new-import",
            step,
            format!("{req:?}: {was:?} -> {now:?}"),
        ));
    }
    Ok(())
}

/// Decodes `data` as an operation stream (with `arbitrary`) and runs
/// [`check_custody_stream`]. Undecodable tails are ignored.
#[cfg(feature = "arbitrary")]
pub fn check_custody_bytes(data: &[u8]) -> Result<(), Violation> {
    /// Streams longer than this are truncated: bounded work per input.
    const MAX_OPS: usize = 2048;
    check_custody_stream(&super::decode_ops::<CustodyOp>(data, MAX_OPS))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip() -> Vec<CustodyOp> {
        vec![
            CustodyOp::Begin {
                cat: 0,
                op: 0,
                to: 1,
            },
            CustodyOp::Import {
                cat: 1,
                op: 0,
                from: 0,
            },
            CustodyOp::Finish { cat: 0, op: 0 },
            CustodyOp::Abort { cat: 0, op: 0 },
            CustodyOp::Begin {
                cat: 1,
                op: 1,
                to: 0,
            },
            CustodyOp::Import {
                cat: 0,
                op: 1,
                from: 1,
            },
            CustodyOp::Finish { cat: 1, op: 1 },
            CustodyOp::Import {
                cat: 1,
                op: 0,
                from: 0,
            },
            CustodyOp::Delete { cat: 0 },
            CustodyOp::Delete { cat: 1 },
        ]
    }

    #[test]
    fn a_round_trip_holds_every_rule() {
        check_custody_stream(&round_trip()).unwrap();
    }

    #[test]
    fn the_checker_catches_an_abort_accepted_after_moved() {
        fn broken(
            s: &CatalogueState,
            r: &catalogue::Request,
        ) -> Result<catalogue::Decision, catalogue::CatalogueError> {
            if let catalogue::Request::AbortMove { session_id, .. } = r {
                if let Some(row) = s.sessions.get(session_id) {
                    if matches!(row.custody, Custody::Moved { .. }) {
                        let mut next = s.clone();
                        if let Some(row) = next.sessions.get_mut(session_id) {
                            row.custody = Custody::Resident;
                        }
                        next.revision += 1;
                        return Ok(catalogue::Decision {
                            outcome: Outcome::Custody {
                                custody: Custody::Resident,
                                changed: true,
                            },
                            effects: catalogue::effect::effects(s, &next),
                            next,
                        });
                    }
                }
            }
            catalogue::decide(s, r)
        }
        let e = check_custody_stream_with(broken, &round_trip()).unwrap_err();
        assert_eq!(e.invariant, "transition-is-listed");
        assert_eq!(e.step, 3);
    }
}
