//! The PostgreSQL control catalog: the control-catalog conformance suite
//! (a fresh schema per catalog), a newer stored version refused with
//! nothing written, stored rows that break their grammar failing typed,
//! read-only opens that create and write nothing, a dropped connection
//! reported as `Unavailable` and reconnected, and registration and fence
//! acquisition raced by 8 threads, each with its own handle.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use custos_core::fence::Holder;
use custos_core::world::{
    ControlCatalog, FencePurpose, Outcome, Request, WorldIdentity, WorldRecord, WorldStatus,
    WriterMode,
};
use custos_postgres::control::{
    OpenError, PgControlCatalog, Refusal, CONTROL_TABLES, CONTROL_VERSION,
};
use custos_postgres::Target;
use custos_testkit::pg_cluster::{shared, unique_schema};

mod support;

fn target() -> Target {
    Target::new(shared().unwrap().url(), unique_schema("control")).unwrap()
}

fn fresh() -> PgControlCatalog {
    PgControlCatalog::open(target()).expect("open a fresh control catalog")
}

/// A schema of its own, opened afresh by every call.
fn place() -> impl Fn() -> PgControlCatalog {
    let target = target();
    move || PgControlCatalog::open(target.clone()).expect("reopen the control catalog")
}

custos_conformance::control_catalog_suite!(postgres_control, fresh, reopen: place);

fn raw(t: &Target) -> postgres::Client {
    t.connect().unwrap()
}

fn record(name: &str) -> WorldRecord {
    let mut id = WorldIdentity::new("w-race", name);
    id.run_id = Some("run-1".into());
    WorldRecord::active(id, WriterMode::CleanupOnly)
}

/// Every row of the schema's catalog tables, as text, for "nothing was
/// written" comparisons.
fn dump(t: &Target) -> Vec<String> {
    let mut c = raw(t);
    let mut out = Vec::new();
    for table in std::iter::once("custos_versions").chain(CONTROL_TABLES.iter().copied()) {
        for r in c
            .query(
                &format!("SELECT x::text FROM {table} x ORDER BY x::text COLLATE \"C\""),
                &[],
            )
            .unwrap()
        {
            out.push(format!("{table}: {}", r.get::<_, String>(0)));
        }
    }
    out
}

fn schema_count(c: &mut postgres::Client, schema: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
        &[&schema],
    )
    .unwrap()
    .get(0)
}

