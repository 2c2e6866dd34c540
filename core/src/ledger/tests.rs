#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

fn sid(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}
fn ws(s: &str) -> WorkspaceId {
    WorkspaceId::new(s).unwrap()
}
fn tok(s: &str) -> AttachToken {
    AttachToken::new(s).unwrap()
}
fn tool(s: &str) -> Tool {
    Tool::new(s).unwrap()
}
fn key(session: &str, op: &str, inc: Incarnation) -> Key {
    Key {
        session: sid(session),
        op: OpId::new(op).unwrap(),
        step: 1,
        source_index: 0,
        incarnation: inc,
    }
}

const L: Limits = Limits {
    max_unclean_scopes: 2,
    max_ledger_bytes: 40,
    reservation_bytes: 16,
};

struct T {
    s: LedgerState,
}

impl T {
    fn new() -> Self {
        T {
            s: LedgerState::default(),
        }
    }
    fn run(&mut self, req: Request) -> Result<Answer, LedgerError> {
        let before = self.s.clone();
        match step(&before, &L, &req) {
            Ok((a, next)) => {
                self.s = next;
                Ok(a)
            }
            Err(e) => Err(e),
        }
    }
    fn attach(&mut self, s: &str, inc: Incarnation, t: &str) -> Result<Answer, LedgerError> {
        self.run(Request::Attach {
            session: sid(s),
            workspace: ws("w"),
            incarnation: inc,
            token: tok(t),
        })
    }
    fn admit(&mut self, k: &Key, t: &str) -> Result<Answer, LedgerError> {
        self.run(Request::Admit {
            key: k.clone(),
            tool: tool("program"),
            token: tok(t),
            request: None,
        })
    }
    fn finish(&mut self, k: &Key, out: &[u8]) -> Result<Answer, LedgerError> {
        self.run(Request::Finish {
            key: k.clone(),
            outcome: out.to_vec(),
        })
    }
    fn ack(&mut self, k: &Key) -> Result<Answer, LedgerError> {
        self.run(Request::Ack { key: k.clone() })
    }
    fn query(&mut self, k: &Key) -> Answer {
        self.run(Request::Query { key: k.clone() }).unwrap()
    }
    fn close(&mut self, s: &str, inc: Incarnation) -> Result<Answer, LedgerError> {
        self.run(Request::BeginClose {
            session: sid(s),
            incarnation: inc,
        })?;
        self.run(Request::FinishClose {
            session: sid(s),
            incarnation: inc,
        })
    }
}

fn fresh() -> Answer {
    Answer::Admission(Admission::Fresh)
}
fn existing(c: CallState) -> Answer {
    Answer::Admission(Admission::Existing(c))
}

fn admit_as(k: &Key, t: &str, id: &str) -> Request {
    Request::Admit {
        key: k.clone(),
        tool: tool("program"),
        token: tok(t),
        request: Some(RequestId::new(id).unwrap()),
    }
}

#[test]
fn a_retried_admission_gets_its_own_fresh_and_writes_nothing() {
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    assert_eq!(t.run(admit_as(&k, "a", "r1")), Ok(fresh()));
    let stored = t.s.clone();
    // The reply was lost: the same request again is its own answer.
    assert_eq!(t.run(admit_as(&k, "a", "r1")), Ok(fresh()));
    assert_eq!(t.s, stored, "a recognised retry writes nothing");
    // Any other admission of the key is not.
    assert_eq!(
        t.run(admit_as(&k, "a", "r2")),
        Ok(existing(CallState::Admitted))
    );
    assert_eq!(t.admit(&k, "a"), Ok(existing(CallState::Admitted)));
}

