//! The execution-ledger conformance suite: one public generic function per
//! behaviour of the [`Ledger`] port. Each takes a factory that returns a
//! fresh, empty, opened ledger.
//!
//! Cases panic (via `assert!`) on a violation: they are test bodies.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use crate::Place;
use custos_core::ledger::{
    Admission, AttachToken, CallKind, CallState, CloseOutcome, Fencing, Incarnation, Key, Ledger,
    LedgerError, Limits, Lookup, OpId, RequestId, ScopeState, SessionId, Stopping, Tool, Unacked,
    WorkspaceId,
};

/// Small limits, so the bounds are reached: 2 unclean scopes, 40 bytes,
/// 16 per call.
pub const LIMITS: Limits = Limits {
    max_unclean_scopes: 2,
    max_ledger_bytes: 40,
    reservation_bytes: 16,
};

/// A session id.
#[track_caller]
pub fn sid(s: &str) -> SessionId {
    SessionId::new(s).expect("valid session literal")
}

/// A workspace id.
#[track_caller]
pub fn ws(s: &str) -> WorkspaceId {
    WorkspaceId::new(s).expect("valid workspace literal")
}

/// An attach token.
#[track_caller]
pub fn tok(s: &str) -> AttachToken {
    AttachToken::new(s).expect("valid token literal")
}

/// A tool.
#[track_caller]
pub fn tool(s: &str) -> Tool {
    Tool::new(s).expect("valid tool literal")
}

/// A call key at step 1, source 0.
#[track_caller]
pub fn key(session: &str, op: &str, incarnation: Incarnation) -> Key {
    Key {
        session: sid(session),
        op: OpId::new(op).expect("valid op literal"),
        step: 1,
        source_index: 0,
        incarnation,
    }
}

fn attach<L: Ledger>(l: &L, s: &str, inc: Incarnation, t: &str) -> Result<(), LedgerError> {
    l.attach(&LIMITS, &sid(s), &ws("w"), inc, &tok(t))
        .map(|_| ())
}

fn admit<L: Ledger>(l: &L, k: &Key, t: &str) -> Result<Admission, LedgerError> {
    l.admit(&LIMITS, k, &tool("program"), &tok(t))
}

fn close<L: Ledger>(l: &L, s: &str, inc: Incarnation) -> Result<CloseOutcome, LedgerError> {
    l.begin_close(&LIMITS, &sid(s), inc)?;
    l.finish_close(&LIMITS, &sid(s), inc)
}

/// A fresh ledger has no scope, no release and a missing key.
pub fn fresh_ledger_is_empty<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    assert_eq!(l.scope(&LIMITS, &sid("s")), Ok(None));
    assert_eq!(l.releases(&LIMITS), Ok(vec![]));
    assert_eq!(l.query(&LIMITS, &key("s", "o", 1)), Ok(Lookup::Missing));
    assert_eq!(l.unacked(&LIMITS, &sid("s")), Ok(Unacked::default()));
}

/// Every stored row counts as an Activity record, settled history
/// included: a fresh ledger has none; a scope, an admitted call, its
/// terminal outcome, a closed scope and its release all leave rows that
/// count, and nothing ever makes the count fall back to zero.
pub fn every_row_is_an_activity_record<L: Ledger>(f: impl Fn() -> L) {
    // The count is exact: after every step it equals the reference
    // ledger's (core's memory backend) over the same requests — scopes,
    // call rows, tombstones and release rows alike.
    let l = f();
    let reference = custos_core::ledger::MemoryLedger::new();
    assert_eq!(l.records(), Ok(0));
    let k = key("s", "o", 1);
    let steps: [(&str, &Step<'_>); 7] = [
        ("a scope", &|x| attach_dyn(x, "s", 1, "a")),
        ("an admitted call", &|x| {
            x.admit(&LIMITS, &k, &tool("program"), &tok("a")).unwrap();
        }),
        ("a terminal call", &|x| {
            x.finish(&LIMITS, &k, b"ok").unwrap()
        }),
        ("a tombstone", &|x| {
            x.ack(&LIMITS, &k).unwrap();
        }),
        ("a second call left terminal", &|x| {
            let k2 = key("s", "p", 1);
            x.admit(&LIMITS, &k2, &tool("program"), &tok("a")).unwrap();
            x.finish(&LIMITS, &k2, b"ok").unwrap();
        }),
        ("a closed scope", &|x| {
            x.begin_close(&LIMITS, &sid("s"), 1).unwrap();
            x.finish_close(&LIMITS, &sid("s"), 1).unwrap();
        }),
        ("a release row", &|x| {
            x.release(&LIMITS, &sid("s"), 50).unwrap();
        }),
    ];
    for (what, step) in steps {
        step(&l);
        step(&reference);
        let want = reference.records().unwrap();
        assert_eq!(l.records(), Ok(want), "after {what}");
        assert!(want > 0, "nothing makes the count fall back to zero");
    }
    l.close().unwrap();
    assert_eq!(l.records(), Err(LedgerError::HandleClosed));
}

/// One step of a history, applied to the ledger under test and to the
/// reference alike.
type Step<'a> = dyn Fn(&dyn Ledger) + 'a;

fn attach_dyn(l: &dyn Ledger, s: &str, inc: Incarnation, t: &str) {
    l.attach(&LIMITS, &sid(s), &ws("w"), inc, &tok(t)).unwrap();
}

/// The first attach creates an open scope with the caller's token.
pub fn attach_creates_an_open_scope<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    let a = l
        .attach(&LIMITS, &sid("s"), &ws("w"), 3, &tok("a"))
        .unwrap();
    assert_eq!(a.scope.state, ScopeState::Open);
    assert_eq!(a.scope.incarnation, 3);
    assert_eq!(l.scope(&LIMITS, &sid("s")).unwrap(), Some(a.scope));
}

