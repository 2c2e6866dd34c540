//! The catalogue suite has teeth: broken backends (shells over core's pure
//! catalogue state, each with one bug a backend author might write in a
//! write or a read path) must each fail at least one case, and the honest
//! shell must pass them all.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test-only mutant backends

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use custos_conformance::catalogue as suite;
use custos_core::catalogue::MemoryCatalogue;
use custos_core::catalogue::{
    decide, Catalogue, CatalogueError, CatalogueState, Claim, Outcome, Page, Registration, Request,
    Visibility,
};
use custos_teeth::{
    assert_reopen_caught, failing_cases, reopen_failing_cases, Disk, Verdicts,
    HONEST_WITHOUT_RECOVERY, LOSSES,
};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bug {
    /// The honest shell.
    None,
    /// A page applies `LIMIT` before the visibility filter.
    PageLimitBeforeVisibility,
    /// Pages are ordered by a case-insensitive collation, not byte order
    /// (the cursor compares in the same collation).
    PagesInCollationOrder,
    /// A page's cursor is inclusive (`id >= after`).
    PageCursorInclusive,
    /// A reserve retry answers the retry's id and clock, not the original's.
    RetryAnswersFreshId,
    /// Pages read the creation name, not the display-name override.
    PagesShowCreationName,
    /// `by_request_key` joins the display-name override.
    ByRequestKeyShowsOverride,
    /// Archiving forgets to clear a workspace default naming the session.
    ArchiveKeepsDefault,
    /// Remembering a folder again inserts a new row without retiring the old.
    RememberKeepsOldRow,
    /// A claim at the limit has already inserted its delegate row.
    AtLimitClaimStillInserts,
    /// An existing claim's upsert keeps the stale contact time.
    ExistingClaimKeepsContact,
    /// `delete` leaves the session's delegate row (the slot stays taken).
    DeleteKeepsDelegate,
    /// Seeding a subtitle forgets the `subtitle IS NULL` guard.
    SubtitleOverwrites,
    /// Deletion marks bump the revision.
    DeletionMarkMovesRevision,
    /// An unchanged rename or profile write still bumps the revision.
    UnchangedWriteMovesRevision,
    /// The claim's limit check counts every spawner's rows, not its own.
    ClaimLimitCountsEverySpawner,
    /// `delete` leaves the side rows (display name, subtitle, deletion
    /// mark) keyed by session id, which a new registration of the id
    /// inherits.
    DeleteLeavesSideRows,
    /// Setting a workspace default skips the archived check.
    DefaultToArchivedAccepted,
    /// A recent folder's id is the largest live id + 1 (a rowid without
    /// `AUTOINCREMENT`), so forgetting the newest reuses its id.
    RecentIdsReused,
}

const BUGS: &[Bug] = &[
    Bug::PageLimitBeforeVisibility,
    Bug::PagesInCollationOrder,
    Bug::PageCursorInclusive,
    Bug::RetryAnswersFreshId,
    Bug::PagesShowCreationName,
    Bug::ByRequestKeyShowsOverride,
    Bug::ArchiveKeepsDefault,
    Bug::RememberKeepsOldRow,
    Bug::AtLimitClaimStillInserts,
    Bug::ExistingClaimKeepsContact,
    Bug::DeleteKeepsDelegate,
    Bug::SubtitleOverwrites,
    Bug::DeletionMarkMovesRevision,
    Bug::UnchangedWriteMovesRevision,
    Bug::ClaimLimitCountsEverySpawner,
    Bug::DeleteLeavesSideRows,
    Bug::DefaultToArchivedAccepted,
    Bug::RecentIdsReused,
];

/// The side rows `DeleteLeavesSideRows` leaves: name override, subtitle,
/// deletion mark.
type SideRows = (Option<String>, Option<String>, bool);

struct Shell {
    bug: Bug,
    state: Mutex<CatalogueState>,
    ghosts: Mutex<BTreeMap<String, SideRows>>,
}

impl Shell {
    fn new(bug: Bug) -> Self {
        Shell {
            bug,
            state: Mutex::new(CatalogueState::default()),
            ghosts: Mutex::new(BTreeMap::new()),
        }
    }

    fn read<T>(&self, f: impl FnOnce(&CatalogueState) -> T) -> T {
        f(&self.state.lock().unwrap())
    }

