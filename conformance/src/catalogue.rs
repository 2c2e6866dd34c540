//! The catalogue conformance suite: one public generic function per
//! behaviour of the [`Catalogue`] port (registrations, the name grammars,
//! the workspace split, visibility, display names, subtitles, recent
//! folders, the revision, deletion marks and delegates). Custody has its own
//! suite ([`crate::custody`]).
//!
//! Cases panic (via `assert!`) on a violation: they are test bodies.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use crate::Place;
use custos_core::catalogue::{
    Catalogue, CatalogueError, Claim, Creation, Deletion, InitState, Outcome, Registration,
    Request, Visibility, RECENT_FOLDER_LIMIT,
};

// ------------------------------------------------------------------ helpers

/// Applies a request, requiring success.
#[track_caller]
pub fn ok<C: Catalogue>(c: &C, req: Request) -> Outcome {
    match c.apply(&req) {
        Ok(o) => o,
        Err(e) => panic!("{req:?} refused: {e}"),
    }
}

/// Applies a request, requiring a refusal with `reason`; checks that the
/// refusal moved nothing (revision).
#[track_caller]
pub fn refused<C: Catalogue>(c: &C, req: Request, reason: &str) -> CatalogueError {
    let before = c.revision().unwrap();
    match c.apply(&req) {
        Ok(o) => panic!("{req:?} accepted ({o:?}); expected {reason}"),
        Err(e) => {
            assert_eq!(e.reason(), reason, "{req:?}: {e}");
            assert_eq!(
                c.revision().unwrap(),
                before,
                "a refusal moved the revision"
            );
            e
        }
    }
}

/// A local creation in workspace `/w`.
pub fn local(key: &str) -> Creation {
    Creation::local(key, &format!("name {key}"), "/w")
}

/// A registered creation on executor `exec-1`, workspace `proj`.
pub fn on_executor(key: &str) -> Creation {
    Creation {
        executor: Some("exec-1".into()),
        workspace: "proj".into(),
        ..local(key)
    }
}

/// A pooled creation in pool `pool-1`, workspace `proj`.
pub fn pooled(key: &str) -> Creation {
    Creation {
        pool: Some("pool-1".into()),
        workspace: "proj".into(),
        ..local(key)
    }
}

/// A `Reserve` of session `id` at `now`.
pub fn reserve_req(id: &str, creation: Creation, now: u64) -> Request {
    Request::Reserve {
        session_id: id.into(),
        creation,
        now,
    }
}

/// Reserves `id` with `creation`.
#[track_caller]
pub fn reserve<C: Catalogue>(c: &C, id: &str, creation: Creation) -> Registration {
    match ok(c, reserve_req(id, creation, 1_000)) {
        Outcome::Reserved { registration, .. } => registration,
        other => panic!("reserve answered {other:?}"),
    }
}

#[track_caller]
fn changed(o: &Outcome) -> bool {
    match o {
        Outcome::Done { changed }
        | Outcome::Subtitle { changed, .. }
        | Outcome::Custody { changed, .. } => *changed,
        other => panic!("no change flag in {other:?}"),
    }
}

/// Remembers `path`, requiring success; the new row's id.
#[track_caller]
fn remembered<C: Catalogue>(c: &C, path: &str) -> u64 {
    match ok(c, Request::RememberFolder { path: path.into() }) {
        Outcome::Remembered(r) => r.id,
        other => panic!("remember answered {other:?}"),
    }
}

fn rename(id: &str, name: &str) -> Request {
    Request::Rename {
        session_id: id.into(),
        name: name.into(),
    }
}

fn claim(spawner: &str, parent: &str, id: &str, now: u64, limit: u32) -> Request {
    Request::ClaimDelegate {
        spawner: spawner.into(),
        parent_session: parent.into(),
        session_id: id.into(),
        now,
        limit,
    }
}

// ------------------------------------------------------------------ cases

/// A fresh catalogue holds nothing at revision 0.
pub fn fresh_catalogue_is_empty<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    assert_eq!(c.revision().unwrap(), 0);
    assert!(c
        .page(Visibility::Active, None, 100)
        .unwrap()
        .registrations
        .is_empty());
    assert!(c
        .page(Visibility::Archived, None, 100)
        .unwrap()
        .registrations
        .is_empty());
    assert!(c.recent_folders().unwrap().is_empty());
    assert!(c.moving().unwrap().is_empty());
    assert!(c.deleting().unwrap().is_empty());
    assert_eq!(c.get("s1").unwrap(), None);
    assert_eq!(c.by_request_key("k1").unwrap(), None);
}

/// `reserve` creates a `Reserved`, active registration and moves the revision.
pub fn reserve_creates_a_reserved_registration<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    let r = reserve(&c, "s1", local("k1"));
    assert_eq!(r.session_id, "s1");
    assert_eq!(r.state, InitState::Reserved);
    assert_eq!(r.visibility, Visibility::Active);
    assert_eq!(r.created_at_ms, 1_000);
    assert_eq!(r.creation, local("k1"));
    assert_eq!(c.revision().unwrap(), 1);
    assert_eq!(c.get("s1").unwrap(), Some(r.clone()));
    assert_eq!(c.by_request_key("k1").unwrap(), Some(r));
}

