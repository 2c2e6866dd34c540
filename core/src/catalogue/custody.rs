//! Session custody: which catalogue serves a session, and how it moves.
//!
//! Custody is kept apart from a registration's initialization state and its
//! visibility. Each catalogue (each orchestrator's own database) holds, per
//! session it knows, one of:
//!
//! - [`Custody::Resident`] — no move row: this catalogue serves the session;
//! - [`Custody::Moving`] `(op, to)` — a move under `op` towards `to` has begun;
//!   this catalogue no longer serves the session, the row names where it goes;
//! - [`Custody::Moved`] `(op, to)` — the move finished; the tombstone keeps the
//!   registration and names where the session went;
//! - [`Custody::Imported`] `(op, from)` — this catalogue received the session
//!   from `from` under `op` and serves it.
//!
//! [`decide`] is the compare-and-set rule of every transition, keyed by the
//! move's op:
//!
//! | request | stored | answer |
//! |---|---|---|
//! | `begin_move(op, to)` | `Resident` | `Moving(op, to)` |
//! | | `Imported(op', _)`, `op' != op` | `Moving(op, to)` (onward) |
//! | | `Moving(op, to)` / `Moved(op, to)` | the stored custody, no write |
//! | `finish_move(op)` | `Moving(op, to)` | `Moved(op, to)` |
//! | | `Moved(op, _)` | the stored custody, no write |
//! | `abort_move(op)` | `Moving(op, _)` | `Resident` (an early abort) |
//! | | `Moved(op, _)` | the stored custody, no write (a late abort changes nothing) |
//! | | `Resident` | `Resident`, no write (a repeat of an applied abort) |
//! | `import_session(op, from)` | absent | `Imported(op, from)` |
//! | | `Moved(op', _)`, `op' != op` | `Imported(op, from)` (a return) |
//! | | `Imported(op, from)` | the stored custody, no write |
//! | | `Moved(op, _)` | the stored custody, no write (a late import changes nothing) |
//! | `delete` | `Resident`, `Imported` | allowed (the import row leaves with the session) |
//! | | `Moving`, `Moved` | `Conflict`: the row is the only record of who owns it |
//!
//! Everything else — another op, or a transition the stored state does not
//! allow — is [`CustodyError::Conflict`]; a session this catalogue does not
//! hold is [`CustodyError::NotFound`] (except for an import, which creates it).
//!
//! `import_session` on a registered `Resident` session is a `Conflict`: the
//! session is already served here, and accepting it would make two
//! catalogues serve it. A first import on the target side is the
//! never-seen case: the target holds no row, and the registration is
//! reserved in the same transaction as the `Imported` row.
//!
//! Custody alone cannot keep a session in one place: the catalogues are
//! separate databases. The rules an orchestrator must follow are in
//! `docs/proofs/custody.md` and are checked by the `custody` model.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The longest move op, in bytes.
pub const MOVE_OP_LIMIT: usize = 64;
/// The longest orchestrator name, in bytes.
pub const ORCHESTRATOR_NAME_LIMIT: usize = 64;

/// Whether `s` is a move op: 1 to [`MOVE_OP_LIMIT`] bytes of ASCII letters,
/// digits, `.`, `_`, `:` and `-`.
pub fn is_move_op(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MOVE_OP_LIMIT
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Whether `s` is an orchestrator name (the peer of a move): a lowercase
/// letter, then lowercase letters, digits, `_` and `-`, at most
/// [`ORCHESTRATOR_NAME_LIMIT`] bytes.
pub fn is_orchestrator_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_lowercase())
        && s.len() <= ORCHESTRATOR_NAME_LIMIT
        && b.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-')
}

/// The op that keys one move. Every move needs a new op.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MoveOp(String);

impl MoveOp {
    /// Validates an op ([`is_move_op`]).
    pub fn new(s: impl Into<String>) -> Result<Self, CustodyError> {
        let s = s.into();
        if is_move_op(&s) {
            Ok(MoveOp(s))
        } else {
            Err(CustodyError::Invalid {
                what: "move op",
                value: s,
            })
        }
    }