    /// The state the buggy shell hands the decision function.
    fn scratch(&self, s: &CatalogueState, req: &Request) -> CatalogueState {
        let mut scratch = s.clone();
        match (self.bug, req) {
            (Bug::SubtitleOverwrites, Request::SeedSubtitle { session_id, .. }) => {
                if let Some(r) = scratch.sessions.get_mut(session_id.as_str()) {
                    r.subtitle = None;
                }
            }
            (Bug::DefaultToArchivedAccepted, Request::SetWorkspaceDefault { session_id, .. }) => {
                if let Some(r) = scratch.sessions.get_mut(session_id.as_str()) {
                    r.visibility = Visibility::Active;
                }
            }
            (Bug::RecentIdsReused, Request::RememberFolder { .. }) => {
                scratch.recent_seq = s.recent.iter().map(|r| r.id).max().unwrap_or(0);
            }
            _ => {}
        }
        scratch
    }

    /// The buggy write step after the decision.
    fn after(
        &self,
        before: &CatalogueState,
        req: &Request,
        next: &mut CatalogueState,
        out: &mut Outcome,
    ) {
        match (self.bug, req, out) {
            (
                Bug::RetryAnswersFreshId,
                Request::Reserve {
                    session_id, now, ..
                },
                Outcome::Reserved {
                    registration,
                    created: false,
                },
            ) => {
                registration.session_id = session_id.clone();
                registration.created_at_ms = *now;
            }
            (
                Bug::ArchiveKeepsDefault,
                Request::SetVisibility {
                    visibility: Visibility::Archived,
                    ..
                },
                _,
            ) => next.workspace_defaults = before.workspace_defaults.clone(),
            (Bug::RememberKeepsOldRow, Request::RememberFolder { .. }, _) => {
                next.recent.extend(before.recent.iter().cloned());
            }
            (
                Bug::AtLimitClaimStillInserts | Bug::ExistingClaimKeepsContact,
                Request::ClaimDelegate {
                    spawner,
                    parent_session,
                    session_id,
                    now,
                    ..
                },
                Outcome::Delegate(claim),
            ) => {
                let key = (spawner.clone(), parent_session.clone());
                match (self.bug, claim) {
                    (Bug::AtLimitClaimStillInserts, Claim::AtLimit { .. }) => {
                        next.delegates.insert(
                            key,
                            custos_core::catalogue::DelegateRow {
                                session_id: session_id.clone(),
                                last_contact_ms: *now,
                            },
                        );
                    }
                    (Bug::ExistingClaimKeepsContact, Claim::Existing(_)) => {
                        next.delegates
                            .insert(key.clone(), before.delegates[&key].clone());
                    }
                    _ => {}
                }
            }
            (
                Bug::DefaultToArchivedAccepted,
                Request::SetWorkspaceDefault { session_id, .. },
                _,
            ) => {
                next.sessions.get_mut(session_id).unwrap().visibility =
                    before.sessions[session_id].visibility;
            }
            (Bug::DeleteLeavesSideRows, Request::Delete { session_id }, _) => {
                let r = &before.sessions[session_id];
                let side = (r.name_override.clone(), r.subtitle.clone(), r.deleting);
                self.ghosts.lock().unwrap().insert(session_id.clone(), side);
            }
            (
                Bug::DeleteLeavesSideRows,
                Request::Reserve { session_id, .. },
                Outcome::Reserved { created: true, .. },
            ) => {
                if let Some((name, subtitle, deleting)) =
                    self.ghosts.lock().unwrap().remove(session_id)
                {
                    let r = next.sessions.get_mut(session_id).unwrap();
                    r.name_override = name;
                    r.subtitle = subtitle;
                    r.deleting = deleting;
                }
            }
            (Bug::DeleteKeepsDelegate, Request::Delete { session_id }, _) => {
                for (k, d) in &before.delegates {
                    if d.session_id == *session_id {
                        next.delegates.insert(k.clone(), d.clone());
                    }
                }
            }
            (
                Bug::DeletionMarkMovesRevision,
                Request::MarkDeleting { .. } | Request::UnmarkDeleting { .. },
                Outcome::Done { changed: true },
            ) => next.revision += 1,
            (
                Bug::UnchangedWriteMovesRevision,
                Request::Rename { .. } | Request::SetProfile { .. },
                Outcome::Done { changed: false },
            ) => next.revision += 1,
            _ => {}
        }
    }
}