#[test]
fn a_retried_admission_is_not_fresh_once_the_row_moved_on() {
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    assert_eq!(t.run(admit_as(&k, "a", "r1")), Ok(fresh()));
    // A stop settled the row: the late retry must not start the call.
    t.run(Request::StopOrFence {
        key: k.clone(),
        tool: tool("program"),
    })
    .unwrap();
    assert_eq!(
        t.run(admit_as(&k, "a", "r1")),
        Ok(existing(CallState::Unknown))
    );
    // Recovery and a takeover: the old process's retry is stale.
    let k2 = key("s", "p", 1);
    assert_eq!(t.run(admit_as(&k2, "a", "r3")), Ok(fresh()));
    t.run(Request::Open).unwrap();
    t.attach("s", 1, "b").unwrap();
    assert_eq!(
        t.run(admit_as(&k2, "a", "r3")),
        Err(LedgerError::StaleToken)
    );
    assert_eq!(
        t.run(admit_as(&k2, "b", "r3")),
        Ok(existing(CallState::Unknown))
    );
    // A scope closed since is finished: the retry is refused, not Fresh.
    let k3 = key("s", "q", 1);
    assert_eq!(t.run(admit_as(&k3, "b", "r4")), Ok(fresh()));
    t.close("s", 1).unwrap();
    assert!(matches!(
        t.run(admit_as(&k3, "b", "r4")),
        Err(LedgerError::ScopeNotOpen { .. })
    ));
}

#[test]
fn a_retried_finish_is_finished_and_writes_nothing() {
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    t.admit(&k, "a").unwrap();
    assert_eq!(t.finish(&k, b"ok"), Ok(Answer::Finished));
    let stored = t.s.clone();
    assert_eq!(t.finish(&k, b"ok"), Ok(Answer::Finished));
    assert_eq!(t.s, stored);
    // Another outcome is not the same request.
    assert_eq!(
        t.finish(&k, b"no"),
        Err(LedgerError::NotAdmitted {
            state: CallKind::Terminal
        })
    );
    // A fence's row is not a finish, whatever its bytes.
    let f = key("s", "f", 1);
    t.run(Request::QueryOrFence {
        key: f.clone(),
        outcome: b"ok".to_vec(),
    })
    .unwrap();
    assert_eq!(
        t.finish(&f, b"ok"),
        Err(LedgerError::NotAdmitted {
            state: CallKind::Terminal
        })
    );
}

#[test]
fn admit_is_fresh_once_then_existing() {
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    assert_eq!(t.admit(&k, "a"), Ok(fresh()));
    assert_eq!(t.admit(&k, "a"), Ok(existing(CallState::Admitted)));
    t.finish(&k, b"ok").unwrap();
    assert_eq!(
        t.admit(&k, "a"),
        Ok(existing(CallState::Terminal(b"ok".to_vec())))
    );
    assert_eq!(t.s.ledger_bytes(), 2);
}

#[test]
fn admit_compares_token_and_incarnation_by_value() {
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    // A restarted process takes over with a new token.
    t.attach("s", 1, "b").unwrap();
    let k = key("s", "o", 1);
    assert_eq!(t.admit(&k, "a"), Err(LedgerError::StaleToken));
    assert_eq!(
        t.admit(&key("s", "o", 2), "b"),
        Err(LedgerError::StaleIncarnation {
            stored: 1,
            requested: 2
        })
    );
    // Same value, a different allocation: by value, so admitted.
    assert_eq!(t.admit(&k, &String::from("b")), Ok(fresh()));
    assert!(matches!(
        t.admit(&key("x", "o", 1), "b"),
        Err(LedgerError::UnknownScope { .. })
    ));
}

#[test]
fn an_acknowledged_key_is_never_admitted_again_in_its_incarnation() {
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    t.admit(&k, "a").unwrap();
    assert_eq!(t.ack(&k), Err(LedgerError::CallRunning));
    t.finish(&k, b"done").unwrap();
    assert_eq!(t.ack(&k), Ok(Answer::Acked { already: false }));
    assert_eq!(t.ack(&k), Ok(Answer::Acked { already: true }));
    assert!(t.s.calls.is_empty());
    assert_eq!(t.s.ledger_bytes(), 0);
    assert_eq!(t.admit(&k, "a"), Ok(existing(CallState::Acked)));
    assert_eq!(t.query(&k), Answer::Lookup(Lookup::Found(CallState::Acked)));
    assert_eq!(
        t.run(Request::QueryOrFence {
            key: k.clone(),
            outcome: b"x".to_vec()
        }),
        Ok(Answer::Fencing(Fencing::Standing(CallState::Acked)))
    );
    assert_eq!(
        t.run(Request::StopOrFence {
            key: k.clone(),
            tool: tool("program")
        }),
        Ok(Answer::Stopping(Stopping::Untouched(CallState::Acked)))
    );
}