    /// The op text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for MoveOp {
    type Error = CustodyError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        MoveOp::new(s)
    }
}

impl From<MoveOp> for String {
    fn from(v: MoveOp) -> Self {
        v.0
    }
}

impl std::fmt::Display for MoveOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The orchestrator at the other end of a move (whose catalogue the session
/// goes to or comes from).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Peer(String);

impl Peer {
    /// Validates a peer name ([`is_orchestrator_name`]).
    pub fn new(s: impl Into<String>) -> Result<Self, CustodyError> {
        let s = s.into();
        if is_orchestrator_name(&s) {
            Ok(Peer(s))
        } else {
            Err(CustodyError::Invalid {
                what: "orchestrator name",
                value: s,
            })
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Peer {
    type Error = CustodyError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Peer::new(s)
    }
}

impl From<Peer> for String {
    fn from(v: Peer) -> Self {
        v.0
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who serves a session, as one catalogue records it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Custody {
    /// No move row: this catalogue serves the session.
    Resident,
    /// A move towards `to` has begun under `op`.
    Moving {
        /// The move's op.
        op: MoveOp,
        /// Where the session goes.
        to: Peer,
    },
    /// The move under `op` finished; the session is served by `to`.
    Moved {
        /// The move's op.
        op: MoveOp,
        /// Where the session went.
        to: Peer,
    },
    /// The session was received from `from` under `op`; this catalogue serves it.
    Imported {
        /// The move's op.
        op: MoveOp,
        /// Where the session came from.
        from: Peer,
    },
}

impl Custody {
    /// Whether this catalogue serves the session (`Resident` or `Imported`).
    pub fn serves(&self) -> bool {
        matches!(self, Custody::Resident | Custody::Imported { .. })
    }

    /// The stored state word of a move row (`None` for `Resident`, which has
    /// no row): `moving`, `moved` or `imported`.
    pub fn state_word(&self) -> Option<&'static str> {
        match self {
            Custody::Resident => None,
            Custody::Moving { .. } => Some("moving"),
            Custody::Moved { .. } => Some("moved"),
            Custody::Imported { .. } => Some("imported"),
        }
    }

    /// The move row `(op, peer)`, `None` for `Resident`.
    pub fn row(&self) -> Option<(&MoveOp, &Peer)> {
        match self {
            Custody::Resident => None,
            Custody::Moving { op, to } | Custody::Moved { op, to } => Some((op, to)),
            Custody::Imported { op, from } => Some((op, from)),
        }
    }

    /// Decodes a stored move row. An unknown state word, op or peer is
    /// [`CustodyError::Invalid`] — never read as `Resident`.
    pub fn from_row(state: &str, op: &str, peer: &str) -> Result<Custody, CustodyError> {
        let op = MoveOp::new(op)?;
        let peer = Peer::new(peer)?;
        match state {
            "moving" => Ok(Custody::Moving { op, to: peer }),
            "moved" => Ok(Custody::Moved { op, to: peer }),
            "imported" => Ok(Custody::Imported { op, from: peer }),
            other => Err(CustodyError::Invalid {
                what: "move state",
                value: other.to_owned(),
            }),
        }
    }
}

/// A custody transition request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Request {
    /// Source side: start moving the session to `to`.
    BeginMove {
        /// The move's op.
        op: MoveOp,
        /// The destination.
        to: Peer,
    },
    /// Source side: the destination holds the session; give it up.
    FinishMove {
        /// The move's op.
        op: MoveOp,
    },
    /// Source side: an early abort, back to `Resident`.
    AbortMove {
        /// The move's op.
        op: MoveOp,
    },
    /// Target side: take in a session handed over by `from`.
    ImportSession {
        /// The move's op.
        op: MoveOp,
        /// The source.
        from: Peer,
    },
    /// Whether the session may be deleted here.
    Delete,
}

/// The answer to a custody request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Decision {
    /// The custody after the request: what the caller is told.
    pub custody: Custody,
    /// Whether a row changes (a repeat writes nothing). For `Delete`, true.
    pub changed: bool,
}

/// Why a custody request was refused. Nothing changes on a refusal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum CustodyError {
    /// Another op, or a transition the stored state does not allow.
    #[error("Conflict: {request} refused: the session is {stored}")]
    Conflict {
        /// The request, in words.
        request: String,
        /// The stored custody, in words.
        stored: String,
    },
    /// The catalogue holds no such session.
    #[error("NotFound: the catalogue holds no such session")]
    NotFound,
    /// A value outside its grammar.
    #[error("Invalid: {what} {value:?} breaks its grammar")]
    Invalid {
        /// Which value.
        what: &'static str,
        /// The value.
        value: String,
    },
}

impl CustodyError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (a custody step the stored state does not allow is `StateConflict`).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            CustodyError::Conflict { .. } => Class::StateConflict,
            CustodyError::NotFound => Class::NotFound,
            CustodyError::Invalid { .. } => Class::InvalidArgument,
        }
    }
}

