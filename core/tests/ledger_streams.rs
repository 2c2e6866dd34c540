//! The ledger's stream checker over random request streams: the real
//! ledger keeps every invariant, the memory port answers what the pure
//! `step` answers, and the checker catches a ledger that forgets a
//! tombstone.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::ledger::*;
use custos_testkit::streams::ledger::{check_ledger_stream, check_ledger_stream_with, LedgerOp};
use proptest::prelude::*;

const L: Limits = Limits {
    max_unclean_scopes: 2,
    max_ledger_bytes: 40,
    reservation_bytes: 16,
};

fn op() -> impl Strategy<Value = LedgerOp> {
    let s = 0u8..2;
    let o = 0u8..3;
    let i = 0u8..3;
    prop_oneof![
        1 => Just(LedgerOp::Open),
        3 => (s.clone(), 0u8..2, i.clone(), 0u8..2).prop_map(|(session, workspace, incarnation, token)| LedgerOp::Attach { session, workspace: workspace / 2, incarnation, token }),
        6 => (s.clone(), o.clone(), i.clone(), 0u8..2, 0u8..2).prop_map(|(session, op, incarnation, token, tool)| LedgerOp::Admit { session, op, incarnation, token, tool }),
        3 => (s.clone(), o.clone(), i.clone(), 0u8..20).prop_map(|(session, op, incarnation, len)| LedgerOp::Finish { session, op, incarnation, len }),
        1 => (s.clone(), o.clone(), i.clone()).prop_map(|(session, op, incarnation)| LedgerOp::MarkUnknown { session, op, incarnation }),
        1 => (s.clone(), o.clone(), i.clone()).prop_map(|(session, op, incarnation)| LedgerOp::Query { session, op, incarnation }),
        2 => (s.clone(), o.clone(), i.clone()).prop_map(|(session, op, incarnation)| LedgerOp::QueryOrFence { session, op, incarnation }),
        2 => (s.clone(), o.clone(), i.clone(), 0u8..2).prop_map(|(session, op, incarnation, tool)| LedgerOp::StopOrFence { session, op, incarnation, tool }),
        3 => (s.clone(), o.clone(), i.clone()).prop_map(|(session, op, incarnation)| LedgerOp::Ack { session, op, incarnation }),
        2 => (s.clone(), i.clone()).prop_map(|(session, incarnation)| LedgerOp::BeginClose { session, incarnation }),
        2 => (s.clone(), i.clone()).prop_map(|(session, incarnation)| LedgerOp::FinishClose { session, incarnation }),
        1 => s.clone().prop_map(|session| LedgerOp::Release { session }),
        1 => s.clone().prop_map(|session| LedgerOp::Unacked { session }),
    ]
}

fn ack_without_tombstone(v: &View, l: &Limits, r: &Request) -> Result<Decision, LedgerError> {
    let mut d = decide(v, l, r)?;
    d.effects.retain(|e| !matches!(e, Effect::PutAck(_)));
    Ok(d)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn streams_keep_every_invariant(ops in proptest::collection::vec(op(), 0..80)) {
        prop_assert_eq!(check_ledger_stream(&ops), Ok(()));
    }

    #[test]
    fn memory_ledger_equals_step(ops in proptest::collection::vec(op(), 0..60)) {
        // The port over the pure state answers what `step` answers.
        let m = MemoryLedger::new();
        let mut s = LedgerState::default();
        for req in custos_testkit::streams::ledger::requests(&ops).unwrap() {
            let a = step(&s, &L, &req);
            let b = m.execute(&L, &req);
            prop_assert_eq!(a.as_ref().map(|x| &x.0), b.as_ref());
            if let Ok((_, next)) = a { s = next; }
        }
        prop_assert_eq!(m.snapshot().unwrap(), s.clone());
        // The state (call rows keyed by a struct) has a written form.
        let text = serde_json::to_string(&s).unwrap();
        prop_assert_eq!(&serde_json::from_str::<LedgerState>(&text).unwrap(), &s);
        let bytes = postcard::to_allocvec(&s).unwrap();
        prop_assert_eq!(&postcard::from_bytes::<LedgerState>(&bytes).unwrap(), &s);
    }
}

#[test]
fn the_checker_catches_an_ack_without_tombstone() {
    // Session 0 attaches; its op 0 is admitted, finished, acknowledged and
    // admitted again.
    let admit = LedgerOp::Admit {
        session: 0,
        op: 0,
        incarnation: 1,
        token: 0,
        tool: 0,
    };
    let ops = [
        LedgerOp::Attach {
            session: 0,
            workspace: 0,
            incarnation: 1,
            token: 0,
        },
        admit,
        LedgerOp::Finish {
            session: 0,
            op: 0,
            incarnation: 1,
            len: 1,
        },
        LedgerOp::Ack {
            session: 0,
            op: 0,
            incarnation: 1,
        },
        admit,
    ];
    assert_eq!(check_ledger_stream(&ops), Ok(()));
    let v = check_ledger_stream_with(ack_without_tombstone, &ops).unwrap_err();
    assert_eq!(v.invariant, "a-key-is-admitted-at-most-once");
}