/// A retry with the same creation key answers the original registration —
/// its id and timestamp, not the retry's — and writes nothing.
pub fn reserve_retry_answers_the_original<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    let first = reserve(&c, "s1", local("k1"));
    let out = ok(&c, reserve_req("s2", local("k1"), 9_999));
    assert_eq!(
        out,
        Outcome::Reserved {
            registration: first,
            created: false
        }
    );
    assert_eq!(c.revision().unwrap(), 1);
    assert_eq!(c.get("s2").unwrap(), None);
}

/// A retry that differs in name, workspace, profile, model, executor or pool
/// is `Conflict`.
pub fn reserve_retry_that_differs_conflicts<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "s1", local("k1"));
    let variants = [
        Creation {
            name: "other".into(),
            ..local("k1")
        },
        Creation {
            workspace: "/other".into(),
            ..local("k1")
        },
        Creation {
            profile: Some("fast".into()),
            ..local("k1")
        },
        Creation {
            model: Some("gpt".into()),
            ..local("k1")
        },
        Creation {
            executor: Some("exec-1".into()),
            workspace: "w".into(),
            ..local("k1")
        },
        Creation {
            pool: Some("pool-1".into()),
            workspace: "w".into(),
            ..local("k1")
        },
    ];
    for creation in variants {
        refused(&c, reserve_req("s2", creation, 2), "Conflict");
    }
}

/// A new creation key with a session id already taken is `Conflict`.
pub fn reserve_with_a_taken_session_id_conflicts<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "s1", local("k1"));
    refused(&c, reserve_req("s1", local("k2"), 2), "Conflict");
}

/// A pooled registration's retry compares the pool, not the executor
/// seeded after its first attach; the executor is seeded once.
pub fn pooled_retry_compares_the_pool_not_the_executor<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "s1", pooled("k1"));
    let seed = |e: &str| Request::SeedExecutor {
        session_id: "s1".into(),
        executor: e.into(),
    };
    assert!(changed(&ok(&c, seed("exec-2"))));
    assert!(!changed(&ok(&c, seed("exec-2"))));
    refused(&c, seed("exec-3"), "Conflict");
    refused(&c, seed("Bad"), "Invalid");
    let r = reserve(&c, "s9", pooled("k1"));
    assert_eq!(r.session_id, "s1");
    assert_eq!(r.creation.executor.as_deref(), Some("exec-2"));
    // A local session has no executor to seed.
    reserve(&c, "s2", local("k2"));
    refused(
        &c,
        Request::SeedExecutor {
            session_id: "s2".into(),
            executor: "exec-1".into(),
        },
        "Conflict",
    );
}

/// Every name grammar refuses with `Invalid`, before anything is written.
pub fn name_grammars_refuse_invalid<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    let bad = [
        Creation {
            profile: Some("Fast".into()),
            ..local("k1")
        },
        Creation {
            profile: Some("a".repeat(33)),
            ..local("k1")
        },
        Creation {
            model: Some("m".repeat(65)),
            ..local("k1")
        },
        Creation {
            model: Some(String::new()),
            ..local("k1")
        },
        Creation {
            executor: Some("9exec".into()),
            ..on_executor("k1")
        },
        Creation {
            pool: Some("pool one".into()),
            ..pooled("k1")
        },
        Creation {
            creation_key: String::new(),
            ..local("k1")
        },
        Creation {
            name: "  ".into(),
            ..local("k1")
        },
    ];
    for creation in bad {
        refused(&c, reserve_req("s1", creation, 1), "Invalid");
    }
    refused(&c, reserve_req("bad id/", local("k1"), 1), "Invalid");
    assert_eq!(c.get("s1").unwrap(), None);
}

/// A local workspace is an absolute path; a registered (executor or pooled)
/// one is a name (no `/`, no NUL, 1..=128 bytes). The two cannot overlap.
pub fn workspace_split_local_and_registered<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    for creation in [
        Creation::local("k1", "n", "relative"),
        Creation {
            workspace: "/abs".into(),
            ..on_executor("k1")
        },
        Creation {
            workspace: "a".repeat(129),
            ..on_executor("k1")
        },
        Creation {
            workspace: "/abs".into(),
            ..pooled("k1")
        },
    ] {
        refused(&c, reserve_req("s1", creation, 1), "Invalid");
    }
    assert_eq!(
        reserve(&c, "s1", on_executor("k1")).creation.workspace,
        "proj"
    );
    assert_eq!(reserve(&c, "s2", local("k2")).creation.workspace, "/w");
}