/// A second workspace for a session is refused.
pub fn attach_refuses_a_second_workspace<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    assert!(matches!(
        l.attach(&LIMITS, &sid("s"), &ws("other"), 1, &tok("a")),
        Err(LedgerError::WorkspaceMismatch { .. })
    ));
}

/// `admit` is `Fresh` once, then `Existing`.
pub fn admit_is_fresh_exactly_once<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    assert_eq!(admit(&l, &k, "a"), Ok(Admission::Fresh));
    assert_eq!(
        admit(&l, &k, "a"),
        Ok(Admission::Existing(CallState::Admitted))
    );
    assert_eq!(
        l.admitted(&LIMITS, &sid("s"), &tool("program")),
        Ok(vec![k])
    );
}

/// A replaced attach token is refused by value; the new one admits.
pub fn a_stale_token_is_refused<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "old").unwrap();
    attach(&l, "s", 1, "new").unwrap();
    let k = key("s", "o", 1);
    assert_eq!(admit(&l, &k, "old"), Err(LedgerError::StaleToken));
    assert_eq!(l.query(&LIMITS, &k), Ok(Lookup::Missing));
    assert_eq!(admit(&l, &k, "new"), Ok(Admission::Fresh));
}

/// A request at another incarnation is refused.
pub fn a_stale_incarnation_is_refused<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 2, "a").unwrap();
    assert_eq!(
        admit(&l, &key("s", "o", 1), "a"),
        Err(LedgerError::StaleIncarnation {
            stored: 2,
            requested: 1
        })
    );
}

/// Admission needs a scope.
pub fn admit_needs_a_scope<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    assert!(matches!(
        admit(&l, &key("s", "o", 1), "a"),
        Err(LedgerError::UnknownScope { .. })
    ));
}

/// `finish` stores the outcome; `query` reads it back.
pub fn finish_round_trips_the_outcome<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    admit(&l, &k, "a").unwrap();
    l.finish(&LIMITS, &k, b"\x00result\xff").unwrap();
    assert_eq!(
        l.query(&LIMITS, &k),
        Ok(Lookup::Found(CallState::Terminal(
            b"\x00result\xff".to_vec()
        )))
    );
    assert_eq!(
        l.finish(&LIMITS, &k, b"again"),
        Err(LedgerError::NotAdmitted {
            state: CallKind::Terminal
        })
    );
}

/// An acknowledged key is never admitted again in its incarnation.
pub fn an_acknowledged_key_is_never_admitted_again_in_its_incarnation<L: Ledger>(
    f: impl Fn() -> L,
) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    admit(&l, &k, "a").unwrap();
    l.finish(&LIMITS, &k, b"r").unwrap();
    assert_eq!(l.ack(&LIMITS, &k), Ok(false));
    assert_eq!(l.ack(&LIMITS, &k), Ok(true));
    assert_eq!(
        admit(&l, &k, "a"),
        Ok(Admission::Existing(CallState::Acked))
    );
    assert_eq!(l.query(&LIMITS, &k), Ok(Lookup::Found(CallState::Acked)));
    assert_eq!(
        l.query_or_fence(&LIMITS, &k, b"x"),
        Ok(Fencing::Standing(CallState::Acked))
    );
}

/// `ack` refuses a running call and an unknown key.
pub fn ack_refuses_running_and_missing_calls<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    assert!(matches!(
        l.ack(&LIMITS, &k),
        Err(LedgerError::UnknownCall { .. })
    ));
    admit(&l, &k, "a").unwrap();
    assert_eq!(l.ack(&LIMITS, &k), Err(LedgerError::CallRunning));
    assert_eq!(
        admit(&l, &k, "a"),
        Ok(Admission::Existing(CallState::Admitted))
    );
}

/// A fence with no row inserts a terminal row and blocks admission.
pub fn a_fence_with_no_row_inserts_a_terminal_row_and_blocks_admission<L: Ledger>(
    f: impl Fn() -> L,
) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    assert_eq!(l.query_or_fence(&LIMITS, &k, b"dns"), Ok(Fencing::Fenced));
    let dns = CallState::Terminal(b"dns".to_vec());
    assert_eq!(admit(&l, &k, "a"), Ok(Admission::Existing(dns.clone())));
    assert_eq!(
        l.query_or_fence(&LIMITS, &k, b"dns"),
        Ok(Fencing::Standing(dns))
    );
    assert_eq!(
        l.unacked(&LIMITS, &sid("s")).unwrap().terminal,
        vec![k.clone()]
    );
}

/// A stop with no row bars the key from a later start; a running row is
/// stopped; another tool's row is untouched.
pub fn a_stop_with_no_row_bars_the_key_from_a_later_start<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    assert_eq!(
        l.stop_or_fence(&LIMITS, &k, &tool("program")),
        Ok(Stopping::Barred)
    );
    assert_eq!(
        admit(&l, &k, "a"),
        Ok(Admission::Existing(CallState::Unknown))
    );
    let k2 = key("s", "p", 1);
    admit(&l, &k2, "a").unwrap();
    assert_eq!(
        l.stop_or_fence(&LIMITS, &k2, &tool("other")),
        Ok(Stopping::Untouched(CallState::Admitted))
    );
    assert_eq!(
        l.stop_or_fence(&LIMITS, &k2, &tool("program")),
        Ok(Stopping::Stopped)
    );
    assert_eq!(l.query(&LIMITS, &k2), Ok(Lookup::Found(CallState::Unknown)));
}

