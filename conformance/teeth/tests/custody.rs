//! The custody suite has teeth: broken backends (shells over core's pure
//! catalogue state, each with one bug a backend author might write in the
//! custody transitions) must each fail at least one case, and the honest
//! shell must pass them all.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test-only mutant backends

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use custos_conformance::custody as suite;
use custos_core::catalogue::custody::{Custody, MoveOp, Peer};
use custos_core::catalogue::{
    decide, Catalogue, CatalogueError, CatalogueState, InitState, Move, Outcome, Request,
};
use custos_teeth::{
    assert_reopen_caught, failing_cases, reopen_failing_cases, Disk, Verdicts,
    HONEST_WITHOUT_RECOVERY, LOSSES,
};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bug {
    /// The honest shell.
    None,
    /// A repeated `begin_move` compares the op but not the destination.
    BeginRepeatIgnoresDestination,
    /// Every custody write bumps the revision, a repeat that changes
    /// nothing included (an unconditional `UPDATE`).
    RepeatBumpsRevision,
    /// A late `abort_move` of a finished move turns it back to `Resident`.
    LateAbortRestoresResident,
    /// `import_session` onto a `Resident` session takes it over.
    ImportOverResident,
    /// A return import re-registers the session from the import's creation,
    /// dropping the kept registration (rename, init state).
    ReturnImportResetsRegistration,
    /// `finish_move` checks the session is `Moving`, not that the op is its.
    FinishAcceptsAnyOp,
    /// `moving()` lists finished moves too (filters on "has a move row").
    MovingListsMoved,
    /// `delete` skips the custody check.
    DeleteIgnoresCustody,
    /// An onward move from `Imported` accepts the op that imported it.
    OnwardReusesImportOp,
    /// A repeated import compares the op but not the source.
    ImportReplayIgnoresSource,
    /// A new import registers the session but forgets to confirm it.
    ImportLeavesReserved,
    /// `delete` drops the registration but not its custody row, which a
    /// later registration of the same id inherits.
    DeleteLeavesCustodyRow,
    /// The resume query `moving()` keeps a `LIMIT 1` from a point lookup.
    MovingAnswersOnlyOne,
    /// `moving()` selects "not `Resident`, not `Moved`", so received
    /// (`Imported`) sessions are listed as moves to resume.
    MovingListsImported,
}

const BUGS: &[Bug] = &[
    Bug::BeginRepeatIgnoresDestination,
    Bug::RepeatBumpsRevision,
    Bug::LateAbortRestoresResident,
    Bug::ImportOverResident,
    Bug::ReturnImportResetsRegistration,
    Bug::FinishAcceptsAnyOp,
    Bug::MovingListsMoved,
    Bug::DeleteIgnoresCustody,
    Bug::OnwardReusesImportOp,
    Bug::ImportReplayIgnoresSource,
    Bug::ImportLeavesReserved,
    Bug::DeleteLeavesCustodyRow,
    Bug::MovingAnswersOnlyOne,
    Bug::MovingListsImported,
];

struct Shell {
    bug: Bug,
    state: Mutex<CatalogueState>,
    /// Custody rows `delete` left behind (`DeleteLeavesCustodyRow`).
    ghosts: Mutex<BTreeMap<String, Custody>>,
    /// The disk of the durable shell (the reopen cases' teeth).
    disk: Option<Arc<Disk<Request>>>,
}

impl Shell {
    fn new(bug: Bug, disk: Option<Arc<Disk<Request>>>) -> Self {
        Shell {
            bug,
            disk,
            state: Mutex::new(CatalogueState::default()),
            ghosts: Mutex::new(BTreeMap::new()),
        }
    }

    /// The honest shell over a [`Disk`]: an open replays it, as its mode
    /// allows (a replayed request is not recorded again).
    fn open(disk: &Arc<Disk<Request>>) -> Self {
        let shell = Shell::new(Bug::None, Some(Arc::clone(disk)));
        for r in disk.replay() {
            let _ = shell.apply_unrecorded(&r);
        }
        shell
    }

