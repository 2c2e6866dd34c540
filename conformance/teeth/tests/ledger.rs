//! The ledger suite has teeth: broken backends (shells over core's pure
//! ledger state, each with one bug a backend author might write in the
//! load-decide-apply steps) must each fail at least one case, and the
//! honest shell must pass them all.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test-only mutant backends

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use custos_conformance::ledger as suite;
use custos_core::ledger::MemoryLedger;
use custos_core::ledger::{
    decide, Answer, CallRow, CloseOutcome, Decision, Effect, Key, Ledger, LedgerError, LedgerState,
    Limits, Request, RowState, ScopeState, View,
};
use custos_teeth::{
    assert_reopen_caught, failing_cases, reopen_failing_cases, Disk, Durability, Verdicts,
    DURABILITY_BUGS,
};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bug {
    /// The honest shell.
    None,
    /// The held-bytes total sums only `admitted` reservations, forgetting
    /// `terminal` outcome sizes.
    BytesCountOnlyReservations,
    /// `mark_unknown` flips the state but leaves the row's bytes counted.
    MarkUnknownKeepsReservation,
    /// The unclean-scope count forgets its state filter: clean scopes count.
    UncleanCountsEveryScope,
    /// The unclean-scope count counts only `Open` scopes (`WHERE state =
    /// 'open'`): closing scopes and unknown cleanups take no slot.
    UncleanCountsOnlyOpen,
    /// `records` counts scopes and call rows only: tombstones and release
    /// rows are not Activity to it.
    RecordsSkipTombstonesAndReleases,
    /// A takeover attach upserts the scope but keeps the stale token column.
    TakeoverKeepsOldToken,
    /// `admit` answers an existing key before checking the attach token.
    ExistingKeySkipsToken,
    /// `ack` deletes the row but the tombstone insert is lost.
    AckWritesNoTombstone,
    /// A clean `finish_close` forgets to drop the session's tombstones.
    CleanCloseKeepsTombstones,
    /// Restart recovery's update forgets `WHERE state = 'admitted'`:
    /// settled rows turn unknown too.
    RecoveryTouchesSettledRows,
    /// `stop_or_fence` stops an admitted row of any tool.
    StopIgnoresTool,
    /// `query_or_fence` checks the scope exists but not its incarnation.
    FenceSkipsIncarnation,
    /// The budget check is `>=` where it is `>`: a full budget refuses.
    BudgetOffByOne,
    /// A refused attach (no free slot) has already inserted the scope row.
    RefusedAttachWritesScope,
    /// `admitted` forgets the tool filter.
    AdmittedIgnoresTool,
    /// `releases` reads the log newest first.
    ReleasesNewestFirst,
    /// A fence is charged against the byte budget like an admission.
    FenceChargesBudget,
    /// Reopening a clean scope skips the free-slot check (only the create
    /// path has it).
    ReopenSkipsSlotCheck,
    /// An attach at the scope's incarnation takes over a `Closing` scope as
    /// if it were `Open`, reopening it.
    AttachReopensClosingScope,
    /// `mark_unknown` overwrites a settled (`terminal`) row.
    MarkUnknownOverwritesTerminal,
    /// The loader returns the session's rows ordered by the key's text
    /// (an `ORDER BY` over a string column): step 10 before step 2.
    RowsInTextOrder,
    /// The store has no column for the admission's request id: the row
    /// is written without it, so a retry is `Existing(Admitted)`.
    AdmitRequestNotStored,
    /// The retry is recognised by the attach token alone: any admission of
    /// a running key by the current token is answered `Fresh`.
    RetryByTokenAlone,
}