/// Recovery turns every admitted row unknown and releases its bytes.
pub fn recovery_marks_admitted_rows_unknown<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let (a, b) = (key("s", "a", 1), key("s", "b", 1));
    admit(&l, &a, "a").unwrap();
    admit(&l, &b, "a").unwrap();
    l.finish(&LIMITS, &b, b"r").unwrap();
    assert_eq!(l.recover(), Ok(1));
    assert_eq!(l.query(&LIMITS, &a), Ok(Lookup::Found(CallState::Unknown)));
    assert_eq!(
        l.query(&LIMITS, &b),
        Ok(Lookup::Found(CallState::Terminal(b"r".to_vec())))
    );
    assert_eq!(l.recover(), Ok(0));
}

/// The byte budget counts reservations and terminal sizes.
pub fn the_byte_budget_is_enforced<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let (a, b, c) = (key("s", "a", 1), key("s", "b", 1), key("s", "c", 1));
    admit(&l, &a, "a").unwrap();
    admit(&l, &b, "a").unwrap();
    assert!(matches!(
        admit(&l, &c, "a"),
        Err(LedgerError::BudgetExhausted { .. })
    ));
    assert_eq!(l.query(&LIMITS, &c), Ok(Lookup::Missing));
    assert!(matches!(
        l.finish(&LIMITS, &a, &[0; 17]),
        Err(LedgerError::OutcomeTooLarge { .. })
    ));
    l.finish(&LIMITS, &a, &[0; 8]).unwrap();
    assert_eq!(admit(&l, &c, "a"), Ok(Admission::Fresh));
    l.mark_unknown(&LIMITS, &b).unwrap();
    admit(&l, &key("s", "d", 1), "a").unwrap();
}

/// Close with everything acknowledged is clean, drops tombstones and
/// allows a reopen at exactly incarnation + 1.
pub fn a_clean_close_reopens_at_the_next_incarnation<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    admit(&l, &k, "a").unwrap();
    l.finish(&LIMITS, &k, b"r").unwrap();
    l.ack(&LIMITS, &k).unwrap();
    assert!(matches!(
        attach(&l, "s", 2, "a"),
        Err(LedgerError::NotReopenable { .. })
    ));
    assert_eq!(close(&l, "s", 1), Ok(CloseOutcome::AllRetired));
    assert_eq!(
        l.finish_close(&LIMITS, &sid("s"), 1),
        Ok(CloseOutcome::AllRetired)
    );
    // Tombstones dropped: the key reads missing, but its incarnation is over.
    assert_eq!(l.query(&LIMITS, &k), Ok(Lookup::Missing));
    assert!(matches!(
        attach(&l, "s", 3, "a"),
        Err(LedgerError::NotReopenable { .. })
    ));
    attach(&l, "s", 2, "b").unwrap();
    assert!(matches!(
        admit(&l, &k, "b"),
        Err(LedgerError::StaleIncarnation { .. })
    ));
    assert_eq!(admit(&l, &key("s", "o", 2), "b"), Ok(Admission::Fresh));
}

/// A closing scope admits nothing; an unclean close keeps tombstones and
/// never reopens by itself.
pub fn an_unclean_close_needs_a_release<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let (a, b) = (key("s", "a", 1), key("s", "b", 1));
    admit(&l, &a, "a").unwrap();
    l.mark_unknown(&LIMITS, &a).unwrap();
    admit(&l, &b, "a").unwrap();
    l.finish(&LIMITS, &b, b"r").unwrap();
    l.ack(&LIMITS, &b).unwrap();
    l.begin_close(&LIMITS, &sid("s"), 1).unwrap();
    assert_eq!(
        admit(&l, &key("s", "c", 1), "a"),
        Err(LedgerError::ScopeClosing)
    );
    assert_eq!(
        l.finish_close(&LIMITS, &sid("s"), 1),
        Ok(CloseOutcome::UnknownCleanup(1))
    );
    assert_eq!(l.query(&LIMITS, &b), Ok(Lookup::Found(CallState::Acked)));
    assert_eq!(
        attach(&l, "s", 2, "a"),
        Err(LedgerError::UncleanClose { unretired: 1 })
    );
    let r = l.release(&LIMITS, &sid("s"), 1234).unwrap();
    assert_eq!(r.was, ScopeState::Closed(CloseOutcome::UnknownCleanup(1)));
    assert_eq!(r.released_at_ms, 1234);
    assert_eq!(l.releases(&LIMITS), Ok(vec![r]));
    assert_eq!(l.query(&LIMITS, &b), Ok(Lookup::Missing));
    attach(&l, "s", 2, "a").unwrap();
}

/// `release` refuses an open and a clean scope.
pub fn release_refuses_open_and_clean_scopes<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    assert_eq!(
        l.release(&LIMITS, &sid("s"), 1).map(|_| ()),
        Err(LedgerError::NotReleasable {
            state: ScopeState::Open
        })
    );
    close(&l, "s", 1).unwrap();
    assert_eq!(
        l.release(&LIMITS, &sid("s"), 1).map(|_| ()),
        Err(LedgerError::NotReleasable {
            state: ScopeState::Closed(CloseOutcome::AllRetired)
        })
    );
    // A closing scope is releasable.
    attach(&l, "t", 1, "a").unwrap();
    l.begin_close(&LIMITS, &sid("t"), 1).unwrap();
    assert_eq!(
        l.release(&LIMITS, &sid("t"), 5).unwrap().was,
        ScopeState::Closing
    );
}

