//! The migration machine through its simulated environment: each request
//! at each step, refusals and their reasons, drift, ambiguous commits, cold
//! verification and the receipt.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::fence::Epoch;
use custos_core::migration::verify::Discrepancy;
use custos_core::migration::*;
use custos_testkit::simulate::{self, Fault, Fixture, Machine, Sim, SimOp};
use custos_testkit::streams::migration::check_clean_run;

fn fx() -> Fixture {
    Fixture::new().unwrap()
}

fn run(fx: &Fixture, held: Option<Digest>) -> State {
    State {
        run: Run::new(fx.migration.clone(), held),
        destination: Destination::default(),
    }
}

#[test]
fn uri_refuses_credentials_and_normalizes() {
    for bad in [
        "file://user:pw@host/p",
        "file://u@/p",
        "file:///p?token=x",
        "file:///p#frag",
        "file:///p%40x",
        "s3://bucket/key?X-Amz-Signature=1",
    ] {
        assert!(
            matches!(
                NormalizedUri::parse(bad),
                Err(DataError::CredentialBearingUri(_))
            ),
            "{bad}"
        );
    }
    for bad in [
        "",
        "file:/p",
        "file:///a//b",
        "file:///a/../b",
        "file:///a/",
        "1x://h/p",
        "file:///a\u{a0}b",
        "file:///a\tb",
        "s3://buck et/p",
    ] {
        assert!(NormalizedUri::parse(bad).is_err(), "{bad}");
    }
    // A space is a path character (a directory may be named so); no other
    // whitespace is.
    assert_eq!(
        NormalizedUri::parse("file:///my data/a b").unwrap().path(),
        "/my data/a b"
    );
    // A URI of exactly the bound is one; a byte more is refused.
    let at = |len: usize| format!("file:///{}", "a".repeat(len - "file:///".len()));
    assert_eq!(
        NormalizedUri::parse(&at(MAX_URI_LEN))
            .unwrap()
            .as_str()
            .len(),
        MAX_URI_LEN
    );
    assert_eq!(
        NormalizedUri::parse(&at(MAX_URI_LEN + 1)),
        Err(DataError::InvalidUri(UriProblem::Shape))
    );
    // A refusal says what is wrong with the text, in words.
    for (bad, says) in [
        ("file://u@/p", "userinfo is not allowed"),
        ("file:///p?t=x", "a query is not allowed"),
        ("file:///a/", "trailing slash"),
        ("1x://h/p", "scheme must be [a-z][a-z0-9+.-]*"),
    ] {
        let e = NormalizedUri::parse(bad).unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
    let u = NormalizedUri::parse("FILE://LocalHost/srv/x").unwrap();
    assert_eq!(u.as_str(), "file:///srv/x");
    assert!(u.is_local_file());
    // A local file is both: scheme `file` and no host.
    for (text, local) in [
        ("file:///srv/x", true),
        ("file://nas/srv/x", false),
        ("s3://bucket/key", false),
        ("s3:///key", false),
    ] {
        let u = NormalizedUri::parse(text).unwrap();
        assert_eq!(u.is_local_file(), local, "{text}");
    }
    // Deserialization accepts only the normalized form.
    assert!(serde_json::from_str::<NormalizedUri>("\"FILE:///srv/x\"").is_err());
    assert!(serde_json::from_str::<NormalizedUri>("\"file://a@b/x\"").is_err());
    assert_eq!(
        serde_json::from_str::<NormalizedUri>("\"file:///srv/x\"").unwrap(),
        u
    );
    let root = NormalizedUri::parse("file:///srv").unwrap();
    let sib = NormalizedUri::parse("file:///srvx").unwrap();
    assert!(root.contains(&u) && !root.contains(&sib) && root.disjoint(&sib));
    // Containment needs the same scheme and the same authority.
    let nas = NormalizedUri::parse("file://nas/srv").unwrap();
    assert!(
        !nas.contains(&u) && !root.contains(&NormalizedUri::parse("file://nas/srv/x").unwrap())
    );
    let s3 = NormalizedUri::parse("s3://b/srv").unwrap();
    assert!(!s3.contains(&NormalizedUri::parse("s3://c/srv/x").unwrap()));
    assert!(!root.contains(&NormalizedUri::parse("s3:///srv/x").unwrap()));
}

#[test]
fn plan_round_trips_canonically_and_refuses_tampering() {
    let fx = fx();
    let plan = fx.plan(0, 3, 0);
    plan.check().unwrap();
    let bytes = plan.canonical();
    assert_eq!(Plan::decode(&bytes).unwrap(), plan);
    // Whitespace: same value, not canonical.
    let mut spaced = b" ".to_vec();
    spaced.extend_from_slice(&bytes);
    assert_eq!(Plan::decode(&spaced), Err(DataError::NonCanonical));
    // A missing field is malformed, never a default.
    let text = String::from_utf8(bytes.clone()).unwrap();
    let missing = text.replacen("\"format\":1,", "", 1);
    assert!(matches!(
        Plan::decode(missing.as_bytes()),
        Err(DataError::Malformed(_))
    ));
    // An unknown field is malformed.
    let extra = text.replacen("{\"format\":1,", "{\"format\":1,\"secret\":\"x\",", 1);
    assert!(matches!(
        Plan::decode(extra.as_bytes()),
        Err(DataError::Malformed(_))
    ));
    // A credential smuggled into a URI does not decode.
    let cred = text.replacen("file:///srv/source/warehouse", "file://u:p@h/srv/w", 1);
    assert!(matches!(
        Plan::decode(cred.as_bytes()),
        Err(DataError::Malformed(_))
    ));
    assert_ne!(fx.plan(0, 4, 0).digest(), plan.digest());
}

#[test]
fn plan_check_refuses_structural_errors() {
    let fx = fx();
    let mut p = fx.plan(0, 3, 0);
    p.destination = p.source.clone();
    assert!(p.check().is_err());
    let mut p = fx.plan(0, 3, 0);
    p.tables.reverse();
    assert!(p.check().is_err());
    let mut p = fx.plan(0, 3, 0);
    p.destination_artifact_root = NormalizedUri::parse("file:///srv/source/artifacts/x").unwrap();
    assert!(p.check().is_err());
    let mut p = fx.plan(0, 3, 0);
    p.tables[1].destination_content_digest = Digest::of(b"other");
    assert!(p.check().is_err());
}

#[test]
fn the_clean_workflow_visits_every_step_in_order() {
    let fx = fx();
    let mut sim = Sim::new(&fx);
    let mut steps = Vec::new();
    for _ in 0..64 {
        let simulate::Driver::Running(run) = &sim.drivers[0] else {
            break;
        };
        let st = State {
            run: run.clone(),
            destination: sim.dest.clone(),
        };
        let plan = sim.dest.reservation.as_ref().map(|r| &r.plan);
        let step = next_step(&st).unwrap().step(plan);
        if steps.last() != Some(&step) {
            steps.push(step);
        }
        sim.apply(&fx, &Machine::REAL, SimOp::Step(0, Fault::None));
        assert_eq!(sim.broken, 0);
    }
    assert_eq!(steps, STEPS.to_vec());
    let r = sim.dest.reservation.as_ref().unwrap();
    assert_eq!(r.status, Status::Completed);
    let stored = r.receipt.clone().unwrap();
    assert_eq!(StoredReceipt::decode(&stored.encode()).unwrap(), stored);
    assert_eq!(stored.receipt.plan_digest, r.plan_digest);
    assert_eq!(stored.receipt.control.fence_floors, 1);
    // A retry of the completed plan returns the exact stored receipt.
    let st = State {
        run: Run::new(fx.migration.clone(), Some(r.plan_digest)),
        destination: sim.dest.clone(),
    };
    assert_eq!(next_step(&st), Ok(Next::Done(Box::new(stored.clone()))));
    let d = decide(
        &st,
        &Request::Complete {
            version: fx.version.clone(),
            now: 99,
        },
    )
    .unwrap();
    assert_eq!(
        d.outcome,
        Outcome::Completed {
            receipt: Box::new(stored),
            repeated: true
        }
    );
    assert_eq!(d.next, st);
    // No source read and no cold verification after completion.
    assert!(matches!(
        decide(
            &st,
            &Request::Validate {
                report: preflight(&fx)
            }
        ),
        Err(MigrationError::SourceClosed)
    ));
    assert!(decide(
        &st,
        &Request::ColdVerify {
            evidence: r.cold.clone().unwrap().0
        }
    )
    .is_err());
}

fn preflight(fx: &Fixture) -> Preflight {
    let e = |id: &StorageIdentity| EndpointFacts {
        identity: id.clone(),
        catalog: Locality::Local,
        control: Locality::Local,
        objects: Locality::Local,
        audit: Some(id.clone()),
        activity_records: 0,
    };
    Preflight {
        source: e(&fx.source),
        destination: e(&fx.destination),
        unsettled_commands: 0,
        running_evaluations: 0,
        unreadable_objects: 0,
        source_tables: 1,
        source_control_records: 1,
        destination_tables: 0,
        destination_control_records: 0,
        conflicting_destination_objects: 0,
        departures: custos_core::migration::departure::Departures::default(),
    }
}

#[test]
fn preflight_refusals_have_stable_reasons() {
    let fx = fx();
    let st = run(&fx, None);
    let check = |p: Preflight, reason: &str| {
        let e = decide(&st, &Request::Validate { report: p }).unwrap_err();
        assert!(e.to_string().starts_with(reason), "{e} vs {reason}");
    };
    let mut p = preflight(&fx);
    p.source.catalog = Locality::Remote;
    check(p, "endpoint-outside-local-v1");
    let mut p = preflight(&fx);
    p.destination.audit = None;
    check(p, "audit-identity-unbound");
    let mut p = preflight(&fx);
    p.destination = p.source.clone();
    check(p, "identical-storage-identity");
    // One endpoint inside the other, either way round, at any depth.
    for (inner, outer, side) in [
        ("file:///t/src/inner", "file:///t/src", "destination"),
        (
            "file:///t/src/default/inner",
            "file:///t/src",
            "destination",
        ),
        ("file:///t/dst/x", "file:///t/dst", "source"),
    ] {
        let mut p = preflight(&fx);
        let (a, b) = if side == "destination" {
            (outer, inner)
        } else {
            (inner, outer)
        };
        for (e, uri) in [(&mut p.source, a), (&mut p.destination, b)] {
            e.identity = with_uri(&e.identity, uri);
            e.audit = Some(e.identity.clone());
        }
        let e = decide(&st, &Request::Validate { report: p }).unwrap_err();
        assert_eq!(
            e,
            MigrationError::NestedIdentity(side.into()),
            "{inner} {outer}"
        );
        assert!(e.to_string().starts_with("nested-storage-identity"));
    }
    // A source with no control record and no table is a wrong path.
    let mut p = preflight(&fx);
    p.source_tables = 0;
    p.source_control_records = 0;
    check(p.clone(), "source-not-found");
    p.source_control_records = 1;
    assert!(decide(&st, &Request::Validate { report: p.clone() }).is_ok());
    p.source_control_records = 0;
    p.source_tables = 1;
    assert!(decide(&st, &Request::Validate { report: p }).is_ok());
    // Siblings that share a prefix are not nested.
    let mut p = preflight(&fx);
    for (e, uri) in [
        (&mut p.source, "file:///t/src"),
        (&mut p.destination, "file:///t/src2"),
    ] {
        e.identity = with_uri(&e.identity, uri);
        e.audit = Some(e.identity.clone());
    }
    assert!(decide(&st, &Request::Validate { report: p }).is_ok());
    let mut p = preflight(&fx);
    p.unsettled_commands = 1;
    check(p, "source-not-quiescent");
    let mut p = preflight(&fx);
    p.source.activity_records = 1;
    check(p, "activity-history-present");
    let mut p = preflight(&fx);
    p.destination.activity_records = 1;
    check(p, "activity-history-present");
    let mut p = preflight(&fx);
    p.destination_tables = 1;
    check(p, "destination-not-empty");
    let mut p = preflight(&fx);
    p.unreadable_objects = 1;
    check(p, "artifact-unreadable");
    assert!(decide(
        &st,
        &Request::Validate {
            report: preflight(&fx)
        }
    )
    .is_ok());
}

/// `id` at another uri.
fn with_uri(id: &StorageIdentity, uri: &str) -> StorageIdentity {
    StorageIdentity::new(uri, id.namespace(), id.backend()).unwrap()
}

/// One change to one side's preflight facts (the URI is a remote one).
type EndpointChange = fn(&mut EndpointFacts, &NormalizedUri);

/// Each fact that keeps a migration out of the local profile, or from
/// starting, refuses on its own, on either side: a rule that needs two of
/// them at once (an `&&` where an `||` belongs) lets the single one through.
#[test]
fn each_preflight_fact_refuses_on_its_own_on_either_side() {
    let fx = fx();
    let st = run(&fx, None);
    let remote = NormalizedUri::parse("s3://bucket/warehouse").unwrap();
    for side in ["source", "destination"] {
        let each: [(&str, EndpointChange); 4] = [
            ("a remote catalog", |e, _| e.catalog = Locality::Remote),
            ("a remote control catalog", |e, _| {
                e.control = Locality::Remote
            }),
            ("remote objects", |e, _| e.objects = Locality::Remote),
            ("a storage URI that is no local file", |e, uri| {
                e.identity = with_uri(&e.identity, uri.as_str());
                e.audit = Some(e.identity.clone());
            }),
        ];
        for (what, change) in each {
            let mut p = preflight(&fx);
            let e = if side == "source" {
                &mut p.source
            } else {
                &mut p.destination
            };
            change(e, &remote);
            let got = decide(&st, &Request::Validate { report: p }).unwrap_err();
            assert_eq!(
                got,
                MigrationError::OutsideLocalV1(side.into()),
                "{what} on the {side}"
            );
        }
    }
    for (what, change, reason) in [
        (
            "unsettled commands",
            (|p| p.unsettled_commands = 1) as fn(&mut Preflight),
            "source-not-quiescent",
        ),
        (
            "running evaluations",
            |p| p.running_evaluations = 1,
            "source-not-quiescent",
        ),
        (
            "destination tables",
            |p| p.destination_tables = 1,
            "destination-not-empty",
        ),
        (
            "destination control records",
            |p| p.destination_control_records = 1,
            "destination-not-empty",
        ),
        (
            "conflicting destination objects",
            |p| p.conflicting_destination_objects = 1,
            "destination-not-empty",
        ),
        (
            "source activity",
            |p| p.source.activity_records = 1,
            "activity-history-present",
        ),
        (
            "destination activity",
            |p| p.destination.activity_records = 1,
            "activity-history-present",
        ),
    ] {
        let mut p = preflight(&fx);
        change(&mut p);
        let got = decide(&st, &Request::Validate { report: p }).unwrap_err();
        assert!(got.to_string().starts_with(reason), "{what}: {got}");
    }
}

#[test]
fn out_of_order_requests_are_refused_and_change_nothing() {
    let fx = fx();
    let st = run(&fx, None);
    let plan = fx.plan(0, 3, 0);
    assert!(matches!(
        decide(&st, &Request::Freeze { plan: plan.clone() }),
        Err(MigrationError::OutOfOrder { .. })
    ));
    assert!(matches!(
        decide(&st, &Request::Reserve { plan, now: 0 }),
        Err(MigrationError::OutOfOrder { .. })
    ));
    assert!(matches!(
        decide(&st, &Request::Activate),
        Err(MigrationError::OutOfOrder { .. })
    ));
}

#[test]
fn a_changed_plan_or_other_migration_is_refused() {
    let fx = fx();
    let sim = check_clean_run().unwrap();
    let mut other = run(&fx, Some(fx.plan(0, 9, 0).digest()));
    other.destination = sim.dest.clone();
    assert!(matches!(
        next_step(&other),
        Err(MigrationError::PlanChanged(_))
    ));
    let mut m2 = State {
        run: Run::new(fx.other_migration.clone(), None),
        destination: sim.dest.clone(),
    };
    assert!(matches!(
        next_step(&m2),
        Err(MigrationError::OtherMigration(_))
    ));
    m2.run.validated = true;
    assert!(decide(&m2, &Request::Activate).is_err());
    // A run frozen on another plan of the same migration never resumes the
    // reservation it finds, whatever that reservation's status.
    let changed = fx.plan(0, 9, 0);
    for status in [Status::Reserved, Status::Activated, Status::Completed] {
        let mut st = run(&fx, Some(changed.digest()));
        st.run.validated = true;
        st.run.frozen = true;
        st.destination = sim.dest.clone();
        st.destination
            .reservation
            .as_mut()
            .expect("a clean run leaves a reservation")
            .status = status;
        assert!(
            matches!(
                decide(
                    &st,
                    &Request::Reserve {
                        plan: changed.clone(),
                        now: 0
                    }
                ),
                Err(MigrationError::PlanChanged(_))
            ),
            "a {status:?} reservation of another plan was resumed"
        );
    }
    // A run of another migration, frozen on its own plan, is told whose the
    // reservation is: another migration's, not a changed plan of its own.
    let mut theirs = fx.plan(0, 9, 0);
    theirs.migration_id = fx.other_migration.clone();
    let mut st = State {
        run: Run::new(fx.other_migration.clone(), Some(theirs.digest())),
        destination: sim.dest.clone(),
    };
    st.run.validated = true;
    st.run.frozen = true;
    assert_eq!(
        decide(
            &st,
            &Request::Reserve {
                plan: theirs,
                now: 0
            }
        ),
        Err(MigrationError::OtherMigration(fx.migration.clone()))
    );
}

#[test]
fn an_ambiguous_commit_requires_inspection_before_any_append() {
    let fx = fx();
    let mut sim = Sim::new(&fx);
    // Drive until the first table copy, within a bound (a wrong machine
    // that never reaches a copy fails here instead of spinning).
    let mut steps = 0;
    while !matches!(
        sim.drivers[0].clone(),
        simulate::Driver::Running(r) if matches!(
            next_step(&State { run: r.clone(), destination: sim.dest.clone() }),
            Ok(Next::CopyTable { .. })
        )
    ) {
        steps += 1;
        assert!(steps <= 64, "no table copy within 64 steps");
        sim.apply(&fx, &Machine::REAL, SimOp::Step(0, Fault::None));
    }
    sim.apply(&fx, &Machine::REAL, SimOp::Step(0, Fault::AmbiguousLanded));
    let r = sim.dest.reservation.as_ref().unwrap();
    let i = r
        .tables
        .iter()
        .position(|t| *t == TableState::InDoubt)
        .unwrap();
    let simulate::Driver::Running(run) = sim.drivers[0].clone() else {
        panic!("driver stopped")
    };
    let st = State {
        run,
        destination: sim.dest.clone(),
    };
    // Another ambiguous reply never authorizes an append.
    let d = decide(
        &st,
        &Request::TableCommitted {
            name: fx.tables[i].clone(),
            reply: CommitReply::Ambiguous,
        },
    )
    .unwrap();
    assert_eq!(d.outcome, Outcome::InspectFirst);
    // Inspection finds the landed content: converge without appending.
    sim.apply(&fx, &Machine::REAL, SimOp::Step(0, Fault::None));
    assert_eq!(sim.dest_tables[i], 1);
    assert!(matches!(
        sim.dest.reservation.as_ref().unwrap().tables[i],
        TableState::Committed(_)
    ));
}

#[test]
fn drift_before_the_recheck_invalidates_the_plan() {
    let fx = fx();
    let mut sim = Sim::new(&fx);
    for _ in 0..64 {
        let simulate::Driver::Running(r) = sim.drivers[0].clone() else {
            break;
        };
        let st = State {
            run: r,
            destination: sim.dest.clone(),
        };
        if next_step(&st) == Ok(Next::Recheck) {
            sim.apply(&fx, &Machine::REAL, SimOp::Drift);
        }
        sim.apply(&fx, &Machine::REAL, SimOp::Step(0, Fault::None));
    }
    assert_eq!(sim.broken, 0);
    assert_eq!(
        sim.dest.reservation.as_ref().unwrap().status,
        Status::Invalidated
    );
    assert!(!sim.dest_discoverable);
}

#[test]
fn floors_cover_manifest_epochs_and_resume_goes_above() {
    let fx = fx();
    let sim = check_clean_run().unwrap();
    let r = sim.dest.reservation.as_ref().unwrap();
    let floor = r.control.as_ref().unwrap().floors[0].floor;
    assert_eq!(floor, simulate::MANIFEST_EPOCH);
    assert!(sim.dest_fence.issued > floor);
    assert_eq!(import_floors(&fx.plan(0, 9, 0))[0].floor, 9);
}

#[test]
fn receipt_decoder_refuses_missing_noncanonical_and_digest_invalid() {
    let sim = check_clean_run().unwrap();
    let stored = sim.dest.reservation.unwrap().receipt.unwrap();
    let bytes = stored.encode();
    assert_eq!(StoredReceipt::decode(&bytes).unwrap(), stored);
    let text = String::from_utf8(bytes).unwrap();
    let missing = text.replacen("\"activity_disposition\":\"empty-v1\",", "", 1);
    assert!(matches!(
        StoredReceipt::decode(missing.as_bytes()),
        Err(DataError::Malformed(_))
    ));
    let upper = text.replacen(&stored.digest.hex(), &stored.digest.hex().to_uppercase(), 1);
    assert!(StoredReceipt::decode(upper.as_bytes()).is_err());
    let tampered = text.replacen("\"rows\":3", "\"rows\":4", 1);
    assert!(matches!(
        StoredReceipt::decode(tampered.as_bytes()),
        Err(DataError::DigestMismatch { .. })
    ));
    let pretty = serde_json::to_vec_pretty(&stored).unwrap();
    assert_eq!(StoredReceipt::decode(&pretty), Err(DataError::NonCanonical));
    let huge = vec![b' '; MAX_ENCODED_LEN + 1];
    assert!(matches!(
        StoredReceipt::decode(&huge),
        Err(DataError::TooLarge { .. })
    ));
}

#[test]
fn a_stored_receipt_that_does_not_verify_fails_closed() {
    let fx = fx();
    let mut sim = check_clean_run().unwrap();
    let r = sim.dest.reservation.as_mut().unwrap();
    if let Some(s) = r.receipt.as_mut() {
        s.receipt.completed_at += 1;
    }
    let st = State {
        run: Run::new(fx.migration.clone(), Some(r.plan_digest)),
        destination: sim.dest.clone(),
    };
    assert!(matches!(
        next_step(&st),
        Err(MigrationError::ReceiptInvalid(_))
    ));
}

#[test]
fn step_names_are_the_stable_names_of_the_spec() {
    let names: Vec<_> = STEPS.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        [
            "validate",
            "plan",
            "reserve",
            "copy-artifacts",
            "copy-tables",
            "copy-artifact-files",
            "verify-tables",
            "recheck-source",
            "stage-control",
            "activate",
            "cold-verify",
            "complete",
        ]
    );
    for (i, s) in STEPS.iter().enumerate() {
        assert_eq!(s.index(), i, "{}", s.name());
    }
}

