//! The custody conformance suite: the compare-and-set transitions of
//! `begin_move`, `finish_move`, `abort_move` and `import_session` through
//! the [`Catalogue`] port, keyed by op, with their repeats, refusals, the
//! revision, `moving`, and `delete`. Cases that need two catalogues call the
//! factory twice: catalogues are separate databases.
//!
//! Cases panic (via `assert!`) on a violation: they are test bodies.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use custos_core::catalogue::custody::{Custody, MoveOp, Peer};
use custos_core::catalogue::{Catalogue, Creation, InitState, Outcome, Request};

use crate::catalogue::{ok, refused, reserve};
use crate::Place;

/// The session every case moves.
pub const SESSION: &str = "sess-1";

#[track_caller]
fn op(s: &str) -> MoveOp {
    MoveOp::new(s).expect("valid op literal")
}

#[track_caller]
fn peer(s: &str) -> Peer {
    Peer::new(s).expect("valid peer literal")
}

fn creation() -> Creation {
    Creation::local("key-1", "moved session", "/work")
}

/// `begin_move(op, to)` on [`SESSION`].
#[track_caller]
pub fn begin(o: &str, to: &str) -> Request {
    Request::BeginMove {
        session_id: SESSION.into(),
        op: op(o),
        to: peer(to),
    }
}

/// `finish_move(op)` on [`SESSION`].
#[track_caller]
pub fn finish(o: &str) -> Request {
    Request::FinishMove {
        session_id: SESSION.into(),
        op: op(o),
    }
}

/// `abort_move(op)` on [`SESSION`].
#[track_caller]
pub fn abort(o: &str) -> Request {
    Request::AbortMove {
        session_id: SESSION.into(),
        op: op(o),
    }
}

/// `import_session(op, from)` on [`SESSION`].
#[track_caller]
pub fn import(o: &str, from: &str) -> Request {
    Request::ImportSession {
        session_id: SESSION.into(),
        creation: creation(),
        op: op(o),
        from: peer(from),
        now: 5,
    }
}

#[track_caller]
fn moving(o: &str, t: &str) -> Custody {
    Custody::Moving {
        op: op(o),
        to: peer(t),
    }
}

#[track_caller]
fn moved(o: &str, t: &str) -> Custody {
    Custody::Moved {
        op: op(o),
        to: peer(t),
    }
}

#[track_caller]
fn imported(o: &str, f: &str) -> Custody {
    Custody::Imported {
        op: op(o),
        from: peer(f),
    }
}

/// Applies `req` and requires the custody answer and change flag, and that
/// the revision moved by exactly one when a row changed and not otherwise.
#[track_caller]
pub fn expect<C: Catalogue>(c: &C, req: Request, custody: Custody, changed: bool) {
    let before = c.revision().unwrap();
    assert_eq!(
        ok(c, req.clone()),
        Outcome::Custody {
            custody: custody.clone(),
            changed
        },
        "{req:?}"
    );
    assert_eq!(c.custody(SESSION).unwrap(), custody, "{req:?}");
    assert_eq!(
        c.revision().unwrap(),
        before + u64::from(changed),
        "{req:?}: the revision moves only when a row changes"
    );
}

#[track_caller]
fn registered<C: Catalogue, F: Fn() -> C>(factory: &F) -> C {
    let c = factory();
    reserve(&c, SESSION, creation());
    c
}

// ------------------------------------------------------------------ cases

/// A registered session is `Resident`; an unknown one is `NotFound`.
pub fn resident_by_default<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    assert_eq!(c.custody(SESSION).unwrap_err().reason(), "NotFound");
    refused(&c, begin("op-1", "cat-b"), "NotFound");
    refused(&c, finish("op-1"), "NotFound");
    refused(&c, abort("op-1"), "NotFound");
    reserve(&c, SESSION, creation());
    assert_eq!(c.custody(SESSION).unwrap(), Custody::Resident);
}

/// Source side `Resident -> Moving -> Moved`; `moving` lists the move while
/// it is `Moving`; repeats answer the stored custody and write nothing.
pub fn source_side_moves_and_repeats_write_nothing<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = registered(&factory);
    expect(&c, begin("op-1", "cat-b"), moving("op-1", "cat-b"), true);
    expect(&c, begin("op-1", "cat-b"), moving("op-1", "cat-b"), false);
    let m = c.moving().unwrap();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].session_id, SESSION);
    assert_eq!(m[0].to, peer("cat-b"));
    expect(&c, finish("op-1"), moved("op-1", "cat-b"), true);
    expect(&c, finish("op-1"), moved("op-1", "cat-b"), false);
    expect(&c, begin("op-1", "cat-b"), moved("op-1", "cat-b"), false);
    assert!(c.moving().unwrap().is_empty());
}