/// A workspace default names a local session of that workspace; a
/// registered session is `Conflict`; an unchanged default writes nothing.
pub fn workspace_default_rules<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "s1", local("k1"));
    reserve(&c, "s2", on_executor("k2"));
    reserve(&c, "s3", Creation::local("k3", "n", "/elsewhere"));
    let set = |ws: &str, id: &str| Request::SetWorkspaceDefault {
        workspace: ws.into(),
        session_id: id.into(),
    };
    assert_eq!(c.workspace_default("/w").unwrap(), None);
    assert!(changed(&ok(&c, set("/w", "s1"))));
    let rev = c.revision().unwrap();
    assert!(!changed(&ok(&c, set("/w", "s1"))));
    assert_eq!(c.revision().unwrap(), rev);
    assert_eq!(c.workspace_default("/w").unwrap().as_deref(), Some("s1"));
    refused(&c, set("proj", "s2"), "Conflict");
    refused(&c, set("/w", "s3"), "Conflict");
    refused(&c, set("/w", "nope"), "NotFound");
}

/// Archiving moves a session from active pages to archived pages, clears a
/// workspace default naming it, and moves the revision; restoring keeps its
/// creation key, name and subtitle but not the default.
pub fn archive_and_restore<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "s1", local("k1"));
    reserve(&c, "s2", local("k2"));
    ok(
        &c,
        Request::SetWorkspaceDefault {
            workspace: "/w".into(),
            session_id: "s1".into(),
        },
    );
    let vis = |v| Request::SetVisibility {
        session_id: "s1".into(),
        visibility: v,
    };
    let rev = c.revision().unwrap();
    assert!(changed(&ok(&c, vis(Visibility::Archived))));
    assert_eq!(c.revision().unwrap(), rev + 1);
    assert!(!changed(&ok(&c, vis(Visibility::Archived))));
    assert_eq!(c.revision().unwrap(), rev + 1);
    let active = c.page(Visibility::Active, None, 1).unwrap();
    assert_eq!(active.registrations.len(), 1);
    assert_eq!(active.registrations[0].session_id, "s2");
    assert!(!active.more, "archived rows are excluded before the limit");
    let archived = c.page(Visibility::Archived, None, 10).unwrap();
    assert_eq!(archived.registrations[0].session_id, "s1");
    assert_eq!(archived.revision, c.revision().unwrap());
    assert_eq!(c.workspace_default("/w").unwrap(), None);
    assert!(changed(&ok(&c, vis(Visibility::Active))));
    let r = c.get("s1").unwrap().unwrap();
    assert_eq!(r.creation, local("k1"));
    assert_eq!(r.visibility, Visibility::Active);
    assert_eq!(
        c.workspace_default("/w").unwrap(),
        None,
        "restore does not restore defaults"
    );
    assert_eq!(c.by_request_key("k1").unwrap().unwrap().session_id, "s1");
}

/// `rename` writes an override that display reads join; `by_request_key`
/// and a reserve retry keep the creation name; the same name writes nothing.
pub fn rename_overrides_the_display_name<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "s1", local("k1"));
    assert!(changed(&ok(&c, rename("s1", "Shown"))));
    assert_eq!(c.revision().unwrap(), 2);
    assert!(!changed(&ok(&c, rename("s1", "Shown"))));
    assert_eq!(c.revision().unwrap(), 2);
    assert_eq!(c.get("s1").unwrap().unwrap().creation.name, "Shown");
    assert_eq!(
        c.page(Visibility::Active, None, 10).unwrap().registrations[0]
            .creation
            .name,
        "Shown"
    );
    assert_eq!(
        c.by_request_key("k1").unwrap().unwrap().creation.name,
        "name k1"
    );
    assert_eq!(reserve(&c, "s2", local("k1")).creation.name, "name k1");
}

/// The display-name rule: blank, over 256 bytes, a control or an invisible
/// code point is `Invalid`.
pub fn rename_applies_the_display_name_rule<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "s1", local("k1"));
    for bad in [
        String::new(),
        " \t ".into(),
        "n".repeat(257),
        "a\u{0007}b".into(),
        "a\u{200B}b".into(),
        "a\u{202E}b".into(),
        "\u{FEFF}x".into(),
    ] {
        refused(&c, rename("s1", &bad), "Invalid");
    }
    ok(&c, rename("s1", &"n".repeat(256)));
    refused(&c, rename("missing", "x"), "NotFound");
}

/// `set_profile` writes the name and moves the revision, writes nothing for
/// an unchanged name, refuses a name outside the grammar; a creation retried
/// after a switch carries the old profile and conflicts.
pub fn set_profile_rules<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "s1", local("k1"));
    let set = |p: Option<&str>| Request::SetProfile {
        session_id: "s1".into(),
        profile: p.map(str::to_owned),
    };
    assert!(changed(&ok(&c, set(Some("fast")))));
    assert_eq!(c.revision().unwrap(), 2);
    assert!(!changed(&ok(&c, set(Some("fast")))));
    assert_eq!(c.revision().unwrap(), 2);
    refused(&c, set(Some("Fast!")), "Invalid");
    assert_eq!(
        c.get("s1").unwrap().unwrap().creation.profile.as_deref(),
        Some("fast")
    );
    refused(&c, reserve_req("s2", local("k1"), 1), "Conflict");
    assert!(changed(&ok(&c, set(None))));
}

