//! Differential: random ledger request streams through the pure state
//! (`custos_core::ledger::step`, the oracle), `MemoryLedger`, `SqliteLedger`
//! and `PgLedger` (a private PostgreSQL cluster) must answer identically,
//! request by request, and agree on the stored row count. It lives in the
//! cli's tests because that is where shells are composed: no shell
//! depends on another, not even for tests.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::ledger::{step, Ledger, LedgerState, MemoryLedger};
use custos_postgres::ledger::PgLedger;
use custos_postgres::Target;
use custos_sqlite::ledger::SqliteLedger;
use custos_testkit::pg_cluster::{shared, unique_schema};
use proptest::prelude::*;

fn fresh() -> PgLedger {
    let t = Target::new(shared().unwrap().url(), unique_schema("diff_ledger")).unwrap();
    PgLedger::open(t).unwrap()
}

fn ops() -> impl Strategy<Value = Vec<custos_testkit::streams::ledger::LedgerOp>> {
    use custos_testkit::streams::ledger::LedgerOp as O;
    let op = prop_oneof![
        Just(O::Open),
        (0u8..2, 0u8..2, 1u8..3, 0u8..2).prop_map(|(session, workspace, incarnation, token)| {
            O::Attach {
                session,
                workspace,
                incarnation,
                token,
            }
        }),
        (0u8..2, 0u8..3, 1u8..3, 0u8..2, 0u8..2).prop_map(
            |(session, op, incarnation, token, tool)| {
                O::Admit {
                    session,
                    op,
                    incarnation,
                    token,
                    tool,
                }
            }
        ),
        (0u8..2, 0u8..3, 1u8..3, 0u8..20).prop_map(|(session, op, incarnation, len)| O::Finish {
            session,
            op,
            incarnation,
            len
        }),
        (0u8..2, 0u8..3, 1u8..3).prop_map(|(session, op, incarnation)| O::MarkUnknown {
            session,
            op,
            incarnation
        }),
        (0u8..2, 0u8..3, 1u8..3).prop_map(|(session, op, incarnation)| O::QueryOrFence {
            session,
            op,
            incarnation
        }),
        (0u8..2, 0u8..3, 1u8..3, 0u8..2).prop_map(|(session, op, incarnation, tool)| {
            O::StopOrFence {
                session,
                op,
                incarnation,
                tool,
            }
        }),
        (0u8..2, 0u8..3, 1u8..3).prop_map(|(session, op, incarnation)| O::Ack {
            session,
            op,
            incarnation
        }),
        (0u8..2, 1u8..3).prop_map(|(session, incarnation)| O::BeginClose {
            session,
            incarnation
        }),
        (0u8..2, 1u8..3).prop_map(|(session, incarnation)| O::FinishClose {
            session,
            incarnation
        }),
        (0u8..2).prop_map(|session| O::Release { session }),
        (0u8..2).prop_map(|session| O::Unacked { session }),
        (0u8..2, 0u8..2).prop_map(|(session, tool)| O::Admitted { session, tool }),
    ];
    proptest::collection::vec(op, 0..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// PostgreSQL answers every request exactly as the pure state does, and
    /// as the memory ledger and SQLite do, answer by answer; the stored row
    /// count agrees at the end.
    #[test]
    fn postgres_answers_what_memory_and_sqlite_answer(ops in ops()) {
        let pg = fresh();
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteLedger::open(dir.path().join("ledger.db")).unwrap();
        let memory = MemoryLedger::new();
        let mut state = LedgerState::default();
        let limits = custos_testkit::streams::ledger::STREAM_LIMITS;
        for req in custos_testkit::streams::ledger::requests(&ops).unwrap() {
            let want = step(&state, &limits, &req);
            let answer = want.clone().map(|(a, _)| a);
            prop_assert_eq!(memory.execute(&limits, &req), answer.clone(), "memory: {:?}", req);
            prop_assert_eq!(sqlite.execute(&limits, &req), answer.clone(), "sqlite: {:?}", req);
            prop_assert_eq!(pg.execute(&limits, &req), answer, "postgres: {:?}", req);
            if let Ok((_, next)) = want { state = next; }
        }
        prop_assert_eq!(pg.records(), Ok(state.records()));
        prop_assert_eq!(sqlite.records(), Ok(state.records()));
    }
}