/// Drives a fresh simulation with no faults until `stop` holds of the
/// driver's state; that state.
fn drive_until(fx: &Fixture, stop: impl Fn(&State) -> bool) -> State {
    let mut sim = Sim::new(fx);
    for _ in 0..256 {
        let simulate::Driver::Running(run) = sim.drivers[0].clone() else {
            break;
        };
        let st = State {
            run,
            destination: sim.dest.clone(),
        };
        if stop(&st) {
            return st;
        }
        sim.apply(fx, &Machine::REAL, SimOp::Step(0, Fault::None));
    }
    panic!("the clean run never reached the state asked for");
}

/// Drives a clean run until its reservation is `Reserved` and `pick`s.
fn drive_to_reserved(fx: &Fixture, pick: impl Fn(&Reservation) -> bool) -> State {
    drive_until(fx, |st| {
        st.destination
            .reservation
            .as_ref()
            .is_some_and(|r| r.status == Status::Reserved && pick(r))
    })
}

/// The first table of the reservation in `st` whose state `pick` answers:
/// its name and the facts `pick` gave.
fn first_table(st: &State, pick: impl Fn(&TableState) -> Option<TableFacts>) -> (Name, TableFacts) {
    let r = st.destination.reservation.as_ref().unwrap();
    let (i, facts) = r
        .tables
        .iter()
        .enumerate()
        .find_map(|(i, t)| pick(t).map(|f| (i, f)))
        .unwrap();
    (r.plan.tables[i].name.clone(), facts)
}