const BUGS: &[Bug] = &[
    Bug::BytesCountOnlyReservations,
    Bug::MarkUnknownKeepsReservation,
    Bug::UncleanCountsEveryScope,
    Bug::UncleanCountsOnlyOpen,
    Bug::RecordsSkipTombstonesAndReleases,
    Bug::TakeoverKeepsOldToken,
    Bug::ExistingKeySkipsToken,
    Bug::AckWritesNoTombstone,
    Bug::CleanCloseKeepsTombstones,
    Bug::RecoveryTouchesSettledRows,
    Bug::StopIgnoresTool,
    Bug::FenceSkipsIncarnation,
    Bug::BudgetOffByOne,
    Bug::RefusedAttachWritesScope,
    Bug::AdmittedIgnoresTool,
    Bug::ReleasesNewestFirst,
    Bug::FenceChargesBudget,
    Bug::ReopenSkipsSlotCheck,
    Bug::AttachReopensClosingScope,
    Bug::MarkUnknownOverwritesTerminal,
    Bug::RowsInTextOrder,
    Bug::AdmitRequestNotStored,
    Bug::RetryByTokenAlone,
];

#[derive(Default)]
struct Inner {
    state: LedgerState,
    closed: bool,
    /// Keys `mark_unknown` settled (their bytes leak under
    /// `MarkUnknownKeepsReservation`).
    leaked: BTreeSet<Key>,
}

struct Shell {
    bug: Bug,
    inner: Mutex<Inner>,
}

impl Shell {
    fn new(bug: Bug) -> Self {
        Shell {
            bug,
            inner: Mutex::new(Inner::default()),
        }
    }
}

/// The view a buggy load step answers.
fn load(bug: Bug, g: &Inner, limits: &Limits, req: &Request) -> View {
    let mut view = g.state.view(&req.footprint());
    match bug {
        Bug::BytesCountOnlyReservations => {
            view.ledger_bytes = g
                .state
                .calls
                .values()
                .filter(|r| matches!(r.state, RowState::Admitted { .. }))
                .map(CallRow::outcome_bytes)
                .sum();
        }
        Bug::MarkUnknownKeepsReservation => {
            let leaked = g
                .leaked
                .iter()
                .filter(|k| g.state.calls.contains_key(*k))
                .count() as u64;
            view.ledger_bytes += leaked * limits.reservation_bytes;
        }
        Bug::UncleanCountsEveryScope => view.unclean_scopes = g.state.scopes.len() as u64,
        Bug::UncleanCountsOnlyOpen => {
            view.unclean_scopes = g
                .state
                .scopes
                .values()
                .filter(|s| s.state == ScopeState::Open)
                .count() as u64;
        }
        Bug::RowsInTextOrder => {
            let text = |k: &Key| format!("{k:?}");
            view.session_calls.sort_by_key(|(k, _)| text(k));
            view.admitted.sort_by_key(|(k, _)| text(k));
        }
        _ => {}
    }
    view
}

/// The request a buggy decide step sees.
fn judge(bug: Bug, view: &mut View, limits: &Limits, req: &Request) -> (Limits, Request) {
    let mut limits = *limits;
    let mut req = req.clone();
    match (bug, &mut req) {
        (Bug::ReopenSkipsSlotCheck, Request::Attach { incarnation, .. }) => {
            if let Some(s) = &view.scope {
                if s.state == ScopeState::Closed(CloseOutcome::AllRetired)
                    && s.incarnation + 1 == *incarnation
                {
                    view.unclean_scopes = 0;
                }
            }
        }
        (Bug::AttachReopensClosingScope, Request::Attach { incarnation, .. }) => {
            if let Some(s) = &mut view.scope {
                if s.state == ScopeState::Closing && s.incarnation == *incarnation {
                    s.state = ScopeState::Open;
                }
            }
        }
        (Bug::MarkUnknownOverwritesTerminal, Request::MarkUnknown { .. }) => {
            if let Some(row) = &mut view.call {
                if matches!(row.state, RowState::Terminal { .. }) {
                    row.state = RowState::Admitted {
                        reserved: 0,
                        request: None,
                    };
                }
            }
        }
        (Bug::ExistingKeySkipsToken, Request::Admit { token, .. })
            if view.call.is_some() || view.acked =>
        {
            if let Some(s) = &view.scope {
                *token = s.attach_token.clone();
            }
        }
        (Bug::StopIgnoresTool, Request::StopOrFence { tool, .. }) => {
            if let Some(row) = &view.call {
                *tool = row.tool.clone();
            }
        }
        (Bug::FenceSkipsIncarnation, Request::QueryOrFence { key, .. }) => {
            if let Some(s) = &view.scope {
                key.incarnation = s.incarnation;
            }
        }
        (Bug::RetryByTokenAlone, Request::Admit { request, .. }) => {
            if let Some(CallRow {
                state:
                    RowState::Admitted {
                        request: stored, ..
                    },
                ..
            }) = &view.call
            {
                *request = stored.clone();
            }
        }
        (Bug::BudgetOffByOne, Request::Admit { .. }) => {
            limits.max_ledger_bytes = limits.max_ledger_bytes.saturating_sub(1);
        }
        _ => {}
    }
    (limits, req)
}