/// The subtitle is reduced from the prompt and written once; a later call
/// writes nothing and leaves the revision alone. `get` and pages show it,
/// `by_request_key` never does.
pub fn subtitle_is_written_once<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "s1", local("k1"));
    let seed = |p: &str| Request::SeedSubtitle {
        session_id: "s1".into(),
        prompt: p.into(),
    };
    assert_eq!(
        ok(&c, seed("  \n\u{200B}\n")),
        Outcome::Subtitle {
            subtitle: None,
            changed: false
        }
    );
    assert_eq!(c.revision().unwrap(), 1);
    assert_eq!(
        ok(&c, seed("\n  Fix   the\tflaky\u{202E} test \nmore")),
        Outcome::Subtitle {
            subtitle: Some("Fix the flaky test".into()),
            changed: true
        }
    );
    assert_eq!(c.revision().unwrap(), 2);
    assert_eq!(
        ok(&c, seed("something else")),
        Outcome::Subtitle {
            subtitle: Some("Fix the flaky test".into()),
            changed: false
        }
    );
    assert_eq!(c.revision().unwrap(), 2);
    assert_eq!(
        c.get("s1").unwrap().unwrap().subtitle.as_deref(),
        Some("Fix the flaky test")
    );
    assert_eq!(c.by_request_key("k1").unwrap().unwrap().subtitle, None);
}

/// A long prompt is cut on a word to 60 characters, the ellipsis counted.
pub fn subtitle_is_cut_on_a_word<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "s1", local("k1"));
    let prompt = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu";
    let Outcome::Subtitle {
        subtitle: Some(s), ..
    } = ok(
        &c,
        Request::SeedSubtitle {
            session_id: "s1".into(),
            prompt: prompt.into(),
        },
    )
    else {
        panic!("no subtitle")
    };
    assert_eq!(
        s,
        "alpha beta gamma delta epsilon zeta eta theta iota kappa…"
    );
    assert!(s.chars().count() <= 60);
}

/// Recent folders: newest first, one row per folder (a repeated remember
/// retires its id), at most 10, and forget by id.
pub fn recent_folders_rules<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    let remember = |p: &str| Request::RememberFolder { path: p.into() };
    for i in 0..12 {
        ok(&c, remember(&format!("/f{i}")));
    }
    let r = c.recent_folders().unwrap();
    assert_eq!(r.len(), RECENT_FOLDER_LIMIT);
    assert_eq!(r[0].path, "/f11");
    assert_eq!(r[9].path, "/f2");
    let old = r.iter().find(|x| x.path == "/f5").unwrap().id;
    let Outcome::Remembered(again) = ok(&c, remember("/f5")) else {
        panic!("remember answered otherwise")
    };
    assert!(again.id > old);
    let r = c.recent_folders().unwrap();
    assert_eq!(r.len(), RECENT_FOLDER_LIMIT);
    assert_eq!(r[0].path, "/f5");
    assert_eq!(r.iter().filter(|x| x.path == "/f5").count(), 1);
    assert!(r.windows(2).all(|w| w[0].id > w[1].id));
    assert!(changed(&ok(&c, Request::ForgetFolder { id: again.id })));
    assert!(!changed(&ok(&c, Request::ForgetFolder { id: again.id })));
    assert_eq!(c.recent_folders().unwrap().len(), RECENT_FOLDER_LIMIT - 1);
    refused(&c, remember("relative"), "Invalid");
    assert_eq!(
        c.revision().unwrap(),
        0,
        "recent folders do not move the revision"
    );
}

/// Confirm moves `Reserved → Saved` once; the revision moves only when a
/// row changes.
pub fn confirm_and_revision_moves_only_on_change<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "s1", local("k1"));
    let confirm = Request::Confirm {
        session_id: "s1".into(),
    };
    assert!(changed(&ok(&c, confirm.clone())));
    assert_eq!(c.revision().unwrap(), 2);
    assert!(!changed(&ok(&c, confirm)));
    assert_eq!(c.revision().unwrap(), 2);
    assert_eq!(c.get("s1").unwrap().unwrap().state, InitState::Saved);
    refused(
        &c,
        Request::Confirm {
            session_id: "s9".into(),
        },
        "NotFound",
    );
}

/// Pages are ascending by id, bounded, and continue after a cursor.
pub fn pages_are_bounded_and_continue<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    for i in 0..5 {
        reserve(&c, &format!("s{i}"), local(&format!("k{i}")));
    }
    let p = c.page(Visibility::Active, None, 2).unwrap();
    let ids: Vec<_> = p
        .registrations
        .iter()
        .map(|r| r.session_id.as_str())
        .collect();
    assert_eq!(ids, ["s0", "s1"]);
    assert!(p.more);
    let p = c.page(Visibility::Active, Some("s1"), 2).unwrap();
    let ids: Vec<_> = p
        .registrations
        .iter()
        .map(|r| r.session_id.as_str())
        .collect();
    assert_eq!(ids, ["s2", "s3"]);
    let p = c.page(Visibility::Active, Some("s3"), 2).unwrap();
    assert_eq!(p.registrations.len(), 1);
    assert!(!p.more);
    assert_eq!(p.revision, 5);
}