/// A clean run driven until a table is committed: its state, and that
/// table's name and committed facts.
fn a_committed_table(fx: &Fixture) -> (State, Name, TableFacts) {
    let st = drive_to_reserved(fx, |r| {
        r.tables
            .iter()
            .any(|t| matches!(t, TableState::Committed(_)))
    });
    let (name, c) = first_table(&st, |t| match t {
        TableState::Committed(c) => Some(*c),
        _ => None,
    });
    (st, name, c)
}

#[test]
fn a_repeated_commit_reply_is_a_repeat_only_when_it_names_the_recorded_commit() {
    let (st, name, c) = a_committed_table(&fx());
    let d = decide(
        &st,
        &Request::TableCommitted {
            name: name.clone(),
            reply: CommitReply::Committed(c),
        },
    )
    .unwrap();
    assert_eq!(d.outcome, Outcome::AlreadyRecorded);
    assert_eq!(d.next, st);
    let mut other = c;
    other.snapshot += 1;
    assert_eq!(
        decide(
            &st,
            &Request::TableCommitted {
                name: name.clone(),
                reply: CommitReply::Committed(other),
            },
        ),
        Err(MigrationError::UnexpectedCommit(name))
    );
}

/// The completed reservation of a clean run and its cold evidence, which
/// checks.
fn cold_case() -> (Reservation, ColdEvidence) {
    let sim = check_clean_run().unwrap();
    let r = sim.dest.reservation.unwrap();
    let e = r.cold.clone().unwrap().0;
    check_cold(&r, &e).unwrap();
    (r, e)
}