/// At most `max_unclean_scopes` scopes are unclean; a clean close frees a
/// slot at once.
pub fn unclean_scopes_are_bounded<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    let full = Err(LedgerError::CapacityExhausted { max: 2 });
    attach(&l, "a", 1, "t").unwrap();
    // A call left terminal and unacknowledged: closing `a` ends in
    // unknown cleanup.
    let k = key("a", "o", 1);
    admit(&l, &k, "t").unwrap();
    l.finish(&LIMITS, &k, b"r").unwrap();
    attach(&l, "b", 1, "t").unwrap();
    assert_eq!(attach(&l, "c", 1, "t"), full);
    // Every state but `Closed(AllRetired)` holds its slot: closing ...
    l.begin_close(&LIMITS, &sid("a"), 1).unwrap();
    assert_eq!(attach(&l, "c", 1, "t"), full, "a closing scope is unclean");
    // ... and closed with unknown cleanup.
    assert_eq!(
        l.finish_close(&LIMITS, &sid("a"), 1),
        Ok(CloseOutcome::UnknownCleanup(1))
    );
    assert_eq!(attach(&l, "c", 1, "t"), full, "unknown cleanup is unclean");
    // A release retires it: the slot is free.
    l.release(&LIMITS, &sid("a"), 50).unwrap();
    attach(&l, "c", 1, "t").unwrap();
    close(&l, "b", 1).unwrap();
    attach(&l, "d", 1, "t").unwrap();
}

/// Attach lists the unacknowledged keys; `unacked` lists them without
/// replacing the token.
pub fn unacked_lists_terminal_and_unknown_keys_and_changes_nothing<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let (a, b, c) = (key("s", "a", 1), key("s", "b", 1), key("s", "c", 1));
    admit(&l, &a, "a").unwrap();
    admit(&l, &b, "a").unwrap();
    l.finish(&LIMITS, &a, b"r").unwrap();
    l.mark_unknown(&LIMITS, &b).unwrap();
    admit(&l, &c, "a").unwrap();
    let u = Unacked {
        terminal: vec![a],
        unknown: vec![b],
    };
    assert_eq!(l.unacked(&LIMITS, &sid("s")), Ok(u.clone()));
    assert_eq!(
        l.scope(&LIMITS, &sid("s")).unwrap().unwrap().attach_token,
        tok("a")
    );
    let at = l
        .attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("z"))
        .unwrap();
    assert_eq!(at.unacked, u);
    assert_eq!(at.scope.attach_token, tok("z"));
}

/// A terminal outcome holds its bytes against the budget until it is
/// acknowledged: two full outcomes leave no room for a third reservation;
/// acknowledging one frees it.
pub fn terminal_outcomes_hold_their_bytes_until_acked<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let (a, b, c) = (key("s", "a", 1), key("s", "b", 1), key("s", "c", 1));
    admit(&l, &a, "a").unwrap();
    admit(&l, &b, "a").unwrap();
    l.finish(&LIMITS, &a, &[1; 16]).unwrap();
    l.finish(&LIMITS, &b, &[2; 16]).unwrap();
    assert_eq!(
        admit(&l, &c, "a"),
        Err(LedgerError::BudgetExhausted {
            used: 32,
            requested: 16,
            max: 40
        })
    );
    assert_eq!(l.query(&LIMITS, &c), Ok(Lookup::Missing));
    l.ack(&LIMITS, &a).unwrap();
    assert_eq!(admit(&l, &c, "a"), Ok(Admission::Fresh));
}

/// A stale token is refused for a key that already has a row or a
/// tombstone too: the token is checked before the key is looked up.
pub fn a_stale_token_is_refused_for_an_existing_key<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "old").unwrap();
    let (k, done) = (key("s", "o", 1), key("s", "d", 1));
    admit(&l, &k, "old").unwrap();
    admit(&l, &done, "old").unwrap();
    l.finish(&LIMITS, &done, b"r").unwrap();
    l.ack(&LIMITS, &done).unwrap();
    attach(&l, "s", 1, "new").unwrap();
    assert_eq!(admit(&l, &k, "old"), Err(LedgerError::StaleToken));
    assert_eq!(admit(&l, &done, "old"), Err(LedgerError::StaleToken));
    assert_eq!(
        admit(&l, &k, "new"),
        Ok(Admission::Existing(CallState::Admitted))
    );
    assert_eq!(
        admit(&l, &done, "new"),
        Ok(Admission::Existing(CallState::Acked))
    );
}

/// `query_or_fence` and `stop_or_fence` at another incarnation than the
/// scope's are refused and write nothing.
pub fn fences_at_a_stale_incarnation_are_refused<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 2, "a").unwrap();
    let old = key("s", "o", 1);
    let stale = LedgerError::StaleIncarnation {
        stored: 2,
        requested: 1,
    };
    assert_eq!(l.query_or_fence(&LIMITS, &old, b"dns"), Err(stale.clone()));
    assert_eq!(l.stop_or_fence(&LIMITS, &old, &tool("program")), Err(stale));
    assert_eq!(l.query(&LIMITS, &old), Ok(Lookup::Missing));
    assert_eq!(l.records(), Ok(1), "only the scope is stored");
    assert_eq!(l.unacked(&LIMITS, &sid("s")), Ok(Unacked::default()));
}