/// An early abort returns `Moving(op) -> Resident`; a repeat of it writes
/// nothing.
pub fn early_abort_returns_to_resident<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = registered(&factory);
    expect(&c, begin("op-1", "cat-b"), moving("op-1", "cat-b"), true);
    refused(&c, abort("op-2"), "Conflict");
    expect(&c, abort("op-1"), Custody::Resident, true);
    expect(&c, abort("op-1"), Custody::Resident, false);
    refused(&c, finish("op-1"), "Conflict");
    // A new move needs nothing else.
    expect(&c, begin("op-2", "cat-c"), moving("op-2", "cat-c"), true);
}

/// A `Moved` row cannot be undone by the op that wrote it: a late abort or
/// a late import of that move changes nothing.
pub fn late_abort_and_import_after_moved_change_nothing<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = registered(&factory);
    expect(&c, begin("op-1", "cat-b"), moving("op-1", "cat-b"), true);
    expect(&c, finish("op-1"), moved("op-1", "cat-b"), true);
    expect(&c, abort("op-1"), moved("op-1", "cat-b"), false);
    expect(&c, import("op-1", "cat-b"), moved("op-1", "cat-b"), false);
    refused(&c, abort("op-2"), "Conflict");
}

/// `begin_move` on a `Moved` session, another op on `Moving`, and a finish
/// without a move are `Conflict`.
pub fn other_ops_and_disallowed_transitions_conflict<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = registered(&factory);
    refused(&c, finish("op-1"), "Conflict");
    expect(&c, begin("op-1", "cat-b"), moving("op-1", "cat-b"), true);
    refused(&c, begin("op-2", "cat-b"), "Conflict");
    refused(&c, begin("op-1", "cat-c"), "Conflict");
    refused(&c, finish("op-2"), "Conflict");
    refused(&c, import("op-2", "cat-c"), "Conflict");
    expect(&c, finish("op-1"), moved("op-1", "cat-b"), true);
    refused(&c, begin("op-2", "cat-c"), "Conflict");
    refused(&c, finish("op-2"), "Conflict");
}

/// Target side: a never-seen session is reserved, confirmed and `Imported`
/// in one step; a repeat writes nothing; another op or source is `Conflict`.
pub fn import_registers_a_new_session<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    expect(&c, import("op-1", "cat-a"), imported("op-1", "cat-a"), true);
    let r = c.get(SESSION).unwrap().unwrap();
    assert_eq!(r.state, InitState::Saved);
    assert_eq!(r.creation, creation());
    expect(
        &c,
        import("op-1", "cat-a"),
        imported("op-1", "cat-a"),
        false,
    );
    refused(&c, import("op-2", "cat-a"), "Conflict");
    refused(&c, import("op-1", "cat-c"), "Conflict");
}

/// An import onto a session this catalogue serves (`Resident`) is
/// `Conflict`: two catalogues would serve it.
pub fn import_onto_a_resident_session_conflicts<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = registered(&factory);
    refused(&c, import("op-1", "cat-a"), "Conflict");
    assert_eq!(c.custody(SESSION).unwrap(), Custody::Resident);
}

/// A session moves onward from the catalogue that received it, with a new op.
pub fn onward_from_imported_needs_a_new_op<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    expect(&c, import("op-1", "cat-a"), imported("op-1", "cat-a"), true);
    refused(&c, begin("op-1", "cat-c"), "Conflict");
    expect(&c, begin("op-2", "cat-c"), moving("op-2", "cat-c"), true);
    expect(&c, finish("op-2"), moved("op-2", "cat-c"), true);
}

/// A session comes back to the catalogue that handed it over: an import
/// with a new op replaces the `Moved` tombstone, keeping the registration.
pub fn return_to_the_catalogue_that_handed_it_over<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = registered(&factory);
    ok(
        &c,
        Request::Rename {
            session_id: SESSION.into(),
            name: "kept".into(),
        },
    );
    expect(&c, begin("op-1", "cat-b"), moving("op-1", "cat-b"), true);
    expect(&c, finish("op-1"), moved("op-1", "cat-b"), true);
    expect(&c, import("op-2", "cat-b"), imported("op-2", "cat-b"), true);
    let r = c.get(SESSION).unwrap().unwrap();
    assert_eq!(r.creation.name, "kept", "the registration is kept");
    assert_eq!(r.state, InitState::Reserved);
}