#[test]
fn a_newer_stored_version_is_refused_with_nothing_written() {
    let t = target();
    let c = PgControlCatalog::open(t.clone()).unwrap();
    c.register(&record("n")).unwrap();
    drop(c);
    raw(&t)
        .execute(
            "UPDATE custos_versions SET version = $1 WHERE component = 'control'",
            &[&(CONTROL_VERSION + 1)],
        )
        .unwrap();
    let before = dump(&t);
    let e = PgControlCatalog::open(t.clone()).unwrap_err();
    assert!(
        matches!(
            &e,
            OpenError::UnsupportedVersion { found, supported, schema, .. }
                if *found == CONTROL_VERSION + 1 && *supported == CONTROL_VERSION && schema == t.schema()
        ),
        "{e}"
    );
    assert!(e.to_string().starts_with("UnsupportedVersion:"), "{e}");
    let e = PgControlCatalog::open_read_only(t.clone()).unwrap_err();
    assert!(
        matches!(
            &e,
            OpenError::NotReadable {
                rule: Refusal::Version { .. },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(t.schema()), "{e}");
    assert_eq!(dump(&t), before);
}

#[test]
fn stored_values_that_break_their_grammar_fail_typed() {
    let t = target();
    let c = PgControlCatalog::open(t.clone()).unwrap();
    c.register(&record("n")).unwrap();
    let mut raw = raw(&t);
    raw.execute("UPDATE control_worlds SET status = 'zombie'", &[])
        .unwrap();
    let e = c.discover_worlds().unwrap_err();
    assert_eq!(e.reason(), "Invalid", "{e}");
    assert!(e.to_string().contains("control_worlds row w-race"), "{e}");
    assert!(e.to_string().contains("status"), "{e}");
    assert_eq!(
        c.register(&record("n")).unwrap_err().reason(),
        "Invalid",
        "a write never decides over a row it cannot read"
    );
    assert_eq!(
        c.open_world_readonly("w-race").unwrap_err().reason(),
        "Invalid"
    );
    // A legacy row without a writer mode reads as resumable; an unknown one
    // is kept as read.
    raw.execute(
        "UPDATE control_worlds SET status = 'active', writer_mode = NULL",
        &[],
    )
    .unwrap();
    assert_eq!(
        c.open_world_readonly("w-race").unwrap().record.writer_mode,
        WriterMode::Resumable
    );
    raw.execute("UPDATE control_worlds SET writer_mode = 'v9-future'", &[])
        .unwrap();
    assert_eq!(
        c.open_world_readonly("w-race").unwrap().record.writer_mode,
        WriterMode::parse(Some("v9-future"))
    );
    // A negative tick head.
    raw.execute(
        "UPDATE control_worlds SET writer_mode = 'cleanup_only', tick_head = -1",
        &[],
    )
    .unwrap();
    let e = c.discover_worlds().unwrap_err();
    assert_eq!(e.reason(), "Invalid", "{e}");
    assert!(e.to_string().contains("tick_head"), "{e}");
    raw.execute("UPDATE control_worlds SET tick_head = 0", &[])
        .unwrap();
    // An over-long status word.
    raw.execute("UPDATE control_worlds SET status = repeat('a', 65)", &[])
        .unwrap();
    let e = c.discover_worlds().unwrap_err();
    assert!(e.to_string().contains("exceed the bound 64"), "{e}");
    raw.execute("UPDATE control_worlds SET status = 'active'", &[])
        .unwrap();
    // A stored fingerprint that is not its schema's.
    let sig = custos_conformance::control::signature("t-1", &["Score"]);
    c.apply(&Request::RegisterSignature {
        world_id: "w-race".into(),
        signature: sig,
    })
    .unwrap();
    raw.execute("UPDATE control_signatures SET fingerprint = 'ab'", &[])
        .unwrap();
    assert_eq!(c.list_signatures().unwrap_err().reason(), "Invalid");
    assert_eq!(
        c.open_world_readonly("w-race").unwrap_err().reason(),
        "Invalid"
    );
    raw.execute("DELETE FROM control_signatures", &[]).unwrap();
    // An over-holder fence row.
    c.acquire_fence(
        "w-race",
        &Holder::new("h").unwrap(),
        FencePurpose::Migration,
    )
    .unwrap();
    raw.execute("UPDATE control_fences SET holder = repeat('h', 129)", &[])
        .unwrap();
    let e = c.open_world_readonly("w-race").unwrap_err();
    assert!(e.to_string().contains("control_fences row w-race"), "{e}");
    raw.execute("UPDATE control_fences SET holder = 'h'", &[])
        .unwrap();
    assert_eq!(c.open_world_readonly("w-race").unwrap().fence.issued, 1);
    // An over-long world id inserted raw.
    raw.execute(
        "INSERT INTO control_worlds (world_id, name, status, tick_head)
         VALUES (repeat('w', 300), 'x', 'active', 0)",
        &[],
    )
    .unwrap();
    let e = c.discover_worlds().unwrap_err();
    assert_eq!(e.reason(), "Invalid", "{e}");
    assert!(e.to_string().contains("world_id"), "{e}");
    assert!(e.to_string().contains("300 bytes"), "{e}");
}

#[test]
fn a_read_only_open_creates_nothing_and_refuses_apply() {
    let c = shared().unwrap();
    let mut client = raw(&Target::new(c.url(), "public").unwrap());
    // A missing schema: refused, nothing created.
    let missing = target();
    let e = PgControlCatalog::open_read_only(missing.clone()).unwrap_err();
    assert!(
        matches!(
            &e,
            OpenError::NotReadable {
                rule: Refusal::MissingSchema,
                schema
            } if schema == missing.schema()
        ),
        "{e}"
    );
    assert!(e.to_string().starts_with("NotReadable: schema "), "{e}");
    assert_eq!(schema_count(&mut client, missing.schema()), 0);
    // A schema without a catalog: refused, nothing created in it.
    let empty = target();
    client
        .batch_execute(&format!("CREATE SCHEMA {}", empty.schema()))
        .unwrap();
    let e = PgControlCatalog::open_read_only(empty.clone()).unwrap_err();
    assert!(
        matches!(
            e,
            OpenError::NotReadable {
                rule: Refusal::NotStored { .. },
                ..
            }
        ),
        "{e}"
    );
    let n: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1",
            &[&empty.schema()],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    // A catalog missing a table.
    let broken = target();
    drop(PgControlCatalog::open(broken.clone()).unwrap());
    raw(&broken)
        .batch_execute("DROP TABLE control_staged")
        .unwrap();
    assert!(matches!(
        PgControlCatalog::open_read_only(broken).unwrap_err(),
        OpenError::NotReadable {
            rule: Refusal::MissingTable {
                what: "control catalog",
                table: "control_staged"
            },
            ..
        }
    ));
    // A real catalog: reads work, apply is refused and writes nothing.
    let t = target();
    let w = PgControlCatalog::open(t.clone()).unwrap();
    w.register(&record("n")).unwrap();
    assert!(!w.is_read_only());
    let ro = PgControlCatalog::open_read_only(t.clone()).unwrap();
    assert!(ro.is_read_only());
    assert_eq!(ro.discover_worlds().unwrap(), vec![record("n")]);
    let before = dump(&t);
    for req in [
        Request::Register {
            record: record("n"),
        },
        Request::AdvanceTick {
            world_id: "w-race".into(),
            tick: 5,
        },
        Request::AcquireFence {
            world_id: "w-race".into(),
            holder: Holder::new("ro").unwrap(),
            purpose: FencePurpose::Migration,
        },
    ] {
        let e = ro.apply(&req).unwrap_err();
        assert_eq!(e.reason(), "BackendFault", "{e}");
        assert!(e.to_string().contains("read-only"), "{e}");
    }
    assert_eq!(dump(&t), before);
    // The writer's changes are visible to the read-only handle.
    w.apply(&Request::AdvanceTick {
        world_id: "w-race".into(),
        tick: 7,
    })
    .unwrap();
    assert_eq!(
        ro.open_world_readonly("w-race").unwrap().record.tick_head,
        7
    );
}

#[test]
fn errors_and_debug_never_show_the_url_or_password() {
    let c = shared().unwrap();
    let bad = Target::new(
        c.url().replace(c.password(), "wrong-secret-x"),
        unique_schema("control"),
    )
    .unwrap();
    for e in [
        PgControlCatalog::open(bad.clone()).unwrap_err(),
        PgControlCatalog::open_read_only(bad).unwrap_err(),
    ] {
        let text = format!("{e} {e:?}");
        assert!(matches!(e, OpenError::Unavailable { .. }), "{text}");
        assert!(!text.contains("wrong-secret-x"), "{text}");
        assert!(!text.contains(c.password()), "{text}");
    }
    let cat = fresh();
    let text = format!("{cat:?}");
    assert!(!text.contains(c.password()), "{text}");
    assert!(!text.contains(&c.url()), "{text}");
}

#[test]
fn a_dropped_connection_is_unavailable_then_reconnects() {
    let t = target();
    let c = PgControlCatalog::open(t.clone()).unwrap();
    c.register(&record("n")).unwrap();
    let pid = c.backend_pid().unwrap();
    let ok: bool = raw(&t)
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap()
        .get(0);
    assert!(ok);
    // The first use after the drop may notice it (Unavailable) or may
    // already reconnect; either way the retried request converges.
    let mut answers = Vec::new();
    for _ in 0..3 {
        match c.apply(&Request::AdvanceTick {
            world_id: "w-race".into(),
            tick: 4,
        }) {
            Ok(o) => {
                answers.push(format!("{o:?}"));
                break;
            }
            Err(e) => {
                assert_eq!(e.reason(), "Unavailable", "{e}");
                answers.push(e.reason().to_owned());
            }
        }
    }
    assert_eq!(
        answers.last().map(String::as_str),
        Some("TickAdvanced { head: 4 }"),
        "{answers:?}"
    );
    assert_ne!(c.backend_pid().unwrap(), pid);
    assert_eq!(c.open_world_readonly("w-race").unwrap().record.tick_head, 4);
}

#[test]
fn tick_heads_of_unknown_and_destroyed_worlds_are_refused_and_change_nothing() {
    let c = fresh();
    let tick = |w: &str, t: u64| {
        c.apply(&custos_core::world::Request::AdvanceTick {
            world_id: w.into(),
            tick: t,
        })
    };
    assert!(tick("nobody", 3).is_err());
    c.register(&record("n")).unwrap();
    tick("w-race", 5).unwrap();
    assert_eq!(c.open_world_readonly("w-race").unwrap().record.tick_head, 5);
    c.retire(&record("n")).unwrap();
    assert!(tick("w-race", 9).is_err());
    let r = c.open_world_readonly("w-race").unwrap().record;
    assert_eq!((r.tick_head, r.status), (5, WorldStatus::Destroyed));
}

// ------------------------------------------------------------------ races

const THREADS: usize = 8;

/// Runs `f(i, handle)` on `THREADS` threads, each with its own handle on
/// `t` (opened concurrently), released together.
fn race<T: Send + 'static>(
    t: &Target,
    f: impl Fn(usize, &PgControlCatalog) -> T + Send + Sync + 'static,
) -> Vec<T> {
    support::race(t, THREADS, |t| PgControlCatalog::open(t).unwrap(), f)
}

#[test]
fn racing_registrations_of_one_world_create_one_row() {
    for round in 0..3 {
        let t = target();
        // Half the threads register one identity, half another.
        let answers = race(&t, |i, c| {
            let name = if i % 2 == 0 { "even" } else { "odd" };
            let word = match c.register(&record(name)) {
                Ok(Outcome::Registered { created: true }) => "CREATED".to_owned(),
                Ok(Outcome::Registered { created: false }) => "NOOP".to_owned(),
                Ok(other) => format!("OTHER {other:?}"),
                Err(e) => e.reason().to_owned(),
            };
            (name, word)
        });
        let created: Vec<_> = answers.iter().filter(|(_, w)| w == "CREATED").collect();
        assert_eq!(created.len(), 1, "round {round}: {answers:?}");
        let winner = created[0].0;
        for (name, word) in &answers {
            if word == "CREATED" {
                continue;
            }
            let want = if *name == winner {
                "NOOP"
            } else {
                "CatalogConflict"
            };
            assert_eq!(word, want, "round {round}: {answers:?}");
        }
        let c = PgControlCatalog::open_read_only(t.clone()).unwrap();
        assert_eq!(c.discover_worlds().unwrap(), vec![record(winner)]);
        let n: i64 = raw(&t)
            .query_one("SELECT count(*) FROM control_worlds", &[])
            .unwrap()
            .get(0);
        assert_eq!(n, 1);
    }
}

#[test]
fn racing_fence_acquires_get_distinct_epochs() {
    let t = target();
    let c = PgControlCatalog::open(t.clone()).unwrap();
    c.register(&WorldRecord::active(
        WorldIdentity::new("w-race", "n"),
        WriterMode::Resumable,
    ))
    .unwrap();
    let rounds = 4u64;
    let mut holders = BTreeSet::new();
    for round in 0..rounds {
        let answers = race(&t, move |i, c| {
            let holder = Holder::new(format!("writer-{round}-{i}")).unwrap();
            let purpose = if i % 2 == 0 {
                FencePurpose::Resume
            } else {
                FencePurpose::Migration
            };
            c.acquire_fence("w-race", &holder, purpose).unwrap()
        });
        let epochs: BTreeSet<u64> = answers.iter().map(|(e, _)| *e).collect();
        let base = round * THREADS as u64;
        let want: BTreeSet<u64> = (base + 1..=base + THREADS as u64).collect();
        assert_eq!(epochs, want, "round {round}: {answers:?}");
        // Each acquire staled the one issued just before it.
        for (epoch, staled) in &answers {
            let prev = epoch - 1;
            assert_eq!(*staled, (prev > 0).then_some(prev), "{answers:?}");
        }
        let f = c.open_world_readonly("w-race").unwrap().fence;
        assert_eq!(f.issued, base + THREADS as u64);
        holders.insert(f.holder.unwrap().as_str().to_owned());
        // Only the last epoch commits.
        assert_eq!(
            c.commit_tick("w-race", base + 1, round + 1)
                .unwrap_err()
                .reason(),
            "StaleFence"
        );
        assert_eq!(
            c.commit_tick("w-race", f.issued, round + 1).unwrap(),
            round + 1
        );
    }
    assert_eq!(holders.len(), rounds as usize);
}

// ------------------------------------------------------------ administration

custos_conformance::control_admin_suite!(postgres_admin, fresh, reopen: place);

/// Stored administration that was tampered with fails closed on every
/// read and every commit: a reservation that is not canonical or whose
/// plan digest lies, a receipt whose bytes, digest column or presence
/// disagree with the reservation, a second reservation row.
#[test]
fn tampered_administration_fails_closed() {
    use custos_conformance::control_admin::{assert_evidence_refused, commit_completed};
    type Tamper = (&'static str, &'static str);
    let cases: [Tamper; 6] = [
        (
            "non-canonical reservation",
            "UPDATE control_migrations SET reservation = '\\x20'::bytea || reservation",
        ),
        (
            "lying plan digest",
            "UPDATE control_migrations SET plan_digest = '00'",
        ),
        (
            "receipt bytes changed",
            "UPDATE control_migrations SET receipt = convert_to(replace(convert_from(receipt, 'UTF8'), 'custos-0.1.0', 'custos-0.1.1'), 'UTF8')",
        ),
        (
            "receipt digest column changed",
            "UPDATE control_migrations SET receipt_digest = 'ff'",
        ),
        (
            "receipt missing",
            "UPDATE control_migrations SET receipt = NULL",
        ),
        (
            "second reservation",
            "INSERT INTO control_migrations SELECT 'm9', plan_digest, reservation, receipt, receipt_digest FROM control_migrations",
        ),
    ];
    for (what, sql) in cases {
        let t = target();
        let c = PgControlCatalog::open(t.clone()).unwrap();
        let done = commit_completed(&c);
        let before = dump(&t);
        let n = raw(&t).execute(sql, &[]).unwrap();
        assert_eq!(n, 1, "{what}: the tamper changed one row");
        assert_ne!(dump(&t), before, "{what}: the tamper changed nothing");
        assert_evidence_refused(&c, &done, what);
    }
}

#[test]
fn a_read_only_handle_refuses_administrative_commits() {
    use custos_conformance::control_admin::completed;
    use custos_core::migration::control::{AdminEffect, ControlAdmin};
    use custos_core::migration::Destination;
    let t = target();
    drop(PgControlCatalog::open(t.clone()).unwrap());
    let ro = PgControlCatalog::open_read_only(t.clone()).unwrap();
    let before = dump(&t);
    let e = ro
        .commit_destination(&Destination::default(), &completed(), AdminEffect::None)
        .unwrap_err();
    assert_eq!(e.reason(), "BackendFault", "{e}");
    assert!(e.to_string().contains("read-only"), "{e}");
    assert_eq!(ro.load_destination().unwrap(), Destination::default());
    assert_eq!(dump(&t), before);
}