/// Deletion marks: mark needs the registration, repeats write nothing,
/// `deleting` lists them, marks do not move the revision, `delete` removes
/// the mark with the registration.
pub fn deletion_marks<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "s1", local("k1"));
    reserve(&c, "s2", local("k2"));
    let mark = |id: &str| Request::MarkDeleting {
        session_id: id.into(),
    };
    refused(&c, mark("s9"), "NotFound");
    assert_eq!(c.deletion("s1").unwrap(), Deletion::NotDeleting);
    assert!(changed(&ok(&c, mark("s1"))));
    assert!(!changed(&ok(&c, mark("s1"))));
    assert_eq!(c.deletion("s1").unwrap(), Deletion::Deleting);
    assert_eq!(c.deleting().unwrap(), ["s1"]);
    assert_eq!(c.revision().unwrap(), 2);
    let unmark = Request::UnmarkDeleting {
        session_id: "s1".into(),
    };
    assert!(changed(&ok(&c, unmark.clone())));
    assert!(!changed(&ok(&c, unmark)));
    ok(&c, mark("s2"));
    ok(
        &c,
        Request::Delete {
            session_id: "s2".into(),
        },
    );
    assert!(c.deleting().unwrap().is_empty());
    assert_eq!(c.deletion("s2").unwrap_err().reason(), "NotFound");
}

/// `claim_delegate` records a new pair, answers an existing one (moving its
/// contact time), and answers `AtLimit(held)` writing nothing once the
/// spawner holds `limit` rows. Claims do not move the revision.
pub fn claim_delegate_and_its_limit<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    for i in 0..4 {
        reserve(&c, &format!("d{i}"), local(&format!("k{i}")));
    }
    let rev = c.revision().unwrap();
    match ok(&c, claim("orch-a", "p0", "d0", 10, 2)) {
        Outcome::Delegate(Claim::Claimed(d)) => assert_eq!(d.session_id, "d0"),
        other => panic!("{other:?}"),
    }
    match ok(&c, claim("orch-a", "p0", "d0", 20, 2)) {
        Outcome::Delegate(Claim::Existing(d)) => assert_eq!(d.last_contact_ms, 20),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        c.delegate_for("orch-a", "p0")
            .unwrap()
            .unwrap()
            .last_contact_ms,
        20
    );
    ok(&c, claim("orch-a", "p1", "d1", 30, 2));
    assert_eq!(
        ok(&c, claim("orch-a", "p2", "d2", 40, 2)),
        Outcome::Delegate(Claim::AtLimit { held: 2 })
    );
    assert_eq!(c.delegate_for("orch-a", "p2").unwrap(), None);
    assert_eq!(c.delegate_of("d2").unwrap(), None);
    assert_eq!(c.delegates_held("orch-a").unwrap(), 2);
    // Another spawner has its own slots; an existing pair answers even at the limit.
    ok(&c, claim("orch-b", "p2", "d2", 40, 1));
    assert!(matches!(
        ok(&c, claim("orch-a", "p1", "d1", 50, 2)),
        Outcome::Delegate(Claim::Existing(_))
    ));
    assert_eq!(c.delegate_of("d1").unwrap().unwrap().parent_session, "p1");
    assert_eq!(
        c.revision().unwrap(),
        rev,
        "claims do not move the revision"
    );
}

/// A pair bound to another session, or a session that already delegates for
/// another pair, is `Conflict`; an unknown session is `NotFound`; a malformed
/// pair is `Invalid` before anything else.
pub fn claim_delegate_refusals<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "d0", local("k0"));
    reserve(&c, "d1", local("k1"));
    ok(&c, claim("orch-a", "p0", "d0", 1, 5));
    refused(&c, claim("orch-a", "p0", "d1", 1, 5), "Conflict");
    refused(&c, claim("orch-a", "p1", "d0", 1, 5), "Conflict");
    refused(&c, claim("orch-a", "p1", "nope", 1, 5), "NotFound");
    refused(&c, claim("Orch A", "p1", "d1", 1, 5), "Invalid");
    refused(&c, claim("orch-a", "p/1", "d1", 1, 5), "Invalid");
    assert_eq!(
        c.delegate_for("Orch A", "p0").unwrap_err().reason(),
        "Invalid"
    );
    assert_eq!(
        c.delegate_for("orch-a", "").unwrap_err().reason(),
        "Invalid"
    );
}

/// A lost reply to a `Delete`: the same `Delete` again finds its own
/// deletion remembered and succeeds as the first attempt did — `Done` with
/// `changed: false`, writing nothing (the revision stays); a `Delete` of a
/// session that never existed is still `NotFound`.
pub fn a_retried_delete_is_answered_as_the_first<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "d0", local("k0"));
    let del = || Request::Delete {
        session_id: "d0".into(),
    };
    assert_eq!(ok(&c, del()), Outcome::Done { changed: true });
    let rev = c.revision().unwrap();
    assert_eq!(
        c.apply(&del()),
        Ok(Outcome::Done { changed: false }),
        "the retry of a Delete did not succeed as the first"
    );
    assert_eq!(c.revision().unwrap(), rev, "a recognised retry wrote");
    assert_eq!(c.get("d0").unwrap(), None);
    refused(
        &c,
        Request::Delete {
            session_id: "d9".into(),
        },
        "NotFound",
    );
}