/// `delete` refuses `Moving` and `Moved` (`Conflict`) and removes an
/// `Imported` session with its row.
pub fn delete_refuses_moving_and_moved<C: Catalogue, F: Fn() -> C>(factory: F) {
    let del = || Request::Delete {
        session_id: SESSION.into(),
    };
    let c = registered(&factory);
    expect(&c, begin("op-1", "cat-b"), moving("op-1", "cat-b"), true);
    refused(&c, del(), "Conflict");
    expect(&c, finish("op-1"), moved("op-1", "cat-b"), true);
    refused(&c, del(), "Conflict");
    assert!(c.get(SESSION).unwrap().is_some());
    let t = factory();
    expect(&t, import("op-1", "cat-a"), imported("op-1", "cat-a"), true);
    ok(&t, del());
    assert_eq!(t.custody(SESSION).unwrap_err().reason(), "NotFound");
    // Gone with its row: a fresh import is a new session here.
    expect(&t, import("op-3", "cat-a"), imported("op-3", "cat-a"), true);
}

/// A full round trip between two separate catalogues, then onward again:
/// at every step at most one of them serves the session.
pub fn round_trip_between_two_catalogues<C: Catalogue, F: Fn() -> C>(factory: F) {
    let a = registered(&factory);
    let b = factory();
    let serving = |a: &C, b: &C| {
        [a, b]
            .iter()
            .filter(|c| c.custody(SESSION).is_ok_and(|x| x.serves()))
            .count()
    };
    assert_eq!(serving(&a, &b), 1);
    let steps: Vec<(bool, Request)> = vec![
        (true, begin("op-1", "cat-b")),
        (false, import("op-1", "cat-a")),
        (true, finish("op-1")),
        (false, begin("op-2", "cat-a")),
        (true, import("op-2", "cat-b")),
        (false, finish("op-2")),
        (true, begin("op-3", "cat-b")),
        (false, import("op-3", "cat-a")),
        (true, finish("op-3")),
    ];
    for (on_a, req) in steps {
        let c = if on_a { &a } else { &b };
        ok(c, req.clone());
        assert!(serving(&a, &b) <= 1, "two serve after {req:?}");
    }
    assert_eq!(a.custody(SESSION).unwrap(), moved("op-3", "cat-b"));
    assert_eq!(b.custody(SESSION).unwrap(), imported("op-3", "cat-a"));
}

/// `moving` lists every session still `Moving`, whatever else is stored
/// (resident, received or finished sessions), and nothing else.
pub fn moving_lists_every_move_in_progress<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = registered(&factory);
    for id in ["sess-0", "sess-2", "sess-3"] {
        reserve(
            &c,
            id,
            Creation::local(&format!("key-{id}"), "other", "/work"),
        );
    }
    let begin_on = |id: &str, o: &str| Request::BeginMove {
        session_id: id.into(),
        op: op(o),
        to: peer("cat-b"),
    };
    for (id, o) in [("sess-0", "op-0"), (SESSION, "op-1"), ("sess-3", "op-3")] {
        ok(&c, begin_on(id, o));
    }
    // A received session is served here, not a move to resume.
    ok(
        &c,
        Request::ImportSession {
            session_id: "sess-9".into(),
            creation: Creation::local("key-9", "received", "/work"),
            op: op("op-9"),
            from: peer("cat-a"),
            now: 5,
        },
    );
    let mut listed: Vec<(String, String)> = c
        .moving()
        .unwrap()
        .into_iter()
        .map(|m| (m.session_id, m.op.as_str().to_owned()))
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            ("sess-0".to_owned(), "op-0".to_owned()),
            ("sess-1".to_owned(), "op-1".to_owned()),
            ("sess-3".to_owned(), "op-3".to_owned()),
        ]
    );
    ok(&c, finish("op-1"));
    assert_eq!(c.moving().unwrap().len(), 2);
}

/// A deleted session leaves no custody behind: its id registered again
/// is `Resident` and moves like any new session.
pub fn a_reused_session_id_starts_resident<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    expect(&c, import("op-1", "cat-a"), imported("op-1", "cat-a"), true);
    ok(
        &c,
        Request::Delete {
            session_id: SESSION.into(),
        },
    );
    reserve(&c, SESSION, Creation::local("key-2", "again", "/work"));
    assert_eq!(c.custody(SESSION).unwrap(), Custody::Resident);
    expect(&c, begin("op-1", "cat-b"), moving("op-1", "cat-b"), true);
}

// ------------------------------------------------------------ reopen cases