#[test]
fn a_fence_with_no_row_inserts_a_terminal_row_and_blocks_admission() {
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    assert_eq!(t.query(&k), Answer::Lookup(Lookup::Missing));
    let fence = Request::QueryOrFence {
        key: k.clone(),
        outcome: b"did-not-start".to_vec(),
    };
    assert_eq!(t.run(fence.clone()), Ok(Answer::Fencing(Fencing::Fenced)));
    assert_eq!(t.s.calls[&k].tool, Tool::fence());
    let dns = CallState::Terminal(b"did-not-start".to_vec());
    assert_eq!(t.admit(&k, "a"), Ok(existing(dns.clone())));
    assert_eq!(t.run(fence), Ok(Answer::Fencing(Fencing::Standing(dns))));
    // Incarnation checked, token not.
    assert!(matches!(
        t.run(Request::QueryOrFence {
            key: key("s", "p", 0),
            outcome: vec![]
        }),
        Err(LedgerError::StaleIncarnation { .. })
    ));
}

#[test]
fn a_fence_skips_the_byte_budget() {
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    t.admit(&key("s", "a", 1), "a").unwrap();
    t.admit(&key("s", "b", 1), "a").unwrap();
    assert!(matches!(
        t.admit(&key("s", "c", 1), "a"),
        Err(LedgerError::BudgetExhausted {
            used: 32,
            requested: 16,
            max: 40
        })
    ));
    let fenced = t.run(Request::QueryOrFence {
        key: key("s", "c", 1),
        outcome: vec![0; 16],
    });
    assert_eq!(fenced, Ok(Answer::Fencing(Fencing::Fenced)));
    assert_eq!(t.s.ledger_bytes(), 48);
}

#[test]
fn a_stop_with_no_row_bars_the_key_from_a_later_start() {
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    let stop = |k: &Key, tl: &str| Request::StopOrFence {
        key: k.clone(),
        tool: tool(tl),
    };
    assert_eq!(
        t.run(stop(&k, "program")),
        Ok(Answer::Stopping(Stopping::Barred))
    );
    assert_eq!(t.admit(&k, "a"), Ok(existing(CallState::Unknown)));
    // A running row of the same tool is stopped and its bytes released.
    let k2 = key("s", "p", 1);
    t.admit(&k2, "a").unwrap();
    assert_eq!(t.s.ledger_bytes(), 16);
    assert_eq!(
        t.run(stop(&k2, "other")),
        Ok(Answer::Stopping(Stopping::Untouched(CallState::Admitted)))
    );
    assert_eq!(
        t.run(stop(&k2, "program")),
        Ok(Answer::Stopping(Stopping::Stopped))
    );
    assert_eq!(t.s.ledger_bytes(), 0);
    assert_eq!(
        t.run(stop(&k2, "program")),
        Ok(Answer::Stopping(Stopping::Untouched(CallState::Unknown)))
    );
}

#[test]
fn open_is_restart_recovery() {
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    let (a, b) = (key("s", "a", 1), key("s", "b", 1));
    t.admit(&a, "a").unwrap();
    t.admit(&b, "a").unwrap();
    t.finish(&b, b"r").unwrap();
    assert_eq!(t.run(Request::Open), Ok(Answer::Recovered(1)));
    assert_eq!(
        t.query(&a),
        Answer::Lookup(Lookup::Found(CallState::Unknown))
    );
    assert_eq!(t.s.ledger_bytes(), 1);
    assert_eq!(t.run(Request::Open), Ok(Answer::Recovered(0)));
    let m = MemoryLedger::open(t.s.clone()).unwrap();
    assert_eq!(m.snapshot().unwrap(), t.s);
}