/// `delete` removes the delegate row first, which frees the slot, and every
/// side row with the registration.
pub fn delete_frees_the_delegate_slot_and_side_rows<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "d0", local("k0"));
    reserve(&c, "d1", local("k1"));
    ok(&c, claim("orch-a", "p0", "d0", 1, 1));
    assert_eq!(
        ok(&c, claim("orch-a", "p1", "d1", 1, 1)),
        Outcome::Delegate(Claim::AtLimit { held: 1 })
    );
    ok(&c, rename("d0", "x"));
    ok(
        &c,
        Request::SetWorkspaceDefault {
            workspace: "/w".into(),
            session_id: "d0".into(),
        },
    );
    let rev = c.revision().unwrap();
    ok(
        &c,
        Request::Delete {
            session_id: "d0".into(),
        },
    );
    assert_eq!(c.revision().unwrap(), rev + 1);
    assert_eq!(c.get("d0").unwrap(), None);
    assert_eq!(c.by_request_key("k0").unwrap(), None);
    assert_eq!(c.workspace_default("/w").unwrap(), None);
    assert_eq!(c.delegates_held("orch-a").unwrap(), 0);
    assert!(matches!(
        ok(&c, claim("orch-a", "p1", "d1", 2, 1)),
        Outcome::Delegate(Claim::Claimed(_))
    ));
    refused(
        &c,
        Request::Delete {
            session_id: "never".into(),
        },
        "NotFound",
    );
    // The key is free again.
    assert_eq!(reserve(&c, "d2", local("k0")).session_id, "d2");
}

/// The delegate limit counts the claiming spawner's rows only: a spawner
/// with a free slot claims whatever other spawners hold.
pub fn delegate_limits_are_per_spawner<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    for i in 0..5 {
        reserve(&c, &format!("d{i}"), local(&format!("k{i}")));
    }
    ok(&c, claim("orch-a", "p0", "d0", 1, 3));
    ok(&c, claim("orch-a", "p1", "d1", 1, 3));
    ok(&c, claim("orch-b", "p0", "d2", 1, 3));
    match ok(&c, claim("orch-c", "p0", "d3", 2, 1)) {
        Outcome::Delegate(Claim::Claimed(d)) => assert_eq!(d.session_id, "d3"),
        other => panic!("orch-c's first claim answered {other:?}"),
    }
    assert_eq!(
        ok(&c, claim("orch-b", "p9", "d4", 3, 1)),
        Outcome::Delegate(Claim::AtLimit { held: 1 })
    );
    assert_eq!(c.delegates_held("orch-a").unwrap(), 2);
    assert_eq!(c.delegates_held("orch-c").unwrap(), 1);
}

/// A deleted session leaves nothing keyed by its id: registered again,
/// the id has the new creation's name, no subtitle and no deletion mark.
pub fn a_reused_session_id_starts_clean<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "s1", local("k1"));
    ok(&c, rename("s1", "Shown"));
    ok(
        &c,
        Request::SeedSubtitle {
            session_id: "s1".into(),
            prompt: "old work".into(),
        },
    );
    ok(
        &c,
        Request::MarkDeleting {
            session_id: "s1".into(),
        },
    );
    ok(
        &c,
        Request::Delete {
            session_id: "s1".into(),
        },
    );
    let r = reserve(&c, "s1", local("k2"));
    assert_eq!(r.creation, local("k2"));
    let got = c.get("s1").unwrap().unwrap();
    assert_eq!(got.creation.name, "name k2");
    assert_eq!(got.subtitle, None);
    assert_eq!(c.deletion("s1").unwrap(), Deletion::NotDeleting);
    assert!(c.deleting().unwrap().is_empty());
}

/// A workspace default never names an archived session: setting one is
/// `Conflict` and leaves the workspace without a default.
pub fn a_workspace_default_refuses_an_archived_session<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    reserve(&c, "s1", local("k1"));
    ok(
        &c,
        Request::SetVisibility {
            session_id: "s1".into(),
            visibility: Visibility::Archived,
        },
    );
    refused(
        &c,
        Request::SetWorkspaceDefault {
            workspace: "/w".into(),
            session_id: "s1".into(),
        },
        "Conflict",
    );
    assert_eq!(c.workspace_default("/w").unwrap(), None);
}

/// Recent-folder ids are never reused: after the newest row is forgotten
/// (or every row is), the next remember still gets a larger id.
pub fn recent_folder_ids_are_never_reused<C: Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    let a = remembered(&c, "/a");
    let b = remembered(&c, "/b");
    assert!(b > a);
    ok(&c, Request::ForgetFolder { id: b });
    let next = remembered(&c, "/c");
    assert!(next > b, "id {next} reused after forgetting {b}");
    ok(&c, Request::ForgetFolder { id: a });
    ok(&c, Request::ForgetFolder { id: next });
    assert!(c.recent_folders().unwrap().is_empty());
    let last = remembered(&c, "/d");
    assert!(last > next, "id {last} reused on an emptied list");
}