/// The differences the cold check names (it must refuse).
fn cold_refusal(r: &Reservation, e: &ColdEvidence) -> Vec<Discrepancy> {
    cold_refusal_as(r, e, VerifyMode::ResumeAndTick)
}

fn cold_refusal_as(r: &Reservation, e: &ColdEvidence, mode: VerifyMode) -> Vec<Discrepancy> {
    match check_cold_as(r, e, mode) {
        Err(MigrationError::ColdVerificationFailed(why)) => {
            assert!(!why.discrepancies.is_empty());
            why.discrepancies
        }
        other => panic!("cold check answered {other:?}"),
    }
}

#[test]
fn cold_evidence_with_a_table_that_differs_from_the_plan_is_refused_naming_it() {
    let (r, e) = cold_case();
    // Same names and count, one table's content other than planned.
    let mut changed = e.clone();
    changed.tables[1].1.content_digest = Digest::of(b"other rows");
    let t = &r.plan.tables[1];
    assert_eq!(
        cold_refusal(&r, &changed),
        vec![Discrepancy::TableContentDigest {
            table: t.name.clone(),
            expected: t.destination_content_digest,
            found: Digest::of(b"other rows"),
        }]
    );
    // A table that lost its partitioning (or sort order, or properties):
    // same rows, other metadata — named.
    let mut unpartitioned = e.clone();
    let plain = custos_core::migration::metadata::TableMetadata::default().fingerprint();
    unpartitioned.tables[1].1.metadata_fingerprint = plain;
    let found = cold_refusal(&r, &unpartitioned);
    assert_eq!(
        found,
        vec![Discrepancy::TableMetadataFingerprint {
            table: t.name.clone(),
            expected: t.source.metadata_fingerprint,
            found: plain,
        }]
    );
    assert!(
        found[0]
            .to_string()
            .starts_with(&format!("table {}: metadata fingerprint", t.name)),
        "{}",
        found[0]
    );
    // Its row count and schema too: each evidence named.
    changed.tables[1].1.rows += 1;
    changed.tables[1].1.schema_fingerprint = Digest::of(b"other schema");
    let found = cold_refusal(&r, &changed);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(
        matches!(&found[0], Discrepancy::TableSchemaFingerprint { table, .. } if *table == t.name)
    );
    assert_eq!(
        found[1],
        Discrepancy::TableRowCount {
            table: t.name.clone(),
            expected: t.source.rows,
            found: t.source.rows + 1,
        }
    );
    let text = MigrationError::ColdVerificationFailed(verify::ColdFailure {
        discrepancies: found,
    })
    .to_string();
    assert!(
        text.starts_with("cold-verification-failed: 3 differences: table "),
        "{text}"
    );
    assert!(
        text.contains(&format!("table {}: row count", t.name)),
        "{text}"
    );
    // A table missing.
    let mut short = e.clone();
    let gone = short.tables.pop().unwrap().0;
    assert_eq!(
        cold_refusal(&r, &short),
        vec![Discrepancy::TableAbsent { table: gone }]
    );
    // A table renamed: the planned one absent, the other unplanned.
    let mut renamed = e.clone();
    renamed.tables[0].0 = Name::new("zz-other").unwrap();
    assert_eq!(
        cold_refusal(&r, &renamed),
        vec![
            Discrepancy::TableAbsent {
                table: r.plan.tables[0].name.clone()
            },
            Discrepancy::TableUnplanned {
                table: Name::new("zz-other").unwrap()
            },
        ]
    );
    // The plan's tables out of order.
    let mut swapped = e;
    swapped.tables.swap(0, 1);
    assert_eq!(cold_refusal(&r, &swapped), vec![Discrepancy::TableOrder]);
}