    fn read<T>(&self, f: impl FnOnce(&CatalogueState) -> T) -> T {
        f(&self.state.lock().unwrap())
    }
}

/// Writes `custody` on the session directly (a transition the buggy shell
/// takes without the decision function) and answers it as changed.
fn force(s: &mut CatalogueState, id: &str, custody: Custody) -> Result<Outcome, CatalogueError> {
    let row = s.sessions.get_mut(id).unwrap();
    row.custody = custody.clone();
    s.revision += 1;
    Ok(Outcome::Custody {
        custody,
        changed: true,
    })
}

impl Shell {
    /// A custody transition the buggy shell decides by itself, if any.
    fn shortcut(
        &self,
        s: &mut CatalogueState,
        req: &Request,
    ) -> Option<Result<Outcome, CatalogueError>> {
        let stored = |id: &str| s.sessions.get(id).map(|r| r.custody.clone());
        match (self.bug, req) {
            (Bug::LateAbortRestoresResident, Request::AbortMove { session_id, op }) => {
                match stored(session_id)? {
                    Custody::Moved { op: o, .. } if o == *op => {
                        Some(force(s, session_id, Custody::Resident))
                    }
                    _ => None,
                }
            }
            (
                Bug::ImportOverResident,
                Request::ImportSession {
                    session_id,
                    op,
                    from,
                    ..
                },
            ) => match stored(session_id)? {
                Custody::Resident => Some(force(
                    s,
                    session_id,
                    Custody::Imported {
                        op: op.clone(),
                        from: from.clone(),
                    },
                )),
                _ => None,
            },
            (Bug::OnwardReusesImportOp, Request::BeginMove { session_id, op, to }) => {
                match stored(session_id)? {
                    Custody::Imported { op: o, .. } if o == *op => Some(force(
                        s,
                        session_id,
                        Custody::Moving {
                            op: op.clone(),
                            to: to.clone(),
                        },
                    )),
                    _ => None,
                }
            }
            (Bug::ImportReplayIgnoresSource, Request::ImportSession { session_id, op, .. }) => {
                let c = stored(session_id)?;
                match &c {
                    Custody::Imported { op: o, .. } if o == op => Some(Ok(Outcome::Custody {
                        custody: c.clone(),
                        changed: false,
                    })),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The request (and state) the buggy shell hands the decision function.
    fn rewrite(&self, s: &CatalogueState, req: &Request) -> (CatalogueState, Request) {
        let mut scratch = s.clone();
        let mut req = req.clone();
        let stored = |id: &str| s.sessions.get(id).map(|r| r.custody.clone());
        match (self.bug, &mut req) {
            (Bug::BeginRepeatIgnoresDestination, Request::BeginMove { session_id, op, to }) => {
                if let Some(Custody::Moving { op: o, to: t } | Custody::Moved { op: o, to: t }) =
                    stored(session_id)
                {
                    if o == *op {
                        *to = t;
                    }
                }
            }
            (Bug::FinishAcceptsAnyOp, Request::FinishMove { session_id, op }) => {
                if let Some(Custody::Moving { op: o, .. }) = stored(session_id) {
                    *op = o;
                }
            }
            (Bug::DeleteIgnoresCustody, Request::Delete { session_id }) => {
                if let Some(r) = scratch.sessions.get_mut(session_id.as_str()) {
                    r.custody = Custody::Resident;
                }
            }
            _ => {}
        }
        (scratch, req)
    }
}

impl Shell {
    fn apply_unrecorded(&self, req: &Request) -> Result<Outcome, CatalogueError> {
        let mut g = self.state.lock().unwrap();
        if let Some(out) = self.shortcut(&mut g, req) {
            return out;
        }
        let before = g.clone();
        let (scratch, judged) = self.rewrite(&g, req);
        let mut d = decide(&scratch, &judged)?;
        match (self.bug, req, &d.outcome) {
            (Bug::RepeatBumpsRevision, _, Outcome::Custody { changed: false, .. }) => {
                d.next.revision += 1;
            }
            (
                Bug::ReturnImportResetsRegistration,
                Request::ImportSession {
                    session_id,
                    creation,
                    ..
                },
                _,
            ) if matches!(
                before.sessions.get(session_id).map(|r| &r.custody),
                Some(Custody::Moved { .. })
            ) =>
            {
                let row = d.next.sessions.get_mut(session_id).unwrap();
                row.creation = creation.clone();
                row.name_override = None;
                row.state = InitState::Saved;
            }
            (Bug::ImportLeavesReserved, Request::ImportSession { session_id, .. }, _)
                if !before.sessions.contains_key(session_id) =>
            {
                d.next.sessions.get_mut(session_id).unwrap().state = InitState::Reserved;
            }
            (Bug::DeleteLeavesCustodyRow, Request::Delete { session_id }, _) => {
                let left = before.sessions[session_id].custody.clone();
                self.ghosts.lock().unwrap().insert(session_id.clone(), left);
            }
            (
                Bug::DeleteLeavesCustodyRow,
                Request::Reserve { session_id, .. },
                Outcome::Reserved { created: true, .. },
            ) => {
                if let Some(c) = self.ghosts.lock().unwrap().remove(session_id) {
                    d.next.sessions.get_mut(session_id).unwrap().custody = c;
                }
            }
            _ => {}
        }
        *g = d.next;
        Ok(d.outcome)
    }
}

/// Every move `moving()` lists, and as moves too the sessions whose
/// custody `also` reads as an `(op, to)`: in session order.
fn moves_and(s: &CatalogueState, also: impl Fn(&Custody) -> Option<(&MoveOp, &Peer)>) -> Vec<Move> {
    let mut all = s.moving();
    for (id, r) in &s.sessions {
        if let Some((op, to)) = also(&r.custody) {
            all.push(Move {
                session_id: id.clone(),
                op: op.clone(),
                to: to.clone(),
            });
        }
    }
    all.sort_by(|a, b| a.session_id.cmp(&b.session_id));
    all
}

impl Catalogue for Shell {
    fn apply(&self, req: &Request) -> Result<Outcome, CatalogueError> {
        let o = self.apply_unrecorded(req)?;
        if let Some(disk) = &self.disk {
            disk.record(req.clone());
        }
        Ok(o)
    }
    // Every read but `moving` is the state's own.
    custos_teeth::catalogue_state_reads! {
        get, by_request_key, page, workspace_default, recent_folders, custody, deletion,
        deleting, delegate_for, delegate_of, delegates_held, revision
    }
    fn moving(&self) -> Result<Vec<Move>, CatalogueError> {
        if self.bug == Bug::MovingListsMoved {
            return Ok(self.read(|s| {
                moves_and(s, |c| match c {
                    Custody::Moved { op, to } => Some((op, to)),
                    _ => None,
                })
            }));
        }
        if self.bug == Bug::MovingListsImported {
            return Ok(self.read(|s| {
                moves_and(s, |c| match c {
                    Custody::Imported { op, from } => Some((op, from)),
                    _ => None,
                })
            }));
        }
        let mut all = self.read(CatalogueState::moving);
        if self.bug == Bug::MovingAnswersOnlyOne {
            all.truncate(1);
        }
        Ok(all)
    }
}

#[test]
fn every_broken_custody_backend_fails_a_case() {
    let cases = suite::custody_cases::<Shell>();
    let failures = |bug| failing_cases(&cases, &move || Shell::new(bug, None));
    let honest = failures(Bug::None);
    assert!(honest.is_empty(), "the honest shell fails {honest:?}");
    Verdicts::of("custody", BUGS.iter().copied(), failures).assert_all_caught(8);
}

#[test]
fn every_custody_store_that_loses_durability_fails_a_reopen_case() {
    // Custody has no open-time recovery to skip.
    let cases = suite::custody_reopen_cases();
    assert_reopen_caught("custody reopen", HONEST_WITHOUT_RECOVERY, LOSSES, |mode| {
        reopen_failing_cases(&cases, mode, Shell::open)
    });
}