/// An attach refused for want of a slot writes no scope.
pub fn a_refused_attach_writes_no_scope<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "a", 1, "t").unwrap();
    attach(&l, "b", 1, "t").unwrap();
    assert_eq!(
        attach(&l, "c", 1, "t"),
        Err(LedgerError::CapacityExhausted { max: 2 })
    );
    assert_eq!(l.scope(&LIMITS, &sid("c")), Ok(None));
    assert_eq!(l.records(), Ok(2));
    assert!(matches!(
        admit(&l, &key("c", "o", 1), "t"),
        Err(LedgerError::UnknownScope { .. })
    ));
}

/// `admitted` lists only the session's running rows of the given tool,
/// ascending by key whatever the admission order.
pub fn admitted_lists_running_rows_of_the_tool_ascending<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let (a, b, x) = (key("s", "a", 1), key("s", "b", 1), key("s", "x", 1));
    admit(&l, &b, "a").unwrap();
    l.admit(&LIMITS, &x, &tool("other"), &tok("a")).unwrap();
    let admitted = |t: &str| l.admitted(&LIMITS, &sid("s"), &tool(t));
    assert_eq!(admitted("program"), Ok(vec![b.clone()]));
    assert_eq!(admitted("other"), Ok(vec![x.clone()]));
    l.finish(&LIMITS, &x, b"").unwrap();
    admit(&l, &a, "a").unwrap();
    assert_eq!(admitted("program"), Ok(vec![a.clone(), b.clone()]));
    assert_eq!(admitted("other"), Ok(vec![]));
    l.mark_unknown(&LIMITS, &b).unwrap();
    assert_eq!(admitted("program"), Ok(vec![a]));
}

/// Listed keys come back in key order (session, op, step, source index,
/// incarnation), which the data here tells apart from every plausible
/// other: insertion order, the reverse of either, and the order of the
/// keys' text (step 10 sorts before step 2 as a string, after it as a
/// number; source 10 likewise).
pub fn listed_keys_come_back_in_key_order_not_text_or_insertion_order<L: Ledger>(
    f: impl Fn() -> L,
) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let at = |op: &str, step: u32, source_index: u32| Key {
        step,
        source_index,
        ..key("s", op, 1)
    };
    // Inserted neither ascending nor descending (fences: no budget).
    let inserted = [
        at("a", 10, 0),
        at("b", 2, 0),
        at("a", 2, 10),
        at("a", 2, 2),
        at("a", 9, 0),
    ];
    let mut terminal = inserted.to_vec();
    terminal.sort();
    assert_eq!(
        terminal,
        vec![
            at("a", 2, 2),
            at("a", 2, 10),
            at("a", 9, 0),
            at("a", 10, 0),
            at("b", 2, 0)
        ],
        "Key's own order"
    );
    for k in &inserted {
        assert_eq!(l.query_or_fence(&LIMITS, k, b"f"), Ok(Fencing::Fenced));
    }
    // Two admissions (the budget's room): step 10 first, then step 2.
    let (ten, two) = (at("c", 10, 0), at("c", 2, 0));
    admit(&l, &ten, "a").unwrap();
    admit(&l, &two, "a").unwrap();
    assert_eq!(
        l.admitted(&LIMITS, &sid("s"), &tool("program")),
        Ok(vec![two.clone(), ten.clone()]),
        "admitted: key order"
    );
    l.mark_unknown(&LIMITS, &ten).unwrap();
    l.mark_unknown(&LIMITS, &two).unwrap();
    assert_eq!(
        l.unacked(&LIMITS, &sid("s")),
        Ok(Unacked {
            terminal,
            unknown: vec![two, ten],
        }),
        "unacked: key order"
    );
}

/// The release log reads in release order, not by session or clock.
pub fn releases_read_in_release_order<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    for s in ["t", "s"] {
        attach(&l, s, 1, "a").unwrap();
        l.begin_close(&LIMITS, &sid(s), 1).unwrap();
    }
    let first = l.release(&LIMITS, &sid("t"), 50).unwrap();
    let second = l.release(&LIMITS, &sid("s"), 10).unwrap();
    assert_eq!(l.releases(&LIMITS), Ok(vec![first, second]));
}

/// Fences skip the byte budget: with the budget full, a fence still
/// settles a missing key (its outcome then counts against later admissions).
pub fn fences_skip_the_byte_budget<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    admit(&l, &key("s", "a", 1), "a").unwrap();
    admit(&l, &key("s", "b", 1), "a").unwrap();
    let fenced = key("s", "f", 1);
    assert_eq!(
        l.query_or_fence(&LIMITS, &fenced, &[9; 16]),
        Ok(Fencing::Fenced)
    );
    assert_eq!(
        l.query(&LIMITS, &fenced),
        Ok(Lookup::Found(CallState::Terminal(vec![9; 16])))
    );
    assert!(matches!(
        admit(&l, &key("s", "c", 1), "a"),
        Err(LedgerError::BudgetExhausted { used: 48, .. })
    ));
}

/// Reopening a clean scope takes an unclean slot like creating one: with
/// every slot taken it is refused, and it succeeds once a slot is free.
pub fn a_reopen_needs_a_free_slot<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "a", 1, "t").unwrap();
    close(&l, "a", 1).unwrap();
    attach(&l, "b", 1, "t").unwrap();
    attach(&l, "c", 1, "t").unwrap();
    assert_eq!(
        attach(&l, "a", 2, "t"),
        Err(LedgerError::CapacityExhausted { max: 2 })
    );
    assert_eq!(
        l.scope(&LIMITS, &sid("a")).unwrap().unwrap().state,
        ScopeState::Closed(CloseOutcome::AllRetired)
    );
    close(&l, "b", 1).unwrap();
    attach(&l, "a", 2, "t").unwrap();
}