#[test]
fn cold_evidence_names_the_world_and_the_object_that_do_not_verify() {
    let (r, e) = cold_case();
    // Counts alone: the check still refuses, with the counts.
    let mut counted = e.clone();
    counted.worlds_discovered -= 1;
    counted.objects_verified -= 1;
    assert_eq!(
        cold_refusal(&r, &counted),
        vec![
            Discrepancy::WorldCount {
                expected: r.plan.worlds.len() as u64,
                found: r.plan.worlds.len() as u64 - 1,
            },
            Discrepancy::ObjectCount {
                expected: r.plan.artifacts.objects.len() as u64,
                found: r.plan.artifacts.objects.len() as u64 - 1,
            },
        ]
    );
    // Named: the World and the object, with what was found at its address.
    let world = r.plan.worlds[0].world.clone();
    let object = r.plan.artifacts.objects[0];
    let uri = NormalizedUri::parse("file:///dst/artifacts/sha256/ab/cd").unwrap();
    let mut named = counted;
    named.worlds_missing = vec![world.clone()];
    named.objects_failed = vec![ObjectMismatch {
        sha256: object.sha256,
        uri: uri.clone(),
        found: ObjectFound::Missing,
    }];
    let found = cold_refusal(&r, &named);
    assert_eq!(
        found,
        vec![
            Discrepancy::WorldNotDiscovered {
                world: world.clone()
            },
            Discrepancy::Object {
                sha256: object.sha256,
                uri: uri.clone(),
                expected: object,
                found: ObjectFound::Missing,
            },
        ]
    );
    assert_eq!(
        found[1].to_string(),
        format!("object {} at {uri}: missing", object.sha256.hex())
    );
    // A named failure refuses even when the counts look complete.
    let mut listed = e;
    listed.objects_failed = vec![ObjectMismatch {
        sha256: object.sha256,
        uri,
        found: ObjectFound::Longer,
    }];
    assert_eq!(cold_refusal(&r, &listed).len(), 1);
}

#[test]
fn a_read_only_check_asks_for_no_resume_and_a_resuming_one_for_a_resume() {
    let (r, e) = cold_case();
    let w = r
        .plan
        .worlds
        .iter()
        .find(|w| w.resumable)
        .unwrap()
        .world
        .clone();
    let untouched = ColdEvidence {
        resume: Resume::NotExercised,
        ..e.clone()
    };
    check_cold_as(&r, &untouched, VerifyMode::ReadOnly).unwrap();
    // A migration's own cold verification must resume.
    assert_eq!(
        cold_refusal(&r, &untouched),
        vec![Discrepancy::ResumeMismatch {
            mode: VerifyMode::ResumeAndTick,
            resumable: Some(w.clone()),
            found: Resume::NotExercised,
        }]
    );
    // A read-only check refuses evidence that resumed (it wrote).
    assert_eq!(
        cold_refusal_as(&r, &e, VerifyMode::ReadOnly),
        vec![Discrepancy::ResumeMismatch {
            mode: VerifyMode::ReadOnly,
            resumable: Some(w),
            found: e.resume.clone(),
        }]
    );
}

/// Resumed evidence of `world` under `epoch`, the rest of `e` kept.
fn resumed(e: &ColdEvidence, world: &Name, epoch: Epoch) -> ColdEvidence {
    let Resume::Resumed { tick, .. } = e.resume else {
        panic!("the clean run resumes its World")
    };
    ColdEvidence {
        resume: Resume::Resumed {
            world: world.clone(),
            epoch,
            tick,
        },
        ..e.clone()
    }
}

#[test]
fn a_resume_must_be_above_both_the_staged_and_the_planned_floor() {
    let (r, e) = cold_case();
    let w = r.plan.worlds[0].clone();
    let planned = w.import_floor();
    let floor_at = |staged: Epoch| {
        let mut r = r.clone();
        r.control.as_mut().unwrap().floors[0].floor = staged;
        r
    };
    let low = |staged: Epoch, epoch: Epoch| {
        vec![Discrepancy::ResumeNotAboveFloor {
            world: w.world.clone(),
            epoch,
            floor: Some(staged.max(planned)),
        }]
    };
    // Above both: accepted.
    check_cold(&floor_at(planned), &resumed(&e, &w.world, planned + 1)).unwrap();
    // At the staged floor (which is above the planned one): refused.
    assert_eq!(
        cold_refusal(&floor_at(planned + 1), &resumed(&e, &w.world, planned + 1)),
        low(planned + 1, planned + 1)
    );
    // Above the planned floor, below the staged one: refused.
    assert_eq!(
        cold_refusal(&floor_at(planned + 5), &resumed(&e, &w.world, planned + 2)),
        low(planned + 5, planned + 2)
    );
    // Above the staged floor, at the planned one: refused.
    assert_eq!(
        cold_refusal(&floor_at(planned - 1), &resumed(&e, &w.world, planned)),
        low(planned - 1, planned)
    );
    // No staged floor for the World: refused.
    let mut r2 = r.clone();
    r2.control.as_mut().unwrap().floors.clear();
    assert_eq!(
        cold_refusal(&r2, &resumed(&e, &w.world, planned + 1)),
        vec![Discrepancy::ResumeNotAboveFloor {
            world: w.world.clone(),
            epoch: planned + 1,
            floor: None,
        }]
    );
}

#[test]
fn a_resume_of_a_world_other_than_the_resumable_one_is_refused() {
    let (mut r, mut e) = cold_case();
    // A second, non-resumable World with its own staged floor.
    let mut other = r.plan.worlds[0].clone();
    other.world = Name::new("zz-second-world").unwrap();
    other.resumable = false;
    r.plan.worlds.push(other.clone());
    r.control.as_mut().unwrap().floors.push(WorldFloor {
        world: other.world.clone(),
        floor: other.import_floor(),
    });
    e.worlds_discovered += 1;
    check_cold(&r, &e).unwrap();
    let high = other.import_floor() + r.plan.worlds[0].import_floor() + 10;
    let mismatch = |found: Resume| {
        vec![Discrepancy::ResumeMismatch {
            mode: VerifyMode::ResumeAndTick,
            resumable: Some(r.plan.worlds[0].world.clone()),
            found,
        }]
    };
    let elsewhere = resumed(&e, &other.world, high);
    assert_eq!(
        cold_refusal(&r, &elsewhere),
        mismatch(elsewhere.resume.clone())
    );
    assert!(cold_refusal(&r, &elsewhere)[0]
        .to_string()
        .starts_with("resume evidence does not match the resumable World"));
    // And evidence of no resume when one World is resumable.
    let none = ColdEvidence {
        resume: Resume::NotApplicable,
        ..e
    };
    assert_eq!(cold_refusal(&r, &none), mismatch(Resume::NotApplicable));
}