/// A handover survives restarts on both sides: a move begun before a
/// reopen is still `Moving` after it, its repeat changes nothing, and it
/// finishes after the reopen; the receiving catalogue's import survives
/// its own reopen, and a repeat of the import changes nothing there.
pub fn a_handover_survives_a_reopen_on_both_sides<P: Place>(f: impl Fn() -> P)
where
    P::Store: Catalogue,
{
    let (a_place, b_place) = (f(), f());
    let a = a_place.open();
    reserve(&a, SESSION, creation());
    expect(&a, begin("op-1", "cat-b"), moving("op-1", "cat-b"), true);
    let rev = a.revision().unwrap();
    drop(a);
    let a = a_place.open();
    assert_eq!(a.revision().unwrap(), rev);
    expect(&a, begin("op-1", "cat-b"), moving("op-1", "cat-b"), false);
    let b = b_place.open();
    expect(&b, import("op-1", "cat-a"), imported("op-1", "cat-a"), true);
    drop(b);
    let b = b_place.open();
    assert_eq!(b.custody(SESSION).unwrap(), imported("op-1", "cat-a"));
    expect(
        &b,
        import("op-1", "cat-a"),
        imported("op-1", "cat-a"),
        false,
    );
    expect(&a, finish("op-1"), moved("op-1", "cat-b"), true);
    drop(a);
    let a = a_place.open();
    assert_eq!(a.custody(SESSION).unwrap(), moved("op-1", "cat-b"));
    assert!(a.moving().unwrap().is_empty(), "a finished move is listed");
}

/// A refused transition leaves custody unchanged across a reopen: another
/// op's finish and a delete of a moving session change nothing a later
/// handle sees.
pub fn a_refused_transition_leaves_custody_unchanged_across_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: Catalogue,
{
    let place = f();
    let c = place.open();
    reserve(&c, SESSION, creation());
    expect(&c, begin("op-1", "cat-b"), moving("op-1", "cat-b"), true);
    let before = (c.revision().unwrap(), c.moving().unwrap());
    refused(&c, finish("op-2"), "Conflict");
    assert!(c
        .apply(&Request::Delete {
            session_id: SESSION.into()
        })
        .is_err());
    drop(c);
    let c = place.open();
    assert_eq!((c.revision().unwrap(), c.moving().unwrap()), before);
    assert_eq!(c.custody(SESSION).unwrap(), moving("op-1", "cat-b"));
}

/// Every custody case, by name, in suite order.
pub const CUSTODY_CASES: &[&str] = &crate::__with_custody_cases!(__emit_names!());

/// One custody case as a plain function of a factory.
pub type CustodyCase<C> = fn(&dyn Fn() -> C);

/// Every case as `(name, case)`, for a harness that runs a subset or reports
/// per case (run each under `std::panic::catch_unwind`).
pub fn custody_cases<C: Catalogue>() -> Vec<(&'static str, CustodyCase<C>)> {
    crate::__with_custody_cases!(__emit_table!(custody, C))
}

/// Every reopen case, by name, in suite order.
pub const CUSTODY_REOPEN_CASES: &[&str] = &crate::__with_custody_reopen_cases!(__emit_names!());

/// Every reopen case as `(name, case)`; each takes a factory of places.
pub fn custody_reopen_cases<P: Place>() -> Vec<(&'static str, CustodyCase<P>)>
where
    P::Store: Catalogue,
{
    crate::__with_custody_reopen_cases!(__emit_table!(custody, P))
}

/// Emits `mod $name { #[test] fn <case>() … }`: one test per custody
/// conformance case, each calling the case with `$factory` (evaluated once
/// per test; every call must give a fresh, empty, separate catalogue), and
/// one per reopen case, each calling it with `$places` (`Fn() -> P`,
/// `P: `[`crate::Place`] opening a catalogue: a fresh store per call,
/// reopened by each `open`).
#[macro_export]
macro_rules! custody_suite {
    ($name:ident, $factory:expr, reopen: $places:expr $(,)?) => {
        $crate::__suite!(
            __with_custody_cases,
            __with_custody_reopen_cases,
            custody,
            $name,
            $factory,
            $places
        );
    };
}

/// Invokes `$crate::$callback! { ($args) case, … }` with every custody
/// reopen case.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_custody_reopen_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            a_handover_survives_a_reopen_on_both_sides,
            a_refused_transition_leaves_custody_unchanged_across_a_reopen,
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __with_custody_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            resident_by_default,
            source_side_moves_and_repeats_write_nothing,
            early_abort_returns_to_resident,
            late_abort_and_import_after_moved_change_nothing,
            other_ops_and_disallowed_transitions_conflict,
            import_registers_a_new_session,
            import_onto_a_resident_session_conflicts,
            onward_from_imported_needs_a_new_op,
            return_to_the_catalogue_that_handed_it_over,
            delete_refuses_moving_and_moved,
            round_trip_between_two_catalogues,
            moving_lists_every_move_in_progress,
            a_reused_session_id_starts_resident,
        }
    };
}