crate::reasons! {
    /// The stable reason string: `Conflict`, `NotFound` or `Invalid`.
    CustodyError { Conflict, NotFound, Invalid }
}

fn conflict(req: &Request, stored: &Custody) -> CustodyError {
    CustodyError::Conflict {
        request: format!("{req:?}"),
        stored: format!("{stored:?}"),
    }
}

fn same(c: &Custody) -> Decision {
    Decision {
        custody: c.clone(),
        changed: false,
    }
}

fn to(c: Custody) -> Decision {
    Decision {
        custody: c,
        changed: true,
    }
}

/// Decides one custody request against what this catalogue stores for the
/// session: `None` when it holds no registration of it. Total and
/// deterministic; see the module table.
pub fn decide(stored: Option<&Custody>, req: &Request) -> Result<Decision, CustodyError> {
    use Custody as C;
    let Some(stored) = stored else {
        return match req {
            Request::ImportSession { op, from } => Ok(to(C::Imported {
                op: op.clone(),
                from: from.clone(),
            })),
            _ => Err(CustodyError::NotFound),
        };
    };
    match (req, stored) {
        (Request::BeginMove { op, to: dest }, C::Resident) => Ok(to(C::Moving {
            op: op.clone(),
            to: dest.clone(),
        })),
        (Request::BeginMove { op, to: dest }, C::Imported { op: held, .. }) if held != op => {
            Ok(to(C::Moving {
                op: op.clone(),
                to: dest.clone(),
            }))
        }
        (
            Request::BeginMove { op, to: dest },
            C::Moving { op: o, to: t } | C::Moved { op: o, to: t },
        ) if o == op && t == dest => Ok(same(stored)),
        (Request::FinishMove { op }, C::Moving { op: o, to: t }) if o == op => Ok(to(C::Moved {
            op: o.clone(),
            to: t.clone(),
        })),
        (Request::FinishMove { op }, C::Moved { op: o, .. }) if o == op => Ok(same(stored)),
        (Request::AbortMove { op }, C::Moving { op: o, .. }) if o == op => Ok(to(C::Resident)),
        (Request::AbortMove { op }, C::Moved { op: o, .. }) if o == op => Ok(same(stored)),
        (Request::AbortMove { .. }, C::Resident) => Ok(same(stored)),
        (Request::ImportSession { op, from }, C::Moved { op: o, .. }) if o != op => {
            Ok(to(C::Imported {
                op: op.clone(),
                from: from.clone(),
            }))
        }
        // The arm above took every other op: this is the moved one coming
        // back under the same op, a replay.
        (Request::ImportSession { .. }, C::Moved { .. }) => Ok(same(stored)),
        (Request::ImportSession { op, from }, C::Imported { op: o, from: f })
            if o == op && f == from =>
        {
            Ok(same(stored))
        }
        (Request::Delete, C::Resident | C::Imported { .. }) => Ok(Decision {
            custody: stored.clone(),
            changed: true,
        }),
        _ => Err(conflict(req, stored)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(s: &str) -> MoveOp {
        MoveOp::new(s).unwrap()
    }
    fn peer(s: &str) -> Peer {
        Peer::new(s).unwrap()
    }
    fn begin(o: &str, t: &str) -> Request {
        Request::BeginMove {
            op: op(o),
            to: peer(t),
        }
    }
    fn import(o: &str, f: &str) -> Request {
        Request::ImportSession {
            op: op(o),
            from: peer(f),
        }
    }
    fn moving(o: &str, t: &str) -> Custody {
        Custody::Moving {
            op: op(o),
            to: peer(t),
        }
    }
    fn moved(o: &str, t: &str) -> Custody {
        Custody::Moved {
            op: op(o),
            to: peer(t),
        }
    }
    fn imported(o: &str, f: &str) -> Custody {
        Custody::Imported {
            op: op(o),
            from: peer(f),
        }
    }

    #[test]
    fn source_side_resident_moving_moved() {
        let d = decide(Some(&Custody::Resident), &begin("o1", "b")).unwrap();
        assert_eq!(d, to(moving("o1", "b")));
        let d = decide(Some(&d.custody), &Request::FinishMove { op: op("o1") }).unwrap();
        assert_eq!(d, to(moved("o1", "b")));
        // Repeats write nothing.
        let m = moved("o1", "b");
        assert_eq!(
            decide(Some(&m), &Request::FinishMove { op: op("o1") }),
            Ok(same(&m))
        );
        assert_eq!(decide(Some(&m), &begin("o1", "b")), Ok(same(&m)));
        assert_eq!(
            decide(Some(&moving("o1", "b")), &begin("o1", "b")),
            Ok(same(&moving("o1", "b")))
        );
    }

    #[test]
    fn a_finish_under_another_op_conflicts_and_changes_nothing() {
        for stored in [moving("o1", "b"), moved("o1", "b")] {
            assert_eq!(
                decide(Some(&stored), &Request::FinishMove { op: op("o2") })
                    .unwrap_err()
                    .reason(),
                "Conflict",
                "{stored:?}"
            );
        }
    }

    #[test]
    fn early_abort_returns_and_late_abort_changes_nothing() {
        assert_eq!(
            decide(
                Some(&moving("o1", "b")),
                &Request::AbortMove { op: op("o1") }
            ),
            Ok(to(Custody::Resident))
        );
        let m = moved("o1", "b");
        assert_eq!(
            decide(Some(&m), &Request::AbortMove { op: op("o1") }),
            Ok(same(&m))
        );
        assert_eq!(
            decide(
                Some(&Custody::Resident),
                &Request::AbortMove { op: op("o1") }
            ),
            Ok(same(&Custody::Resident))
        );
        assert_eq!(
            decide(Some(&m), &Request::AbortMove { op: op("o2") })
                .unwrap_err()
                .reason(),
            "Conflict"
        );
        assert!(decide(
            Some(&moving("o1", "b")),
            &Request::AbortMove { op: op("o2") }
        )
        .is_err());
    }

    #[test]
    fn target_side_and_returns() {
        assert_eq!(
            decide(None, &import("o1", "a")),
            Ok(to(imported("o1", "a")))
        );
        let i = imported("o1", "a");
        assert_eq!(decide(Some(&i), &import("o1", "a")), Ok(same(&i)));
        assert!(decide(Some(&i), &import("o2", "a")).is_err());
        assert!(decide(Some(&i), &import("o1", "c")).is_err());
        // Onward from Imported needs a new op.
        assert!(decide(Some(&i), &begin("o1", "c")).is_err());
        assert_eq!(
            decide(Some(&i), &begin("o2", "c")),
            Ok(to(moving("o2", "c")))
        );
        // A return to the catalogue that handed it over.
        let m = moved("o1", "b");
        assert_eq!(
            decide(Some(&m), &import("o2", "b")),
            Ok(to(imported("o2", "b")))
        );
        // A late import of the same move changes nothing.
        assert_eq!(decide(Some(&m), &import("o1", "b")), Ok(same(&m)));
        // An import onto a session served here is a conflict.
        assert!(decide(Some(&Custody::Resident), &import("o1", "a")).is_err());
        assert!(decide(Some(&moving("o1", "b")), &import("o2", "b")).is_err());
    }

    #[test]
    fn begin_on_moved_and_other_ops_conflict() {
        let m = moved("o1", "b");
        assert!(decide(Some(&m), &begin("o2", "c")).is_err());
        assert!(decide(Some(&moving("o1", "b")), &begin("o2", "b")).is_err());
        assert!(decide(Some(&moving("o1", "b")), &begin("o1", "c")).is_err());
        assert!(decide(
            Some(&Custody::Resident),
            &Request::FinishMove { op: op("o1") }
        )
        .is_err());
        assert_eq!(decide(None, &begin("o1", "b")), Err(CustodyError::NotFound));
    }

    #[test]
    fn delete_refuses_moving_and_moved() {
        assert!(decide(Some(&Custody::Resident), &Request::Delete).is_ok());
        assert!(decide(Some(&imported("o1", "a")), &Request::Delete).is_ok());
        assert!(decide(Some(&moving("o1", "b")), &Request::Delete).is_err());
        assert!(decide(Some(&moved("o1", "b")), &Request::Delete).is_err());
    }

    #[test]
    fn ops_and_peers_read_back_as_their_own_text() {
        let op = MoveOp::new("op-1:2.x_y").unwrap();
        assert_eq!(op.to_string(), "op-1:2.x_y");
        assert_eq!(serde_json::to_string(&op).unwrap(), r#""op-1:2.x_y""#);
        assert_eq!(String::from(op), "op-1:2.x_y");
        let peer = Peer::new("node-1").unwrap();
        assert_eq!(peer.to_string(), "node-1");
        assert_eq!(serde_json::to_string(&peer).unwrap(), r#""node-1""#);
        assert_eq!(String::from(peer), "node-1");
    }

    #[test]
    fn only_a_resident_or_imported_session_is_served_here() {
        assert!(Custody::Resident.serves());
        assert!(imported("o1", "a").serves());
        assert!(!moving("o1", "b").serves());
        assert!(!moved("o1", "b").serves());
    }

    #[test]
    fn grammars_and_rows() {
        assert!(is_move_op("op-1:2.x_y"));
        assert!(!is_move_op(""));
        assert!(!is_move_op("a b"));
        assert!(!is_move_op(&"x".repeat(65)));
        assert!(is_orchestrator_name("node-1"));
        assert!(!is_orchestrator_name("Node"));
        assert!(!is_orchestrator_name("1node"));
        // Every later byte is checked too, each allowed class by itself.
        assert!(is_orchestrator_name("node_1"));
        assert!(is_orchestrator_name(&"n".repeat(ORCHESTRATOR_NAME_LIMIT)));
        assert!(!is_orchestrator_name(
            &"n".repeat(ORCHESTRATOR_NAME_LIMIT + 1)
        ));
        for bad in ["nOde", "no de", "node.1", "node:1", "node/1", "nodé"] {
            assert!(!is_orchestrator_name(bad), "{bad:?} accepted");
        }
        assert_eq!(Custody::from_row("moved", "o1", "b"), Ok(moved("o1", "b")));
        assert_eq!(
            Custody::from_row("gone", "o1", "b").unwrap_err().reason(),
            "Invalid"
        );
        assert_eq!(
            Custody::from_row("moved", "", "b").unwrap_err().reason(),
            "Invalid"
        );
        assert_eq!(
            Custody::from_row("moved", "o1", "B").unwrap_err().reason(),
            "Invalid"
        );
        for c in [moving("o", "p"), moved("o", "p"), imported("o", "p")] {
            let (o, p) = c.row().unwrap();
            assert_eq!(
                Custody::from_row(c.state_word().unwrap(), o.as_str(), p.as_str()),
                Ok(c.clone())
            );
        }
    }
}