#[test]
fn a_plan_holds_at_most_max_items_of_each_kind() {
    let fx = fx();
    let base = fx.plan(0, 3, 0);
    let with_worlds = |n: usize| {
        let mut p = base.clone();
        let w = p.worlds[0].clone();
        p.worlds = (0..n)
            .map(|i| WorldPlan {
                world: Name::new(format!("w{i:07}")).unwrap(),
                ..w.clone()
            })
            .collect();
        p
    };
    let too_many = Err(DataError::Invalid("too many items".into()));
    with_worlds(MAX_ITEMS).check().unwrap();
    assert_eq!(with_worlds(MAX_ITEMS + 1).check(), too_many);
    // Tables: storage tables only (no artifacts), at and over the bound.
    let with_tables = |n: usize| {
        let mut p = base.clone();
        let t = p.tables[1].clone();
        assert_eq!(t.classification, Classification::Storage);
        p.tables = (0..n)
            .map(|i| TablePlan {
                name: Name::new(format!("t{i:07}")).unwrap(),
                ..t.clone()
            })
            .collect();
        p.artifacts.objects.clear();
        p.artifacts.occurrences = 0;
        p
    };
    with_tables(MAX_ITEMS).check().unwrap();
    assert_eq!(with_tables(MAX_ITEMS + 1).check(), too_many);
    // Objects: distinct, sorted, one occurrence each.
    let with_objects = |n: usize| {
        let mut p = base.clone();
        let o = p.artifacts.objects[0];
        let mut objects: Vec<_> = (0..n as u64)
            .map(|i| ObjectFacts {
                sha256: Digest::of(&i.to_le_bytes()),
                ..o
            })
            .collect();
        objects.sort_by_key(|a| a.sha256);
        p.artifacts.occurrences = n as u64;
        p.artifacts.objects = objects;
        p
    };
    with_objects(MAX_ITEMS).check().unwrap();
    assert_eq!(with_objects(MAX_ITEMS + 1).check(), too_many);
}

#[test]
fn a_plan_bounds_fence_evidence_and_artifact_files() {
    let fx = fx();
    let base = fx.plan(0, 3, 0);
    base.check().unwrap();
    let invalid = |p: &Plan, why: &str| match p.check() {
        Err(DataError::Invalid(m)) => assert_eq!(m, why),
        other => panic!("{why}: answered {other:?}"),
    };
    // Manifest writer epochs: at most MAX_MANIFEST_EPOCHS, a source epoch.
    let with_epochs = |n: usize, source_epoch: Epoch| {
        let mut p = base.clone();
        p.worlds[0].manifest_writer_epochs = (1..=n as u64).collect();
        p.worlds[0].source_epoch = source_epoch;
        p
    };
    with_epochs(MAX_MANIFEST_EPOCHS, 3).check().unwrap();
    let fence = "world fence evidence out of bounds";
    invalid(&with_epochs(MAX_MANIFEST_EPOCHS + 1, 3), fence);
    invalid(&with_epochs(1, 0), fence);
    // At most one artifact_files table; none only without occurrences.
    let files = base.artifact_files().unwrap();
    let rule = "at most one artifact_files table, and none only without occurrences";
    let mut two = base.clone();
    let other = 1 - files.min(1);
    two.tables[other].classification = Classification::ArtifactFiles;
    invalid(&two, rule);
    let mut none = base.clone();
    none.tables[files].classification = Classification::Storage;
    none.tables[files].destination_content_digest = none.tables[files].source.content_digest;
    invalid(&none, rule);
    none.artifacts.objects.clear();
    none.artifacts.occurrences = 0;
    none.check().unwrap();
    // No more objects than occurrences; as many is fine.
    let mut p = base.clone();
    p.artifacts.occurrences = p.artifacts.objects.len() as u64;
    p.check().unwrap();
    p.artifacts.occurrences -= 1;
    invalid(&p, "more objects than occurrences");
}

#[test]
fn a_receipt_holds_at_most_max_items_tables() {
    let sim = check_clean_run().unwrap();
    let base = sim.dest.reservation.unwrap().receipt.unwrap().receipt;
    base.check().unwrap();
    let with_tables = |n: usize| {
        let mut r = base.clone();
        let t = r.tables[0].clone();
        r.tables = (0..n)
            .map(|i| TableReceipt {
                name: Name::new(format!("t{i:07}")).unwrap(),
                ..t.clone()
            })
            .collect();
        r
    };
    with_tables(MAX_ITEMS).check().unwrap();
    assert!(matches!(
        with_tables(MAX_ITEMS + 1).check(),
        Err(DataError::Invalid(_))
    ));
}

#[test]
fn evidence_digests_bind_the_value_and_their_domain() {
    let (_, e) = cold_case();
    let d = evidence_digest(&e);
    assert_eq!(d, evidence_digest(&e.clone()));
    let mut other = e.clone();
    other.objects_verified += 1;
    assert_ne!(evidence_digest(&other), d);
    assert_ne!(d, Digest::of(&canonical_bytes(&e)), "no domain prefix");
    assert_ne!(d, Digest::default());
}

#[test]
fn the_artifact_files_table_waits_for_every_object() {
    let fx = fx();
    let st = drive_until(&fx, |st| {
        st.destination
            .reservation
            .as_ref()
            .is_some_and(|r| r.objects.iter().any(|v| !*v))
    });
    let r = st.destination.reservation.as_ref().unwrap();
    let files = r.plan.artifact_files().unwrap();
    let name = r.plan.tables[files].name.clone();
    assert!(matches!(
        decide(&st, &Request::Table { name, found: None }),
        Err(MigrationError::OutOfOrder { .. })
    ));
}

/// The source observation that matches `plan` exactly.
fn unchanged(plan: &Plan) -> SourceObservation {
    SourceObservation {
        control_digest: plan.control.snapshot_digest,
        tables: plan
            .tables
            .iter()
            .map(|t| (t.name.clone(), t.source.snapshot))
            .collect(),
        inventory_digest: plan.artifacts.inventory_digest(),
        world_epochs: plan
            .worlds
            .iter()
            .map(|w| (w.world.clone(), w.source_epoch))
            .collect(),
    }
}

#[test]
fn each_recaptured_fact_is_drift_on_its_own() {
    let fx = fx();
    let plan = fx.plan(0, 1, 0);
    assert!(!drifted(&plan, &unchanged(&plan)), "the plan's own source");
    type Change = fn(&mut SourceObservation);
    let changes: [(&str, Change); 4] = [
        ("control", |o| {
            o.control_digest = Digest::of(b"other control")
        }),
        ("inventory", |o| {
            o.inventory_digest = Digest::of(b"other inventory");
        }),
        ("a table's snapshot", |o| o.tables[0].1 += 1),
        ("a world's fence epoch", |o| o.world_epochs[0].1 += 1),
    ];
    for (what, change) in changes {
        let mut o = unchanged(&plan);
        change(&mut o);
        assert!(drifted(&plan, &o), "{what} changed alone is drift");
    }
}

#[test]
fn a_recorded_object_found_absent_is_a_conflict_not_a_copy() {
    let fx = fx();
    let st = drive_until(&fx, |st| {
        st.destination
            .reservation
            .as_ref()
            .is_some_and(|r| r.status == Status::Reserved && r.objects.contains(&true))
    });
    let r = st.destination.reservation.as_ref().unwrap();
    let i = r.objects.iter().position(|o| *o).unwrap();
    let sha256 = r.plan.artifacts.objects[i].sha256;
    assert_eq!(
        decide(
            &st,
            &Request::Object {
                sha256,
                found: None
            }
        ),
        Err(MigrationError::ObjectConflict(sha256))
    );
}