/// Limits that reserve more than a backend reads back still cannot store
/// an unreadable outcome: the decision refuses it at the stored bound, in
/// `finish` and in a fence. The outcome is a zeroed allocation the refusal
/// never touches.
#[test]
fn an_outcome_over_the_stored_bound_is_refused_whatever_the_limits() {
    let over = MAX_STORED_OUTCOME_BYTES as u64 + 1;
    let loose = Limits {
        max_unclean_scopes: 2,
        max_ledger_bytes: 4 * over,
        reservation_bytes: 2 * over,
    };
    let mut s = LedgerState::default();
    let k = key("s", "a", 1);
    for req in [
        Request::Attach {
            session: sid("s"),
            workspace: ws("w"),
            incarnation: 1,
            token: tok("a"),
        },
        Request::Admit {
            key: k.clone(),
            tool: tool("program"),
            token: tok("a"),
            request: None,
        },
    ] {
        s = step(&s, &loose, &req).unwrap().1;
    }
    let big = Request::Finish {
        key: k.clone(),
        outcome: vec![0; MAX_STORED_OUTCOME_BYTES + 1],
    };
    let refused = Err(LedgerError::OutcomeTooLarge {
        bytes: over,
        max: over - 1,
    });
    assert_eq!(step(&s, &loose, &big).map(|(a, _)| a), refused);
    let fence = Request::QueryOrFence {
        key: key("s", "b", 1),
        outcome: vec![0; MAX_STORED_OUTCOME_BYTES + 1],
    };
    assert_eq!(step(&s, &loose, &fence).map(|(a, _)| a), refused);
    let fits = Request::Finish {
        key: k,
        outcome: vec![0; 8],
    };
    assert_eq!(
        step(&s, &loose, &fits).map(|(a, _)| a),
        Ok(Answer::Finished)
    );
}

#[test]
fn budget_counts_reservations_and_terminal_sizes() {
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    let (a, b, c) = (key("s", "a", 1), key("s", "b", 1), key("s", "c", 1));
    t.admit(&a, "a").unwrap();
    t.admit(&b, "a").unwrap();
    assert!(matches!(
        t.admit(&c, "a"),
        Err(LedgerError::BudgetExhausted { .. })
    ));
    assert_eq!(
        t.finish(&a, &[0; 17]),
        Err(LedgerError::OutcomeTooLarge { bytes: 17, max: 16 })
    );
    t.finish(&a, &[0; 8]).unwrap();
    assert_eq!(t.admit(&c, "a"), Ok(fresh()));
    assert_eq!(t.s.ledger_bytes(), 40);
    t.run(Request::MarkUnknown { key: b.clone() }).unwrap();
    assert_eq!(t.s.ledger_bytes(), 24);
    assert_eq!(
        t.run(Request::MarkUnknown { key: b.clone() }),
        Ok(Answer::MarkedUnknown)
    );
    assert_eq!(
        t.finish(&b, b""),
        Err(LedgerError::NotAdmitted {
            state: CallKind::Unknown
        })
    );
    assert!(matches!(
        t.finish(&key("s", "z", 1), b""),
        Err(LedgerError::UnknownCall { .. })
    ));
}

#[test]
fn digest_mismatch_is_reported_on_every_read() {
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    let k = key("s", "o", 1);
    t.admit(&k, "a").unwrap();
    t.finish(&k, b"good").unwrap();
    if let Some(CallRow {
        state: RowState::Terminal { outcome, .. },
        ..
    }) = t.s.calls.get_mut(&k)
    {
        outcome[0] = b'G';
    }
    let bad = Err(LedgerError::DigestMismatch { key: k.clone() });
    assert_eq!(t.run(Request::Query { key: k.clone() }), bad);
    assert_eq!(t.admit(&k, "a"), bad);
    assert_eq!(t.ack(&k), bad);
    assert_eq!(t.run(Request::Unacked { session: sid("s") }), bad);
    // A size that disagrees is caught too.
    if let Some(CallRow {
        state: RowState::Terminal { outcome, bytes, .. },
        ..
    }) = t.s.calls.get_mut(&k)
    {
        outcome[0] = b'g';
        *bytes = 5;
    }
    assert_eq!(t.run(Request::Query { key: k.clone() }), bad);
}