/// An attach never takes over a `Closing` scope: at its incarnation it is
/// `ScopeClosing`, and the scope stays `Closing`.
pub fn attach_refuses_a_closing_scope<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    l.begin_close(&LIMITS, &sid("s"), 1).unwrap();
    assert_eq!(attach(&l, "s", 1, "b"), Err(LedgerError::ScopeClosing));
    let s = l.scope(&LIMITS, &sid("s")).unwrap().unwrap();
    assert_eq!((s.state, s.attach_token), (ScopeState::Closing, tok("a")));
    assert!(matches!(
        attach(&l, "s", 2, "b"),
        Err(LedgerError::NotReopenable { .. })
    ));
}

/// `mark_unknown` settles only a running call: a terminal one is
/// `NotAdmitted` and keeps its outcome; an acknowledged one is
/// `NotAdmitted(Acked)`; an unknown key is `UnknownCall`.
pub fn mark_unknown_refuses_settled_calls<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    admit(&l, &k, "a").unwrap();
    l.finish(&LIMITS, &k, b"r").unwrap();
    assert_eq!(
        l.mark_unknown(&LIMITS, &k),
        Err(LedgerError::NotAdmitted {
            state: CallKind::Terminal
        })
    );
    assert_eq!(
        l.query(&LIMITS, &k),
        Ok(Lookup::Found(CallState::Terminal(b"r".to_vec())))
    );
    l.ack(&LIMITS, &k).unwrap();
    assert_eq!(
        l.mark_unknown(&LIMITS, &k),
        Err(LedgerError::NotAdmitted {
            state: CallKind::Acked
        })
    );
    assert!(matches!(
        l.mark_unknown(&LIMITS, &key("s", "z", 1)),
        Err(LedgerError::UnknownCall { .. })
    ));
}

/// A closed handle answers `HandleClosed`.
pub fn a_closed_handle_refuses<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    l.close().unwrap();
    assert_eq!(
        l.query(&LIMITS, &key("s", "o", 1)),
        Err(LedgerError::HandleClosed)
    );
}

// ------------------------------------------------------------ reopen cases

/// Everything the port shows of the stores the reopen cases write: the
/// record count, both sessions' scopes and unacknowledged keys, every key's
/// lookup and the release log.
type Seen = (
    u64,
    Vec<Option<custos_core::ledger::Scope>>,
    Vec<Unacked>,
    Vec<Lookup>,
    Vec<custos_core::ledger::Release>,
);

const SESSIONS: [&str; 2] = ["s", "t"];
const KEYS: [(&str, &str); 5] = [("s", "a"), ("s", "b"), ("s", "c"), ("t", "a"), ("s", "z")];

fn seen<L: Ledger>(l: &L) -> Seen {
    (
        l.records().unwrap(),
        SESSIONS
            .iter()
            .map(|s| l.scope(&LIMITS, &sid(s)).unwrap())
            .collect(),
        SESSIONS
            .iter()
            .map(|s| l.unacked(&LIMITS, &sid(s)).unwrap())
            .collect(),
        KEYS.iter()
            .map(|(s, o)| l.query(&LIMITS, &key(s, o, 1)).unwrap())
            .collect(),
        l.releases(&LIMITS).unwrap(),
    )
}

/// A settled history: an acknowledged call, a terminal one, an unknown one,
/// a second session closed uncleanly and released, and last of all one
/// more settled call (the write a store that loses its tail would lose).
fn settled_history<L: Ledger>(l: &L) {
    attach(l, "s", 1, "a").unwrap();
    let (a, b, c) = (key("s", "a", 1), key("s", "b", 1), key("s", "c", 1));
    admit(l, &a, "a").unwrap();
    l.finish(&LIMITS, &a, b"one").unwrap();
    l.ack(&LIMITS, &a).unwrap();
    admit(l, &b, "a").unwrap();
    l.finish(&LIMITS, &b, b"sixteen bytes ok").unwrap();
    attach(l, "t", 1, "b").unwrap();
    let t = key("t", "a", 1);
    admit(l, &t, "b").unwrap();
    l.mark_unknown(&LIMITS, &t).unwrap();
    l.begin_close(&LIMITS, &sid("t"), 1).unwrap();
    l.finish_close(&LIMITS, &sid("t"), 1).unwrap();
    l.release(&LIMITS, &sid("t"), 77).unwrap();
    admit(l, &c, "a").unwrap();
    l.finish(&LIMITS, &c, b"the last outcome").unwrap();
}

/// Everything acknowledged survives a drop and a reopen: the second handle
/// shows exactly what the first showed, the last write included.
pub fn acknowledged_writes_survive_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: Ledger,
{
    let place = f();
    let (l, _, before) = crate::open_with_history(&place, settled_history, seen);
    assert_eq!(
        before.3[2],
        Lookup::Found(CallState::Terminal(b"the last outcome".to_vec()))
    );
    drop(l);
    let l = place.open();
    assert_eq!(seen(&l), before, "the reopened store differs");
    drop(l);
    assert_eq!(seen(&place.open()), before, "a second reopen differs");
}