#[test]
fn a_destination_table_with_other_metadata_is_refused_at_every_step() {
    // The plan's table, read back with the same schema, rows and content
    // but another partition spec, sort order or properties.
    let (st, name, c) = a_committed_table(&fx());
    let lost = TableFacts {
        metadata_fingerprint: custos_core::migration::metadata::TableMetadata::default()
            .fingerprint(),
        ..c
    };
    assert_ne!(lost.metadata_fingerprint, c.metadata_fingerprint);
    let r = st.destination.reservation.as_ref().unwrap();
    let plan = r.plan.tables.iter().find(|t| t.name == name).unwrap();
    assert!(plan.destination_matches(&c));
    assert!(!plan.destination_matches(&lost));
    // Found at the destination, committed, or read back: a conflict.
    for req in [
        Request::Table {
            name: name.clone(),
            found: Some(lost),
        },
        Request::TableCommitted {
            name: name.clone(),
            reply: CommitReply::Committed(lost),
        },
    ] {
        assert!(
            matches!(
                decide(&st, &req),
                Err(MigrationError::TableConflict(_) | MigrationError::UnexpectedCommit(_))
            ),
            "{req:?}"
        );
    }
    // Every table committed: the read-back of one that lost its metadata
    // does not verify.
    let st = drive_to_reserved(&fx(), |r| {
        r.tables
            .iter()
            .all(|t| matches!(t, TableState::Committed(_) | TableState::Verified(_)))
            && r.tables
                .iter()
                .any(|t| matches!(t, TableState::Committed(_)))
    });
    let (name, c) = first_table(&st, |t| match t {
        TableState::Committed(c) => Some(*c),
        _ => None,
    });
    let lost = TableFacts {
        metadata_fingerprint: custos_core::migration::metadata::TableMetadata::default()
            .fingerprint(),
        ..c
    };
    assert_eq!(
        decide(
            &st,
            &Request::VerifyTable {
                name: name.clone(),
                read_back: lost,
            }
        ),
        Err(MigrationError::TableConflict(name.clone()))
    );
    let d = decide(&st, &Request::VerifyTable { name, read_back: c }).unwrap();
    assert_eq!(d.outcome, Outcome::Recorded);
}

/// A read-back of `name` equal to its verified facts `v` repeats; any
/// other conflicts.
#[track_caller]
fn verify_repeats_only(st: &State, name: &Name, v: TableFacts) {
    let d = decide(
        st,
        &Request::VerifyTable {
            name: name.clone(),
            read_back: v,
        },
    )
    .unwrap();
    assert_eq!(d.outcome, Outcome::AlreadyRecorded, "{name}");
    assert_eq!(&d.next, st);
    let mut other = v;
    other.rows += 1;
    assert_eq!(
        decide(
            st,
            &Request::VerifyTable {
                name: name.clone(),
                read_back: other,
            },
        ),
        Err(MigrationError::TableConflict(name.clone()))
    );
}

#[test]
fn a_verified_table_read_again_repeats_only_its_recorded_content() {
    let fx = fx();
    // One table verified while another still waits for its read-back: the
    // expected step is still `VerifyTable`, so the request is no repeat.
    let st = drive_to_reserved(&fx, |r| {
        let any = |f: fn(&TableState) -> bool| r.tables.iter().any(f);
        any(|t| matches!(t, TableState::Verified(_)))
            && any(|t| matches!(t, TableState::Committed(_)))
    });
    let (name, v) = first_table(&st, |t| match t {
        TableState::Verified(v) => Some(*v),
        _ => None,
    });
    verify_repeats_only(&st, &name, v);
}

#[test]
fn every_table_verified_a_read_back_again_repeats_only_its_recorded_content() {
    let fx = fx();
    // Every table verified: the step expected is later, so this is a repeat.
    let st = drive_to_reserved(&fx, |r| {
        r.tables
            .iter()
            .all(|t| matches!(t, TableState::Verified(_)))
    });
    let r = st.destination.reservation.as_ref().unwrap();
    for (i, t) in r.tables.iter().enumerate() {
        let TableState::Verified(v) = t else {
            unreachable!("every table is verified")
        };
        verify_repeats_only(&st, &r.plan.tables[i].name, *v);
    }
}

#[test]
fn an_invalidated_plan_is_never_resumed() {
    let fx = fx();
    let st = drive_until(&fx, |st| next_step(st) == Ok(Next::Recheck));
    let plan = st.destination.reservation.as_ref().unwrap().plan.clone();
    let mut drift = unchanged(&plan);
    drift.control_digest = Digest::of(b"drift");
    let d = decide(&st, &Request::Recheck { observed: drift }).unwrap();
    assert_eq!(d.outcome, Outcome::Invalidated);
    let invalidated = d.next;
    // The same driver, re-presenting the same plan, is told it no longer
    // stands: never that it resumed.
    assert_eq!(
        decide(&invalidated, &Request::Reserve { plan, now: 0 }),
        Err(MigrationError::PlanInvalidated)
    );
    // Nor does a stable recheck revive it.
    assert_eq!(
        decide(
            &invalidated,
            &Request::Recheck {
                observed: unchanged(&invalidated.destination.reservation.as_ref().unwrap().plan)
            }
        ),
        Err(MigrationError::PlanInvalidated)
    );
}

#[test]
fn a_restaging_repeats_only_the_control_recorded() {
    let fx = fx();
    let st = drive_until(&fx, |st| {
        st.destination
            .reservation
            .as_ref()
            .is_some_and(|r| r.status == Status::Reserved && r.control.is_some())
    });
    let r = st.destination.reservation.as_ref().unwrap();
    let snapshot_digest = r.plan.control.snapshot_digest;
    let floors = r.control.as_ref().unwrap().floors.clone();
    let d = decide(&st, &Request::StageControl { snapshot_digest }).unwrap();
    assert_eq!(d.outcome, Outcome::Staged { floors });
    assert_eq!(d.next, st);
    // A recorded staging that differs from the plan's, in its floors alone
    // or its snapshot alone, is a conflict, not a repeat.
    type Change = fn(&mut StagedControl);
    let changes: [(&str, Change); 2] = [
        ("floors", |c| c.floors[0].floor += 1),
        ("snapshot", |c| c.snapshot_digest = Digest::of(b"other")),
    ];
    for (what, change) in changes {
        let mut other = st.clone();
        if let Some(c) = other
            .destination
            .reservation
            .as_mut()
            .and_then(|r| r.control.as_mut())
        {
            change(c);
        }
        assert_eq!(
            decide(&other, &Request::StageControl { snapshot_digest }),
            Err(MigrationError::ControlConflict),
            "a recorded staging with other {what}"
        );
    }
}

#[test]
fn the_inventory_digest_binds_every_object_and_the_occurrence_count() {
    let fx = fx();
    let a = fx.plan(0, 1, 0).artifacts;
    let d = a.inventory_digest();
    assert_eq!(d, a.clone().inventory_digest(), "deterministic");
    assert_ne!(d, Digest::default());
    assert_ne!(d, Digest::of(&canonical_bytes(&a)), "no domain prefix");
    let mut more = a.clone();
    more.occurrences += 1;
    assert_ne!(d, more.inventory_digest(), "the occurrence count");
    let mut other = a.clone();
    other.objects[0].size += 1;
    assert_ne!(d, other.inventory_digest(), "an object's facts");
}

#[test]
fn once_activated_every_source_read_is_refused_as_the_source_closed() {
    let fx = fx();
    let st = drive_until(&fx, |st| {
        st.destination
            .reservation
            .as_ref()
            .is_some_and(|r| r.status == Status::Activated)
    });
    // The driver validated and planned before activation: its own record of
    // those steps must not answer a source read once the source is closed.
    assert!(st.run.validated);
    let r = st.destination.reservation.as_ref().unwrap();
    let (name, facts) = first_table(&st, |t| match t {
        TableState::Verified(f) => Some(*f),
        _ => None,
    });
    let reads = [
        Request::Validate {
            report: preflight(&fx),
        },
        Request::Freeze {
            plan: r.plan.clone(),
        },
        Request::Object {
            sha256: Digest::of(b"object"),
            found: None,
        },
        Request::Table {
            name,
            found: Some(facts),
        },
        Request::Recheck {
            observed: unchanged(&r.plan),
        },
    ];
    for req in reads {
        assert_eq!(
            decide(&st, &req),
            Err(MigrationError::SourceClosed),
            "{req:?}"
        );
        assert!(req.step(Some(&r.plan)).reads_source(), "{req:?}");
    }
}