#[test]
fn scope_rules_close_reopen_release() {
    let mut t = T::new();
    first_incarnation_closes_clean(&mut t);
    second_incarnation_closes_unclean_and_is_released(&mut t);
}

/// Incarnation 1 of `s`: one workspace, no reopen while open, `finish_close`
/// only after `begin_close`, a clean close drops the tombstones, and only
/// `incarnation + 1` reopens; a clean scope is not releasable.
fn first_incarnation_closes_clean(t: &mut T) {
    t.attach("s", 1, "a").unwrap();
    assert!(matches!(
        t.run(Request::Attach {
            session: sid("s"),
            workspace: ws("other"),
            incarnation: 1,
            token: tok("a")
        }),
        Err(LedgerError::WorkspaceMismatch { .. })
    ));
    let k = key("s", "o", 1);
    t.admit(&k, "a").unwrap();
    t.finish(&k, b"r").unwrap();
    t.ack(&k).unwrap();
    // Reopen while open is refused.
    assert!(matches!(
        t.attach("s", 2, "a"),
        Err(LedgerError::NotReopenable { .. })
    ));
    assert_eq!(
        t.run(Request::FinishClose {
            session: sid("s"),
            incarnation: 1
        }),
        Err(LedgerError::NotClosing {
            state: ScopeState::Open
        })
    );
    assert_eq!(
        t.close("s", 1),
        Ok(Answer::Closed(CloseOutcome::AllRetired))
    );
    // AllRetired drops the tombstones.
    assert!(t.s.acks.is_empty());
    assert_eq!(
        t.admit(&k, "a"),
        Err(LedgerError::ScopeNotOpen {
            state: ScopeState::Closed(CloseOutcome::AllRetired)
        })
    );
    assert!(matches!(
        t.attach("s", 3, "a"),
        Err(LedgerError::NotReopenable { .. })
    ));
    assert!(matches!(
        t.attach("s", 0, "a"),
        Err(LedgerError::StaleIncarnation { .. })
    ));
    assert_eq!(
        t.run(Request::Release {
            session: sid("s"),
            now: 1
        }),
        Err(LedgerError::NotReleasable {
            state: ScopeState::Closed(CloseOutcome::AllRetired)
        })
    );
}

/// Incarnation 2 of `s` (after [`first_incarnation_closes_clean`]): a
/// closing scope admits nothing, an unclean close keeps its tombstones and
/// never reopens by itself, `release` is its exit (recorded, tombstones
/// dropped), and an open scope is not releasable.
fn second_incarnation_closes_unclean_and_is_released(t: &mut T) {
    t.attach("s", 2, "b").unwrap();
    let k2 = key("s", "o", 2);
    assert_eq!(t.admit(&k2, "b"), Ok(fresh()));
    t.run(Request::MarkUnknown { key: k2.clone() }).unwrap();
    let k3 = key("s", "p", 2);
    t.admit(&k3, "b").unwrap();
    t.finish(&k3, b"x").unwrap();
    t.ack(&k3).unwrap();
    t.run(Request::BeginClose {
        session: sid("s"),
        incarnation: 2,
    })
    .unwrap();
    assert_eq!(
        t.admit(&key("s", "q", 2), "b"),
        Err(LedgerError::ScopeClosing)
    );
    assert_eq!(
        t.run(Request::FinishClose {
            session: sid("s"),
            incarnation: 2
        }),
        Ok(Answer::Closed(CloseOutcome::UnknownCleanup(1)))
    );
    // Unknown cleanup keeps tombstones and never reopens by itself.
    assert_eq!(t.s.acks.len(), 1);
    assert_eq!(
        t.attach("s", 3, "c"),
        Err(LedgerError::UncleanClose { unretired: 1 })
    );
    // Idempotent finish_close.
    assert_eq!(
        t.run(Request::FinishClose {
            session: sid("s"),
            incarnation: 2
        }),
        Ok(Answer::Closed(CloseOutcome::UnknownCleanup(1)))
    );
    let rel = t
        .run(Request::Release {
            session: sid("s"),
            now: 77,
        })
        .unwrap();
    assert_eq!(
        rel,
        Answer::Released(Release {
            session: sid("s"),
            workspace: ws("w"),
            incarnation: 2,
            was: ScopeState::Closed(CloseOutcome::UnknownCleanup(1)),
            released_at_ms: 77
        })
    );
    assert!(t.s.acks.is_empty());
    assert_eq!(
        t.run(Request::Releases)
            .map(|a| matches!(a, Answer::Releases(r) if r.len() == 1)),
        Ok(true)
    );
    t.attach("s", 3, "c").unwrap();
    assert_eq!(
        t.run(Request::Release {
            session: sid("s"),
            now: 78
        }),
        Err(LedgerError::NotReleasable {
            state: ScopeState::Open
        })
    );
}