impl Catalogue for Shell {
    fn apply(&self, req: &Request) -> Result<Outcome, CatalogueError> {
        let mut g = self.state.lock().unwrap();
        let before = g.clone();
        let mut judged = req.clone();
        if let (Bug::ClaimLimitCountsEverySpawner, Request::ClaimDelegate { spawner, limit, .. }) =
            (self.bug, &mut judged)
        {
            let others = g.delegates.keys().filter(|(s, _)| s != spawner).count();
            *limit = limit.saturating_sub(u32::try_from(others).unwrap());
        }
        let mut d = decide(&self.scratch(&g, req), &judged)?;
        self.after(&before, req, &mut d.next, &mut d.outcome);
        *g = d.next;
        Ok(d.outcome)
    }
    // Every read but `by_request_key` and `page` is the state's own.
    custos_teeth::catalogue_state_reads! {
        get, workspace_default, recent_folders, custody, moving, deletion, deleting,
        delegate_for, delegate_of, delegates_held, revision
    }
    fn by_request_key(&self, key: &str) -> Result<Option<Registration>, CatalogueError> {
        Ok(self.read(|s| {
            let r = s.by_request_key(key)?;
            if self.bug == Bug::ByRequestKeyShowsOverride {
                return s.get(&r.session_id).map(|mut d| {
                    d.subtitle = None;
                    d
                });
            }
            Some(r)
        }))
    }
    fn page(
        &self,
        visibility: Visibility,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, CatalogueError> {
        Ok(self.read(|s| match self.bug {
            Bug::PagesInCollationOrder => {
                let mut all = s.page(visibility, None, usize::MAX).registrations;
                all.sort_by_key(|r| r.session_id.to_lowercase());
                let start = after
                    .and_then(|a| all.iter().position(|r| r.session_id == a))
                    .map_or(0, |i| i + 1);
                let rest = &all[start..];
                Page {
                    registrations: rest.iter().take(limit).cloned().collect(),
                    more: rest.len() > limit,
                    revision: s.revision,
                }
            }
            Bug::PageLimitBeforeVisibility => {
                let ids: Vec<&String> = s
                    .sessions
                    .keys()
                    .filter(|id| after.is_none_or(|a| id.as_str() > a))
                    .collect();
                Page {
                    registrations: ids
                        .iter()
                        .take(limit)
                        .filter(|id| s.sessions[id.as_str()].visibility == visibility)
                        .filter_map(|id| s.get(id))
                        .collect(),
                    more: ids.len() > limit,
                    revision: s.revision,
                }
            }
            Bug::PageCursorInclusive => {
                // `>=`: the cursor row is read again.
                let before_cursor =
                    after.and_then(|a| s.sessions.keys().rfind(|id| id.as_str() < a).cloned());
                match (after, before_cursor) {
                    (Some(_), Some(b)) => s.page(visibility, Some(&b), limit),
                    _ => s.page(visibility, None, limit),
                }
            }
            Bug::PagesShowCreationName => {
                let mut p = s.page(visibility, after, limit);
                for r in &mut p.registrations {
                    r.creation.name = s.sessions[&r.session_id].creation.name.clone();
                }
                p
            }
            _ => s.page(visibility, after, limit),
        }))
    }
}

#[test]
fn every_broken_catalogue_backend_fails_a_case() {
    let cases = suite::catalogue_cases::<Shell>();
    let failures = |bug| failing_cases(&cases, &move || Shell::new(bug));
    let honest = failures(Bug::None);
    assert!(honest.is_empty(), "the honest shell fails {honest:?}");
    Verdicts::of("catalogue", BUGS.iter().copied(), failures).assert_all_caught(8);
}

/// A catalogue over a [`Disk`] of acknowledged writes: each open replays
/// the disk into a fresh memory catalogue, as the mode allows.
struct Durable {
    inner: MemoryCatalogue,
    disk: Arc<Disk<Request>>,
}

impl Durable {
    fn open(disk: &Arc<Disk<Request>>) -> Self {
        let inner = MemoryCatalogue::new();
        for r in disk.replay() {
            let _ = inner.apply(&r);
        }
        Durable {
            inner,
            disk: Arc::clone(disk),
        }
    }
}

impl Catalogue for Durable {
    fn apply(&self, req: &Request) -> Result<Outcome, CatalogueError> {
        let o = self.inner.apply(req)?;
        self.disk.record(req.clone());
        Ok(o)
    }
    custos_teeth::forward_catalogue_reads!(inner);
}

#[test]
fn every_catalogue_that_loses_durability_fails_a_reopen_case() {
    // The catalogue has no open-time recovery to skip.
    let cases = suite::catalogue_reopen_cases();
    assert_reopen_caught(
        "catalogue reopen",
        HONEST_WITHOUT_RECOVERY,
        LOSSES,
        |mode| reopen_failing_cases(&cases, mode, Durable::open),
    );
}