/// Pages are in byte order of the session id (not insertion order, its
/// reverse, a collation or a numeric-aware order: [`crate::ORDER_PROBE`]'s
/// ASCII keys); recent folders are newest first by id, with more than nine of them (so
/// id 10 sorts before id 9 as text).
pub fn listings_are_in_their_promised_order_not_text_collation_or_insertion<
    C: Catalogue,
    F: Fn() -> C,
>(
    factory: F,
) {
    let c = factory();
    // Session ids are ASCII: the probe without its last, non-ASCII key.
    for (i, id) in crate::ORDER_PROBE[..6].iter().enumerate() {
        reserve(&c, &format!("s{id}"), local(&format!("k{i}")));
    }
    let want: Vec<String> = crate::ORDER_PROBE_BYTES[..6]
        .iter()
        .map(|id| format!("s{id}"))
        .collect();
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let p = c.page(Visibility::Active, after.as_deref(), 3).unwrap();
        paged.extend(p.registrations.iter().map(|r| r.session_id.clone()));
        if !p.more {
            break;
        }
        after = paged.last().cloned();
    }
    assert_eq!(paged, want);
    let ids: Vec<u64> = (0..12).map(|i| remembered(&c, &format!("/f{i}"))).collect();
    let listed: Vec<u64> = c.recent_folders().unwrap().iter().map(|r| r.id).collect();
    let mut newest_first = ids.clone();
    newest_first.reverse();
    newest_first.truncate(listed.len());
    assert_eq!(listed, newest_first);
}

// ------------------------------------------------------------ reopen cases

const REOPEN_IDS: [&str; 4] = ["s1", "s2", "s3", "s4"];

/// Everything the port shows of the stores the reopen cases write.
type Seen = (u64, Vec<String>, Vec<String>, Vec<String>);

fn seen<C: Catalogue>(c: &C) -> Seen {
    let mut per_id = Vec::new();
    for id in REOPEN_IDS {
        per_id.push(format!(
            "{id}: {:?} {:?} {:?} {:?}",
            c.get(id).unwrap(),
            c.custody(id).ok(),
            c.deletion(id).ok(),
            c.delegate_of(id).unwrap()
        ));
    }
    let pages = [Visibility::Active, Visibility::Archived]
        .into_iter()
        .map(|v| format!("{:?}", c.page(v, None, 100).unwrap()))
        .collect();
    let lists = vec![
        format!("{:?}", c.recent_folders().unwrap()),
        format!("{:?}", c.moving().unwrap()),
        format!("{:?}", c.deleting().unwrap()),
        format!("{:?}", c.workspace_default("/w").ok()),
        format!("{:?}", c.delegate_for("orch", "p1").unwrap()),
        format!("{:?}", c.delegates_held("orch").unwrap()),
    ];
    (c.revision().unwrap(), per_id, pages, lists)
}

/// A history of acknowledged changes touching every table a catalogue
/// keeps: registrations of each placement, a confirmation, an archive, a
/// profile, a subtitle, a workspace default, recent folders (one
/// forgotten), a move begun, a deletion mark, a delegate, and last of all
/// a rename (the write a store that loses its tail would lose).
fn acknowledged_history<C: Catalogue>(c: &C) {
    reserve(c, "s1", local("k1"));
    reserve(c, "s2", on_executor("k2"));
    reserve(c, "s3", pooled("k3"));
    reserve(c, "s4", local("k4"));
    for id in REOPEN_IDS {
        ok(
            c,
            Request::Confirm {
                session_id: id.into(),
            },
        );
    }
    ok(
        c,
        Request::SetVisibility {
            session_id: "s2".into(),
            visibility: Visibility::Archived,
        },
    );
    ok(
        c,
        Request::SetProfile {
            session_id: "s1".into(),
            profile: Some("fast".into()),
        },
    );
    ok(
        c,
        Request::SeedSubtitle {
            session_id: "s1".into(),
            prompt: "a prompt that becomes the subtitle".into(),
        },
    );
    ok(
        c,
        Request::SetWorkspaceDefault {
            workspace: "/w".into(),
            session_id: "s4".into(),
        },
    );
    let a = remembered(c, "/a");
    remembered(c, "/b");
    ok(c, Request::ForgetFolder { id: a });
    ok(
        c,
        Request::BeginMove {
            session_id: "s3".into(),
            op: custos_core::catalogue::custody::MoveOp::new("op-1").unwrap(),
            to: custos_core::catalogue::custody::Peer::new("cat-b").unwrap(),
        },
    );
    ok(
        c,
        Request::MarkDeleting {
            session_id: "s4".into(),
        },
    );
    ok(c, claim("orch", "p1", "s1", 10, 4));
    ok(c, rename("s1", "the last name"));
}