#[test]
fn unclean_scopes_are_bounded_and_a_clean_close_frees_a_slot() {
    let mut t = T::new();
    t.attach("a", 1, "t").unwrap();
    t.attach("b", 1, "t").unwrap();
    assert_eq!(
        t.attach("c", 1, "t"),
        Err(LedgerError::CapacityExhausted { max: 2 })
    );
    t.close("a", 1).unwrap();
    t.attach("c", 1, "t").unwrap();
    // Reopening a clean scope needs a slot too.
    assert_eq!(
        t.attach("a", 2, "t"),
        Err(LedgerError::CapacityExhausted { max: 2 })
    );
}

#[test]
fn attach_lists_unacked_and_unacked_changes_nothing() {
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    let (a, b, c) = (key("s", "a", 1), key("s", "b", 1), key("s", "c", 1));
    t.admit(&a, "a").unwrap();
    t.admit(&b, "a").unwrap();
    t.finish(&a, b"r").unwrap();
    t.run(Request::MarkUnknown { key: b.clone() }).unwrap();
    t.admit(&c, "a").unwrap();
    let before = t.s.clone();
    let u = Unacked {
        terminal: vec![a.clone()],
        unknown: vec![b.clone()],
    };
    assert_eq!(
        t.run(Request::Unacked { session: sid("s") }),
        Ok(Answer::Unacked(u.clone()))
    );
    assert_eq!(t.s, before);
    assert_eq!(
        t.run(Request::Admitted {
            session: sid("s"),
            tool: tool("program")
        }),
        Ok(Answer::Admitted(vec![c.clone()]))
    );
    match t.attach("s", 1, "z").unwrap() {
        Answer::Attached(at) => {
            assert_eq!(at.unacked, u);
            assert_eq!(at.scope.attach_token, tok("z"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn names_are_validated_and_errors_carry_stable_reasons() {
    assert!(SessionId::new("").is_err());
    assert!(Tool::new("a\u{0}b").is_err());
    assert!(OpId::new("x".repeat(MAX_NAME_LEN + 1)).is_err());
    assert!(serde_json::from_str::<SessionId>("\"\"").is_err());
    assert!(LedgerError::StaleToken
        .to_string()
        .starts_with("StaleToken"));
    assert!(LedgerError::DigestMismatch {
        key: key("s", "o", 1)
    }
    .to_string()
    .starts_with("DigestMismatch"));
    let d = Limits::default();
    assert_eq!(d.max_ledger_bytes, 512 * 1024 * 1024);
    assert_eq!(d.reservation_bytes, 16 * 1024 * 1024);
    assert_eq!(d.max_unclean_scopes, 16);
    let e = LedgerError::UncleanClose { unretired: 2 };
    let j = serde_json::to_string(&e).unwrap();
    assert_eq!(serde_json::from_str::<LedgerError>(&j).unwrap(), e);
}

#[test]
fn footprints_name_only_what_the_decision_reads() {
    // Deciding over the footprint's view equals deciding over a view that
    // holds everything: nothing outside the footprint matters.
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    t.attach("u", 1, "a").unwrap();
    t.admit(&key("s", "a", 1), "a").unwrap();
    t.finish(&key("s", "a", 1), b"r").unwrap();
    t.admit(&key("u", "a", 1), "a").unwrap();
    let reqs = [
        Request::Open,
        Request::Admit {
            key: key("s", "c", 1),
            tool: tool("program"),
            token: tok("a"),
            request: None,
        },
        Request::Ack {
            key: key("s", "a", 1),
        },
        Request::FinishClose {
            session: sid("s"),
            incarnation: 1,
        },
    ];
    for req in reqs {
        let fp = req.footprint();
        let narrow = t.s.view(&fp);
        let mut wide = t.s.view(&Footprint {
            all_admitted: true,
            totals: true,
            releases: true,
            ..fp.clone()
        });
        if fp.session_calls.is_none() {
            wide.session_calls.clear();
        }
        if !fp.all_admitted {
            wide.admitted.clear();
        }
        assert_eq!(
            decide(&narrow, &L, &req).map(|d| d.answer),
            decide(&wide, &L, &req).map(|d| d.answer)
        );
    }
}

#[test]
fn memory_ledger_port_and_close() {
    let m = MemoryLedger::new();
    let l = Limits::default();
    m.attach(&l, &sid("s"), &ws("w"), 1, &tok("a")).unwrap();
    let k = key("s", "o", 1);
    assert_eq!(m.admit(&l, &k, &tool("p"), &tok("a")), Ok(Admission::Fresh));
    m.finish(&l, &k, b"r").unwrap();
    assert!(!m.ack(&l, &k).unwrap());
    assert_eq!(m.recover(), Ok(0));
    m.close().unwrap();
    assert_eq!(m.query(&l, &k), Err(LedgerError::HandleClosed));
}

#[test]
fn call_kinds_have_their_names_and_every_row_kind_is_counted() {
    let names: Vec<String> = [
        CallKind::Admitted,
        CallKind::Terminal,
        CallKind::Unknown,
        CallKind::Acked,
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    assert_eq!(names, ["admitted", "terminal", "unknown", "acked"]);

    let m = MemoryLedger::new();
    let l = Limits::default();
    assert_eq!(m.records(), Ok(0));
    assert_eq!(m.scope(&l, &sid("s")), Ok(None));
    m.attach(&l, &sid("s"), &ws("w"), 1, &tok("a")).unwrap();
    assert!(m.scope(&l, &sid("s")).unwrap().is_some());
    let (k1, k2) = (key("s", "o1", 1), key("s", "o2", 1));
    for k in [&k1, &k2] {
        assert_eq!(m.admit(&l, k, &tool("p"), &tok("a")), Ok(Admission::Fresh));
    }
    m.mark_unknown(&l, &k2).unwrap();
    assert_eq!(m.query(&l, &k2), Ok(Lookup::Found(CallState::Unknown)));
    m.finish(&l, &k1, b"r").unwrap();
    m.ack(&l, &k1).unwrap();
    // One scope, one call row (k2), one tombstone (k1), no release: a sum
    // no product or difference of the four counts equals.
    let mut t = T::new();
    t.attach("s", 1, "a").unwrap();
    t.admit(&k1, "a").unwrap();
    t.finish(&k1, b"r").unwrap();
    t.ack(&k1).unwrap();
    t.admit(&k2, "a").unwrap();
    let s = &t.s;
    assert_eq!(
        (
            s.scopes.len(),
            s.calls.len(),
            s.acks.len(),
            s.releases.len()
        ),
        (1, 1, 1, 0)
    );
    assert_eq!(s.records(), 3);
    assert_eq!(m.records(), Ok(3));
    // Release-log rows count too (two, so that no sign or product of the
    // last term gives the same total).
    let mut with_releases = s.clone();
    for at in [1, 2] {
        with_releases.releases.push(Release {
            session: sid("s"),
            workspace: ws("w"),
            incarnation: 1,
            was: ScopeState::Open,
            released_at_ms: at,
        });
    }
    assert_eq!(with_releases.records(), 5);
}