#[test]
fn an_object_found_with_other_facts_conflicts_recorded_or_not() {
    let fx = fx();
    for recorded in [false, true] {
        let st = drive_to_reserved(&fx, |r| r.objects.contains(&recorded));
        let r = st.destination.reservation.as_ref().unwrap();
        let i = r.objects.iter().position(|o| *o == recorded).unwrap();
        let planned = r.plan.artifacts.objects[i];
        let sizes = ObjectFacts {
            size: planned.size + 1,
            ..planned
        };
        let xxh3 = ObjectFacts {
            xxh3_64: planned.xxh3_64 ^ 1,
            ..planned
        };
        for found in [sizes, xxh3] {
            assert_eq!(
                decide(
                    &st,
                    &Request::Object {
                        sha256: planned.sha256,
                        found: Some(found)
                    }
                ),
                Err(MigrationError::ObjectConflict(planned.sha256)),
                "recorded: {recorded}, found {found:?}"
            );
        }
    }
}

#[test]
fn a_committed_table_found_again_repeats_only_its_snapshot_and_content() {
    let (st, name, c) = a_committed_table(&fx());
    let found = |f: TableFacts| {
        decide(
            &st,
            &Request::Table {
                name: name.clone(),
                found: Some(f),
            },
        )
    };
    let d = found(c).unwrap();
    assert_eq!(d.outcome, Outcome::AlreadyRecorded);
    assert_eq!(d.next, st);
    let later = TableFacts {
        snapshot: c.snapshot + 1,
        ..c
    };
    let other = TableFacts {
        rows: c.rows + 1,
        ..c
    };
    for f in [later, other] {
        assert_eq!(
            found(f),
            Err(MigrationError::TableConflict(name.clone())),
            "{f:?}"
        );
    }
}

#[test]
fn a_recorded_recheck_repeats_only_its_own_evidence() {
    let fx = fx();
    let st = drive_to_reserved(&fx, |r| r.source_stability.is_some());
    let plan = &st.destination.reservation.as_ref().unwrap().plan;
    let d = decide(
        &st,
        &Request::Recheck {
            observed: unchanged(plan),
        },
    )
    .unwrap();
    assert_eq!(d.outcome, Outcome::AlreadyRecorded);
    assert_eq!(d.next, st);
    let mut drift = unchanged(plan);
    drift.control_digest = Digest::of(b"drift");
    assert_eq!(
        decide(&st, &Request::Recheck { observed: drift }),
        Err(MigrationError::PlanInvalidated)
    );
}

#[test]
fn the_receipt_binds_each_identity_and_counts_every_verified_byte() {
    let sim = check_clean_run().unwrap();
    let r = sim.dest.reservation.unwrap();
    let receipt = r.receipt.unwrap().receipt;
    let (src, dst) = (&r.plan.source, &r.plan.destination);
    assert_ne!(receipt.source_fingerprint, receipt.destination_fingerprint);
    assert_eq!(
        receipt.source_fingerprint,
        Digest::of_parts(&[b"custos.migration.identity.v1\0", &canonical_bytes(src)])
    );
    // Each part of an identity is bound on its own.
    let namespace = StorageIdentity::new(src.location(), "other", src.backend()).unwrap();
    let backend = StorageIdentity::new(src.location(), src.namespace(), "other").unwrap();
    for other in [dst, &namespace, &backend] {
        assert_ne!(src.fingerprint(), other.fingerprint(), "{other:?}");
    }
    let bytes: u64 = r.plan.artifacts.objects.iter().map(|o| o.size).sum();
    assert!(bytes > 1);
    assert_eq!(receipt.artifacts.verified_bytes, bytes);
    // The total saturates rather than wraps.
    let object = |size| ObjectFacts {
        sha256: Digest::of(b"o"),
        xxh3_64: 0,
        size,
    };
    let plan = |sizes: &[u64]| ArtifactPlan {
        occurrences: 1,
        objects: sizes.iter().map(|s| object(*s)).collect(),
    };
    assert_eq!(plan(&[3, 5]).total_bytes(), 8);
    assert_eq!(plan(&[u64::MAX, 2]).total_bytes(), u64::MAX);
}

#[test]
fn the_artifact_files_table_is_found_wherever_it_stands_or_not_at_all() {
    let fx = fx();
    let plan = fx.plan(0, 1, 0);
    let files = plan.artifact_files().unwrap();
    assert_eq!(
        plan.tables[files].classification,
        Classification::ArtifactFiles
    );
    let mut later = plan.clone();
    let rest = (0..plan.tables.len()).find(|i| *i != files).unwrap();
    let mut first = later.tables[rest].clone();
    first.name = Name::new("aardvark").unwrap();
    later.tables.insert(0, first);
    assert_eq!(later.artifact_files(), Some(files + 1));
    let mut none = plan;
    none.tables.remove(files);
    assert_eq!(none.artifact_files(), None);
}

#[test]
fn canonical_evidence_of_exactly_the_bound_decodes_and_a_byte_more_is_refused() {
    let at = |len: usize| format!("\"{}\"", "a".repeat(len - 2)).into_bytes();
    let exact = at(MAX_ENCODED_LEN);
    assert_eq!(
        decode_canonical::<String>(&exact).map(|s| s.len()),
        Ok(MAX_ENCODED_LEN - 2)
    );
    assert_eq!(
        decode_canonical::<String>(&at(MAX_ENCODED_LEN + 1)),
        Err(DataError::TooLarge {
            len: MAX_ENCODED_LEN + 1
        })
    );
}

#[test]
fn a_destination_directory_holding_anything_else_is_refused() {
    use custos_core::migration::{check_destination_listing, DestinationListing, MigrationError};
    let ours = DestinationListing {
        root: "/d".into(),
        top: vec![("iceberg.db".into(), true), ("default".into(), true)],
        namespace: Some("/d/default".into()),
        catalogs: true,
        namespace_only_artifacts: false,
        artifacts_refused: None,
    };
    assert_eq!(check_destination_listing(&ours), Ok(()));
    assert_eq!(
        check_destination_listing(&DestinationListing::default()),
        Ok(())
    );
    // A run killed before its first catalog: only the Artifact root.
    let killed = DestinationListing {
        catalogs: false,
        namespace_only_artifacts: true,
        ..ours.clone()
    };
    assert_eq!(check_destination_listing(&killed), Ok(()));
    let foreign = |l: &DestinationListing| match check_destination_listing(l) {
        Err(e @ MigrationError::DestinationForeign(_)) => {
            assert!(e.to_string().starts_with("destination-not-empty: "), "{e}");
            e.to_string()
        }
        other => panic!("{other:?}"),
    };
    let mut stray = ours.clone();
    stray.top.push(("notes.txt".into(), false));
    assert!(foreign(&stray).contains("\"notes.txt\""));
    let bare_namespace = DestinationListing {
        catalogs: false,
        ..ours.clone()
    };
    assert!(foreign(&bare_namespace).contains("without a catalog"));
    let artifacts = DestinationListing {
        artifacts_refused: Some((
            "/d/default/.custos-artifacts".into(),
            "foreign entry".into(),
        )),
        ..ours
    };
    assert!(foreign(&artifacts).contains("foreign entry"));
}
