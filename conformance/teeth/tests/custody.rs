//! The custody suite has teeth: broken backends (shells over core's pure
//! catalogue state, each with one bug a backend author might write in the
//! custody transitions) must each fail at least one case, and the honest
//! shell must pass them all.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test-only mutant backends

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use custos_conformance::custody as suite;
use custos_core::catalogue::custody::Custody;
use custos_core::catalogue::{
    decide, Catalogue, CatalogueError, CatalogueState, Delegate, Deletion, InitState, Move,
    Outcome, Page, Recent, Registration, Request, Visibility,
};
use custos_teeth::{run_case, Disk, Durability, Verdicts};

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
    fn new(bug: Bug) -> Self {
        Shell {
            bug,
            state: Mutex::new(CatalogueState::default()),
            ghosts: Mutex::new(BTreeMap::new()),
            disk: None,
        }
    }

    /// The honest shell over a [`Disk`]: an open replays it, as its mode
    /// allows.
    fn open(disk: &Arc<Disk<Request>>) -> Self {
        let mut shell = Shell::new(Bug::None);
        for r in disk.replay() {
            let _ = shell.apply_unrecorded(&r);
        }
        shell.disk = Some(Arc::clone(disk));
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

impl Catalogue for Shell {
    fn apply(&self, req: &Request) -> Result<Outcome, CatalogueError> {
        let o = self.apply_unrecorded(req)?;
        if let Some(disk) = &self.disk {
            disk.record(req.clone());
        }
        Ok(o)
    }
    fn get(&self, id: &str) -> Result<Option<Registration>, CatalogueError> {
        Ok(self.read(|s| s.get(id)))
    }
    fn by_request_key(&self, key: &str) -> Result<Option<Registration>, CatalogueError> {
        Ok(self.read(|s| s.by_request_key(key)))
    }
    fn page(
        &self,
        visibility: Visibility,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, CatalogueError> {
        Ok(self.read(|s| s.page(visibility, after, limit)))
    }
    fn workspace_default(&self, workspace: &str) -> Result<Option<String>, CatalogueError> {
        self.read(|s| s.workspace_default(workspace))
    }
    fn recent_folders(&self) -> Result<Vec<Recent>, CatalogueError> {
        Ok(self.read(CatalogueState::recent_folders))
    }
    fn custody(&self, id: &str) -> Result<Custody, CatalogueError> {
        self.read(|s| s.custody(id))
    }
    fn moving(&self) -> Result<Vec<Move>, CatalogueError> {
        if self.bug == Bug::MovingListsMoved {
            return Ok(self.read(|s| {
                s.sessions
                    .iter()
                    .filter_map(|(id, r)| match &r.custody {
                        Custody::Moving { op, to } | Custody::Moved { op, to } => Some(Move {
                            session_id: id.clone(),
                            op: op.clone(),
                            to: to.clone(),
                        }),
                        _ => None,
                    })
                    .collect()
            }));
        }
        if self.bug == Bug::MovingListsImported {
            return Ok(self.read(|s| {
                s.sessions
                    .iter()
                    .filter_map(|(id, r)| match &r.custody {
                        Custody::Moving { op, to } => Some(Move {
                            session_id: id.clone(),
                            op: op.clone(),
                            to: to.clone(),
                        }),
                        Custody::Imported { op, from } => Some(Move {
                            session_id: id.clone(),
                            op: op.clone(),
                            to: from.clone(),
                        }),
                        _ => None,
                    })
                    .collect()
            }));
        }
        let mut all = self.read(CatalogueState::moving);
        if self.bug == Bug::MovingAnswersOnlyOne {
            all.truncate(1);
        }
        Ok(all)
    }
    fn deletion(&self, id: &str) -> Result<Deletion, CatalogueError> {
        self.read(|s| s.deletion(id))
    }
    fn deleting(&self) -> Result<Vec<String>, CatalogueError> {
        Ok(self.read(CatalogueState::deleting))
    }
    fn delegate_for(&self, sp: &str, parent: &str) -> Result<Option<Delegate>, CatalogueError> {
        self.read(|s| s.delegate_for(sp, parent))
    }
    fn delegate_of(&self, id: &str) -> Result<Option<Delegate>, CatalogueError> {
        Ok(self.read(|s| s.delegate_of(id)))
    }
    fn delegates_held(&self, spawner: &str) -> Result<u32, CatalogueError> {
        Ok(self.read(|s| s.delegates_held(spawner)))
    }
    fn revision(&self) -> Result<u64, CatalogueError> {
        Ok(self.read(|s| s.revision))
    }
}

/// The cases `bug` fails.
fn failures(bug: Bug) -> Vec<String> {
    let factory = move || Shell::new(bug);
    suite::custody_cases::<Shell>()
        .into_iter()
        .filter(|(_, case)| run_case(|| case(&factory)))
        .map(|(name, _)| name.to_owned())
        .collect()
}

#[test]
fn every_broken_custody_backend_fails_a_case() {
    let honest = failures(Bug::None);
    assert!(honest.is_empty(), "the honest shell fails {honest:?}");
    let mut verdicts = Verdicts::new("custody");
    for &bug in BUGS {
        verdicts.record(format!("{bug:?}"), failures(bug));
    }
    verdicts.assert_all_caught(8);
}

/// The reopen cases `mode` fails.
fn reopen_failures(mode: Durability) -> Vec<String> {
    let places = move || {
        let disk = Disk::new(mode);
        move || Shell::open(&disk)
    };
    suite::custody_reopen_cases()
        .into_iter()
        .filter(|(_, case)| run_case(|| case(&places)))
        .map(|(name, _)| name.to_owned())
        .collect()
}

#[test]
fn every_custody_store_that_loses_durability_fails_a_reopen_case() {
    for mode in [Durability::Honest, Durability::SkipsRecovery] {
        // Custody has no open-time recovery to skip.
        let honest = reopen_failures(mode);
        assert!(
            honest.is_empty(),
            "the durable shell ({mode:?}) fails {honest:?}"
        );
    }
    let mut verdicts = Verdicts::new("custody reopen");
    for mode in [Durability::MemoryOnly, Durability::LosesLastWrite] {
        verdicts.record(format!("{mode:?}"), reopen_failures(mode));
    }
    verdicts.assert_all_caught(2);
}