/// Opening is restart recovery: a call left `admitted` by the last handle is
/// `unknown` to the next one (its outcome can no longer be known), settled
/// calls are untouched, the key is never admitted again, and the recovered
/// state itself survives the next reopen.
pub fn opening_recovers_admitted_calls_as_unknown<P: Place>(f: impl Fn() -> P)
where
    P::Store: Ledger,
{
    let place = f();
    let l = place.open();
    attach(&l, "s", 1, "a").unwrap();
    let (a, b) = (key("s", "a", 1), key("s", "b", 1));
    admit(&l, &a, "a").unwrap();
    admit(&l, &b, "a").unwrap();
    l.finish(&LIMITS, &b, b"r").unwrap();
    drop(l);
    let l = place.open();
    assert_eq!(
        l.query(&LIMITS, &a),
        Ok(Lookup::Found(CallState::Unknown)),
        "open did not recover the admitted call"
    );
    assert_eq!(
        l.query(&LIMITS, &b),
        Ok(Lookup::Found(CallState::Terminal(b"r".to_vec())))
    );
    assert_eq!(
        admit(&l, &a, "a"),
        Ok(Admission::Existing(CallState::Unknown))
    );
    assert_eq!(l.recover(), Ok(0), "recovery left an admitted row");
    drop(l);
    let l = place.open();
    assert_eq!(l.query(&LIMITS, &a), Ok(Lookup::Found(CallState::Unknown)));
    assert_eq!(l.unacked(&LIMITS, &sid("s")).unwrap().unknown, vec![a]);
}

/// A refused request leaves the stored state as it was, across a reopen:
/// a second workspace, a stale token and an exhausted budget change
/// nothing a later handle can see.
pub fn a_refusal_leaves_the_store_unchanged_across_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: Ledger,
{
    let place = f();
    let (l, _, before) = crate::open_with_history(&place, settled_history, seen);
    assert!(l
        .attach(&LIMITS, &sid("s"), &ws("other"), 1, &tok("a"))
        .is_err());
    assert!(admit(&l, &key("s", "z", 1), "stale").is_err());
    // 16 + 16 bytes of outcomes held, and one more reservation of 16 is
    // over the budget of 40.
    assert!(matches!(
        admit(&l, &key("s", "z", 1), "a"),
        Err(LedgerError::BudgetExhausted { .. })
    ));
    drop(l);
    let l = place.open();
    assert_eq!(seen(&l), before, "a refusal changed the stored state");
    assert_eq!(
        l.query(&LIMITS, &key("s", "z", 1)),
        Ok(Lookup::Missing),
        "a refused admission was stored"
    );
}

/// A closed handle refuses every request, and a handle opened after it
/// works and sees what the closed one wrote.
pub fn a_closed_handle_refuses_and_a_reopened_one_works<P: Place>(f: impl Fn() -> P)
where
    P::Store: Ledger,
{
    let place = f();
    let (l, _, before) = crate::open_with_history(&place, settled_history, seen);
    l.close().unwrap();
    assert_eq!(l.records(), Err(LedgerError::HandleClosed));
    assert_eq!(
        attach(&l, "u", 1, "a"),
        Err(LedgerError::HandleClosed),
        "a closed handle wrote"
    );
    drop(l);
    let l = place.open();
    assert_eq!(seen(&l), before);
    attach(&l, "u", 1, "a").unwrap();
    drop(l);
    assert!(place.open().scope(&LIMITS, &sid("u")).unwrap().is_some());
}

fn admit_as<L: Ledger>(l: &L, k: &Key, t: &str, id: &str) -> Result<Admission, LedgerError> {
    let id = RequestId::new(id).expect("valid request literal");
    l.admit_once(&LIMITS, k, &tool("program"), &tok(t), &id)
}

/// A lost reply to an admission: the same request again (its own
/// [`RequestId`]) is answered `Fresh` — what the lost reply said — and
/// writes nothing, while the row it inserted is still `admitted`; any other
/// admission of the key is `Existing(Admitted)`; a close begun since does
/// not take the `Fresh` back; once a stop settled the row the retry is
/// refused like any other admission and the call must not start. The
/// request id is kept by the store, not the handle: a second handle on the
/// same store recognises it too (where the factory shares one).
pub fn a_retried_admission_gets_its_own_fresh<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    assert_eq!(admit_as(&l, &k, "a", "r-1"), Ok(Admission::Fresh));
    let records = l.records().unwrap();
    assert_eq!(
        admit_as(&l, &k, "a", "r-1"),
        Ok(Admission::Fresh),
        "the retry of a lost Fresh was not its own answer"
    );
    assert_eq!(l.records(), Ok(records), "a recognised retry wrote a row");
    assert_eq!(
        admit_as(&l, &k, "a", "r-2"),
        Ok(Admission::Existing(CallState::Admitted)),
        "another request's admission of a running key was Fresh"
    );
    assert_eq!(
        admit(&l, &k, "a"),
        Ok(Admission::Existing(CallState::Admitted))
    );
    // A close begun after the lost reply does not take the Fresh back.
    l.begin_close(&LIMITS, &sid("s"), 1).unwrap();
    assert_eq!(admit_as(&l, &k, "a", "r-1"), Ok(Admission::Fresh));
    assert_eq!(
        admit_as(&l, &key("s", "n", 1), "a", "r-3"),
        Err(LedgerError::ScopeClosing)
    );
    // Once a stop settled the row, the retry is an admission like any
    // other — here into a closing scope — and must not start the call.
    assert_eq!(
        l.stop_or_fence(&LIMITS, &k, &tool("program")),
        Ok(Stopping::Stopped)
    );
    assert_eq!(admit_as(&l, &k, "a", "r-1"), Err(LedgerError::ScopeClosing));
}