/// The buggy answer and write steps after the decision.
fn distort(bug: Bug, g: &mut Inner, view: &View, req: &Request, d: &mut Decision) {
    match (bug, req) {
        (Bug::FenceSkipsIncarnation, Request::QueryOrFence { key, .. }) => {
            for e in &mut d.effects {
                if let Effect::PutCall(k, _) = e {
                    *k = key.clone();
                }
            }
        }
        (Bug::TakeoverKeepsOldToken, Request::Attach { .. }) => {
            if let Some(old) = view.scope.as_ref().filter(|s| s.state == ScopeState::Open) {
                for e in &mut d.effects {
                    if let Effect::PutScope(s) = e {
                        s.attach_token = old.attach_token.clone();
                    }
                }
            }
        }
        (Bug::AckWritesNoTombstone, Request::Ack { .. }) => {
            d.effects.retain(|e| !matches!(e, Effect::PutAck(_)));
        }
        (Bug::CleanCloseKeepsTombstones, Request::FinishClose { .. }) => {
            d.effects.retain(|e| !matches!(e, Effect::ForgetAcks(_)));
        }
        (Bug::RecoveryTouchesSettledRows, Request::Open) => {
            d.effects = g
                .state
                .calls
                .iter()
                .filter(|(_, r)| !matches!(r.state, RowState::Unknown))
                .map(|(k, r)| {
                    Effect::PutCall(
                        k.clone(),
                        CallRow {
                            tool: r.tool.clone(),
                            state: RowState::Unknown,
                        },
                    )
                })
                .collect();
            d.answer = Answer::Recovered(d.effects.len() as u64);
        }
        (Bug::AdmitRequestNotStored, Request::Admit { .. }) => {
            for e in &mut d.effects {
                if let Effect::PutCall(
                    _,
                    CallRow {
                        state: RowState::Admitted { request, .. },
                        ..
                    },
                ) = e
                {
                    *request = None;
                }
            }
        }
        (Bug::MarkUnknownKeepsReservation, Request::MarkUnknown { key }) => {
            g.leaked.insert(key.clone());
        }
        (Bug::AdmittedIgnoresTool, Request::Admitted { .. }) => {
            let mut keys: Vec<Key> = view
                .session_calls
                .iter()
                .filter(|(_, r)| matches!(r.state, RowState::Admitted { .. }))
                .map(|(k, _)| k.clone())
                .collect();
            keys.sort();
            d.answer = Answer::Admitted(keys);
        }
        (Bug::ReleasesNewestFirst, Request::Releases) => {
            if let Answer::Releases(r) = &mut d.answer {
                r.reverse();
            }
        }
        _ => {}
    }
}