/// Everything acknowledged survives a drop and a reopen, the last write
/// included, and a recent-folder id is not handed out again by the
/// reopened store.
pub fn acknowledged_changes_survive_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: Catalogue,
{
    let place = f();
    let (c, _, before) = crate::open_with_history(&place, acknowledged_history, seen);
    let top = c
        .recent_folders()
        .unwrap()
        .iter()
        .map(|r| r.id)
        .max()
        .unwrap_or(0);
    assert_eq!(c.get("s1").unwrap().unwrap().creation.name, "the last name");
    drop(c);
    let c = place.open();
    assert_eq!(seen(&c), before, "the reopened catalogue differs");
    ok(&c, Request::ForgetFolder { id: top });
    let next = remembered(&c, "/c");
    assert!(next > top, "recent-folder id {next} reused after a reopen");
}

/// A refused request leaves the stored state unchanged across a reopen: a
/// conflicting reservation, a rename of an unknown session, a delegate
/// already bound elsewhere and a subtitle seeded twice change nothing a
/// later handle sees.
pub fn a_refusal_leaves_the_store_unchanged_across_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: Catalogue,
{
    let place = f();
    let (c, _, before) = crate::open_with_history(&place, acknowledged_history, seen);
    assert!(c
        .apply(&reserve_req("s1", local("another-key"), 2_000))
        .is_err());
    assert!(c.apply(&rename("s9", "nobody")).is_err());
    assert!(c.apply(&claim("orch", "p2", "s1", 20, 4)).is_err());
    assert!(c
        .apply(&Request::MarkDeleting {
            session_id: "s9".into()
        })
        .is_err());
    drop(c);
    let c = place.open();
    assert_eq!(seen(&c), before, "a refusal changed the stored state");
}

// ------------------------------------------------------------- the table

/// Emits `mod $name { #[test] fn <case>() … }`: one test per catalogue
/// conformance case, each calling the case with `$factory` (evaluated once
/// per test; it must give a fresh, empty catalogue per call), and one per
/// reopen case, each calling it with `$places` (`Fn() -> P`,
/// `P: `[`crate::Place`] opening a catalogue: a fresh store per call,
/// opened again by every [`crate::Place::open`]).
#[macro_export]
macro_rules! catalogue_suite {
    ($name:ident, $factory:expr, reopen: $places:expr $(,)?) => {
        $crate::__suite!(
            __with_catalogue_cases,
            __with_catalogue_reopen_cases,
            catalogue,
            $name,
            $factory,
            $places
        );
    };
}

/// Invokes `$crate::$callback! { ($args) case, … }` with every catalogue
/// reopen case.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_catalogue_reopen_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            acknowledged_changes_survive_a_reopen,
            a_refusal_leaves_the_store_unchanged_across_a_reopen,
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __with_catalogue_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            fresh_catalogue_is_empty,
            reserve_creates_a_reserved_registration,
            reserve_retry_answers_the_original,
            reserve_retry_that_differs_conflicts,
            reserve_with_a_taken_session_id_conflicts,
            pooled_retry_compares_the_pool_not_the_executor,
            name_grammars_refuse_invalid,
            workspace_split_local_and_registered,
            workspace_default_rules,
            archive_and_restore,
            rename_overrides_the_display_name,
            rename_applies_the_display_name_rule,
            set_profile_rules,
            subtitle_is_written_once,
            subtitle_is_cut_on_a_word,
            recent_folders_rules,
            confirm_and_revision_moves_only_on_change,
            pages_are_bounded_and_continue,
            deletion_marks,
            claim_delegate_and_its_limit,
            claim_delegate_refusals,
            delete_frees_the_delegate_slot_and_side_rows,
            a_retried_delete_is_answered_as_the_first,
            delegate_limits_are_per_spawner,
            a_reused_session_id_starts_clean,
            a_workspace_default_refuses_an_archived_session,
            recent_folder_ids_are_never_reused,
            listings_are_in_their_promised_order_not_text_collation_or_insertion,
        }
    };
}

/// Every catalogue case, by name, in suite order.
pub const CATALOGUE_CASES: &[&str] = &crate::__with_catalogue_cases!(__emit_names!());

/// One catalogue case as a plain function of a factory.
pub type CatalogueCase<C> = fn(&dyn Fn() -> C);

/// Every case as `(name, case)`, for a harness that runs a subset or reports
/// per case (run each under `std::panic::catch_unwind`).
pub fn catalogue_cases<C: Catalogue>() -> Vec<(&'static str, CatalogueCase<C>)> {
    crate::__with_catalogue_cases!(__emit_table!(catalogue, C))
}

/// Every reopen case, by name, in suite order.
pub const CATALOGUE_REOPEN_CASES: &[&str] = &crate::__with_catalogue_reopen_cases!(__emit_names!());

/// Every reopen case as `(name, case)`; each takes a factory of places.
pub fn catalogue_reopen_cases<P: Place>() -> Vec<(&'static str, CatalogueCase<P>)>
where
    P::Store: Catalogue,
{
    crate::__with_catalogue_reopen_cases!(__emit_table!(catalogue, P))
}