/// A lost reply to a `finish`: the same outcome again is answered
/// `Finished` and writes nothing; another outcome is refused
/// `NotAdmitted { Terminal }`, and so is a `finish` of a fenced key
/// whatever its bytes (the fence's row is not the caller's write).
pub fn a_retried_finish_is_finished<L: Ledger>(f: impl Fn() -> L) {
    let l = f();
    attach(&l, "s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    admit(&l, &k, "a").unwrap();
    l.finish(&LIMITS, &k, b"done").unwrap();
    assert_eq!(
        l.finish(&LIMITS, &k, b"done"),
        Ok(()),
        "the retry of a stored finish was refused"
    );
    assert_eq!(
        l.query(&LIMITS, &k),
        Ok(Lookup::Found(CallState::Terminal(b"done".to_vec())))
    );
    assert_eq!(
        l.finish(&LIMITS, &k, b"other"),
        Err(LedgerError::NotAdmitted {
            state: CallKind::Terminal
        })
    );
    let fenced = key("s", "f", 1);
    l.query_or_fence(&LIMITS, &fenced, b"done").unwrap();
    assert_eq!(
        l.finish(&LIMITS, &fenced, b"done"),
        Err(LedgerError::NotAdmitted {
            state: CallKind::Terminal
        }),
        "a finish was answered by a fence's row"
    );
}

/// Every case name, in the order the macro emits them.
pub const LEDGER_CASES: &[&str] = &crate::__with_ledger_cases!(__emit_names!());

/// One case as a runtime value.
pub type LedgerCase<L> = fn(&dyn Fn() -> L);

/// Every case as `(name, case)`, for a harness that runs a subset or reports
/// per case.
pub fn ledger_cases<L: Ledger>() -> Vec<(&'static str, LedgerCase<L>)> {
    crate::__with_ledger_cases!(__emit_table!(ledger, L))
}

/// Every reopen case name, in the order the macro emits them.
pub const LEDGER_REOPEN_CASES: &[&str] = &crate::__with_ledger_reopen_cases!(__emit_names!());

/// Every reopen case as `(name, case)`; each takes a factory of places.
pub fn ledger_reopen_cases<P: Place>() -> Vec<(&'static str, LedgerCase<P>)>
where
    P::Store: Ledger,
{
    crate::__with_ledger_reopen_cases!(__emit_table!(ledger, P))
}

/// Invokes `$crate::$callback! { ($args) case, … }` with every ledger
/// reopen case.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_ledger_reopen_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            acknowledged_writes_survive_a_reopen,
            opening_recovers_admitted_calls_as_unknown,
            a_refusal_leaves_the_store_unchanged_across_a_reopen,
            a_closed_handle_refuses_and_a_reopened_one_works,
        }
    };
}

/// Invokes `$crate::$callback! { ($args) case, … }` with every ledger case.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_ledger_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            fresh_ledger_is_empty,
            every_row_is_an_activity_record,
            attach_creates_an_open_scope,
            attach_refuses_a_second_workspace,
            admit_is_fresh_exactly_once,
            a_stale_token_is_refused,
            a_stale_incarnation_is_refused,
            admit_needs_a_scope,
            finish_round_trips_the_outcome,
            an_acknowledged_key_is_never_admitted_again_in_its_incarnation,
            ack_refuses_running_and_missing_calls,
            a_fence_with_no_row_inserts_a_terminal_row_and_blocks_admission,
            a_stop_with_no_row_bars_the_key_from_a_later_start,
            recovery_marks_admitted_rows_unknown,
            the_byte_budget_is_enforced,
            a_clean_close_reopens_at_the_next_incarnation,
            an_unclean_close_needs_a_release,
            release_refuses_open_and_clean_scopes,
            unclean_scopes_are_bounded,
            unacked_lists_terminal_and_unknown_keys_and_changes_nothing,
            terminal_outcomes_hold_their_bytes_until_acked,
            a_stale_token_is_refused_for_an_existing_key,
            fences_at_a_stale_incarnation_are_refused,
            a_refused_attach_writes_no_scope,
            admitted_lists_running_rows_of_the_tool_ascending,
            listed_keys_come_back_in_key_order_not_text_or_insertion_order,
            releases_read_in_release_order,
            fences_skip_the_byte_budget,
            a_reopen_needs_a_free_slot,
            attach_refuses_a_closing_scope,
            mark_unknown_refuses_settled_calls,
            a_closed_handle_refuses,
            a_retried_admission_gets_its_own_fresh,
            a_retried_finish_is_finished,
        }
    };
}

/// Emits `mod $name { #[test] fn <case>() … }`: one test per ledger
/// conformance case, each calling the case with `$factory` (`Fn() -> L`,
/// `L: Ledger`, returning a fresh, empty, opened ledger), and one per reopen
/// case, each calling it with `$places` (`Fn() -> P`, `P: `[`crate::Place`]
/// opening a ledger: a fresh store per call, opened again by every
/// [`crate::Place::open`]).
#[macro_export]
macro_rules! ledger_suite {
    ($name:ident, $factory:expr, reopen: $places:expr $(,)?) => {
        $crate::__suite!(
            __with_ledger_cases,
            __with_ledger_reopen_cases,
            ledger,
            $name,
            $factory,
            $places
        );
    };
}