impl Ledger for Shell {
    fn execute(&self, limits: &Limits, req: &Request) -> Result<Answer, LedgerError> {
        let mut g = self.inner.lock().unwrap();
        if g.closed {
            return Err(LedgerError::HandleClosed);
        }
        let mut view = load(self.bug, &g, limits, req);
        if let (Bug::FenceChargesBudget, Request::QueryOrFence { key, outcome }) = (self.bug, req) {
            let used = g.state.ledger_bytes();
            let requested = outcome.len() as u64;
            if !g.state.calls.contains_key(key) && used + requested > limits.max_ledger_bytes {
                return Err(LedgerError::BudgetExhausted {
                    used,
                    requested,
                    max: limits.max_ledger_bytes,
                });
            }
        }
        let (lim, judged) = judge(self.bug, &mut view, limits, req);
        let mut d = match decide(&view, &lim, &judged) {
            Ok(d) => d,
            Err(e) => {
                if let (
                    Bug::RefusedAttachWritesScope,
                    LedgerError::CapacityExhausted { .. },
                    Request::Attach {
                        session,
                        workspace,
                        incarnation,
                        token,
                    },
                ) = (self.bug, &e, req)
                {
                    g.state
                        .apply(&[Effect::PutScope(custos_core::ledger::Scope {
                            session: session.clone(),
                            workspace: workspace.clone(),
                            incarnation: *incarnation,
                            state: ScopeState::Open,
                            attach_token: token.clone(),
                        })]);
                }
                return Err(e);
            }
        };
        distort(self.bug, &mut g, &view, req, &mut d);
        g.state.apply(&d.effects);
        Ok(d.answer)
    }

    fn close(&self) -> Result<(), LedgerError> {
        self.inner.lock().unwrap().closed = true;
        Ok(())
    }

    fn records(&self) -> Result<u64, LedgerError> {
        let g = self.inner.lock().unwrap();
        if g.closed {
            return Err(LedgerError::HandleClosed);
        }
        if self.bug == Bug::RecordsSkipTombstonesAndReleases {
            return Ok((g.state.scopes.len() + g.state.calls.len()) as u64);
        }
        Ok(g.state.records())
    }
}

#[test]
fn every_broken_ledger_backend_fails_a_case() {
    let cases = suite::ledger_cases::<Shell>();
    let failures = |bug| failing_cases(&cases, &move || Shell::new(bug));
    let honest = failures(Bug::None);
    assert!(honest.is_empty(), "the honest shell fails {honest:?}");
    Verdicts::of("ledger", BUGS.iter().copied(), failures).assert_all_caught(8);
}

/// A ledger over a [`Disk`] of acknowledged requests: each open replays the
/// disk into a fresh memory ledger (as the mode allows) and then runs
/// restart recovery, unless the mode skips it.
struct Durable {
    inner: MemoryLedger,
    disk: Arc<Disk<(Limits, Request)>>,
}

impl Durable {
    fn open(disk: &Arc<Disk<(Limits, Request)>>) -> Self {
        let inner = MemoryLedger::new();
        for (limits, req) in disk.replay() {
            let _ = inner.execute(&limits, &req);
        }
        let l = Durable {
            inner,
            disk: Arc::clone(disk),
        };
        if disk.mode() != Durability::SkipsRecovery {
            l.recover().unwrap();
        }
        l
    }
}

impl Ledger for Durable {
    fn execute(&self, limits: &Limits, req: &Request) -> Result<Answer, LedgerError> {
        let before = self.inner.snapshot()?;
        let answer = self.inner.execute(limits, req)?;
        if self.inner.snapshot()? != before {
            self.disk.record((*limits, req.clone()));
        }
        Ok(answer)
    }
    fn close(&self) -> Result<(), LedgerError> {
        self.inner.close()
    }
    fn records(&self) -> Result<u64, LedgerError> {
        self.inner.records()
    }
}

#[test]
fn every_ledger_that_loses_durability_fails_a_reopen_case() {
    let cases = suite::ledger_reopen_cases();
    assert_reopen_caught(
        "ledger reopen",
        &[Durability::Honest],
        DURABILITY_BUGS,
        |mode| reopen_failing_cases(&cases, mode, Durable::open),
    );
}
