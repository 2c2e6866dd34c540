//! Session storage on PostgreSQL: the whole conformance suite (most cases
//! share one schema, each in its own session — sessions are isolated; the
//! runtime table runs every case again in a schema of its own), the plan
//! check on a populated schema, version and corruption refusals, and the
//! writer lease judged at the server's clock.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use custos_conformance::storage::{check_branch_plan, del, entry, id, key, ns, set, usage};
use custos_core::lease::{LeaseError, Owner};
use custos_core::storage::{
    branch_scan, Commit, CommitError, EntryScan, KeyPrefix, Storage, StorageError, UsageScan,
};
use custos_postgres::storage::{OpenError, PgStorage, StorageConfig};
use custos_postgres::Target;
use custos_testkit::pg_cluster::shared;

mod support;
use support::{client, open_session, suite_target, target as new_target, unique_session};

fn owner(s: &str) -> Owner {
    Owner::new(s).unwrap()
}

/// A new session in the schema most conformance cases share.
fn fresh() -> PgStorage {
    open_session(suite_target("storage_suite"), unique_session())
}

/// A new session in a schema of its own.
fn fresh_schema() -> PgStorage {
    open_session(new_target("storage_case"), "only")
}

/// One session in a schema of its own, opened afresh (lease admission
/// included) by every call.
fn place() -> impl Fn() -> PgStorage {
    let target = new_target("storage_reopen");
    move || open_session(target.clone(), "only")
}

custos_conformance::storage_suite!(postgres, fresh, reopen: place);

/// The runtime table names the same cases, and every one passes through
/// it, each in a schema of its own.
#[test]
fn every_case_passes_through_the_table_in_its_own_schema() {
    use custos_conformance::storage::{storage_cases, STORAGE_CASES};
    let table = storage_cases::<PgStorage>();
    custos_conformance::assert_every_case_passes(
        "postgres",
        "conformance cases",
        &table,
        STORAGE_CASES,
        &fresh_schema,
    );
}

// ------------------------------------------------------------- plans

/// The plan check sees the PostgreSQL plan (it is not vacuous): every
/// statement is an index path, and the entries table is reached by index.
#[test]
fn branch_plan_is_exposed_and_uses_indexes() {
    let s = fresh();
    custos_conformance::storage::branch_tree(&s);
    let plan = s
        .explain_branch_scan(&branch_scan(id("f")))
        .unwrap()
        .expect("postgres exposes a plan");
    println!("{}", plan.join("\n"));
    assert!(
        plan.iter()
            .any(|l| l.contains("Index") && l.contains("on storage_entries")),
        "{plan:?}"
    );
    assert!(
        plan.iter()
            .any(|l| l.contains("Index") && l.contains("on storage_branch_entries")),
        "{plan:?}"
    );
    check_branch_plan(&plan).unwrap();
    // The check refuses what it must.
    let mut bad = plan.clone();
    bad.push("  ->  Seq Scan on storage_entries".to_owned());
    assert!(check_branch_plan(&bad).is_err());
    let mut bad = plan;
    bad.push("  ->  Sort".to_owned());
    assert!(check_branch_plan(&bad).is_err());
}

/// On a schema holding many sessions (200 of 100 entries each, vacuumed
/// and analyzed),
/// the planner's own choice with default settings reaches the entries and
/// the branch index by index, without sorting — the plan the conformance
/// case checks under a seq-scan penalty is the one a populated schema
/// takes.
#[test]
fn branch_plan_as_planned_on_a_populated_schema_uses_indexes() {
    let t = new_target("storage_plan");
    drop(PgStorage::open(StorageConfig::new(t.clone(), "probe", owner("o"))).unwrap());
    let mut c = client(&t);
    c.batch_execute(
        "INSERT INTO storage_sessions (session, next_seq)
             SELECT 'bulk' || s, 101 FROM generate_series(0, 199) s;
         INSERT INTO storage_branch_meta (session, segment, parent_segment, parent_pos)
             SELECT 'bulk' || s, 1, NULL, NULL FROM generate_series(0, 199) s;
         INSERT INTO storage_entries (session, seq, id, parent, kind, payload, ts, segment, pos)
             SELECT 'bulk' || s, g, 'b' || g, CASE WHEN g = 1 THEN NULL ELSE 'b' || (g - 1) END,
                    'm', '\\x00'::bytea, 0, 1, g - 1
             FROM generate_series(0, 199) s, generate_series(1, 100) g;
         INSERT INTO storage_branch_entries (session, segment, pos, seq, kind)
             SELECT 'bulk' || s, 1, g - 1, g, 'm'
             FROM generate_series(0, 199) s, generate_series(1, 100) g;",
    )
    .unwrap();
    // What autovacuum does to write-once tables (PostgreSQL 13+ vacuums
    // after inserts too): statistics and the visibility map.
    c.batch_execute("VACUUM ANALYZE").unwrap();
    let bulk = PgStorage::open(StorageConfig::new(t.clone(), "bulk7", owner("o"))).unwrap();
    let got = bulk.scan_branch(&branch_scan(id("b100")).limit(3)).unwrap();
    let names: Vec<&str> = got.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(names, ["b100", "b99", "b98"]);
    assert_eq!(
        bulk.scan_branch(&branch_scan(id("b100"))).unwrap().len(),
        100
    );
    let probe = PgStorage::open(StorageConfig::new(t, "probe", owner("o"))).unwrap();
    custos_conformance::storage::branch_tree(&probe);
    for s in [&bulk, &probe] {
        let leaf = if s.session() == "probe" { "f" } else { "b100" };
        let plan = s
            .explain_branch_scan_as_planned(&branch_scan(id(leaf)))
            .unwrap();
        println!("{}:\n{}", s.session(), plan.join("\n"));
        check_branch_plan(&plan).unwrap();
        // The two tables a walk reads per entry are reached by index
        // (`storage_branch_meta`, one row per fork, may be scanned while
        // it is a page or two).
        for table in ["storage_entries", "storage_branch_entries"] {
            assert!(
                plan.iter()
                    .any(|l| l.contains("Index") && l.contains(&format!("on {table}"))),
                "{table}:\n{}",
                plan.join("\n")
            );
            assert!(
                !plan
                    .iter()
                    .any(|l| l.contains(&format!("Seq Scan on {table}"))),
                "{table}:\n{}",
                plan.join("\n")
            );
        }
    }
}

/// The plan the server runs a commit's footprint read with once it caches
/// the statement's generic plan (forced here, so the check does not depend
/// on when the server switches to it): `sql` prepared with parameter
/// `types`, executed with `args`.
fn generic_plan(c: &mut ::postgres::Client, sql: &str, types: &str, args: &str) -> Vec<String> {
    c.batch_execute(&format!(
        "SET plan_cache_mode = force_generic_plan; PREPARE fp({types}) AS {sql}"
    ))
    .unwrap();
    let plan = c
        .query(&format!("EXPLAIN EXECUTE fp({args})"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    c.batch_execute("DEALLOCATE fp; RESET plan_cache_mode")
        .unwrap();
    plan
}

/// Whether `plan` reaches `table` only by probing `index` with the whole
/// key (`cond` in its index condition, one value: not `= ANY`): no
/// sequential, bitmap or hashed read of the session's rows.
fn probes_by_key(plan: &[String], table: &str, index: &str, cond: &str) -> Result<(), String> {
    let text = plan.join("\n");
    for bad in [
        format!("Seq Scan on {table}"),
        format!("Bitmap Heap Scan on {table}"),
        "Hash Join".to_owned(),
    ] {
        if text.contains(&bad) {
            return Err(format!("{bad}:\n{text}"));
        }
    }
    let probe = plan
        .iter()
        .position(|l| l.contains(&format!("using {index} on {table}")))
        .ok_or_else(|| format!("no scan of {index}:\n{text}"))?;
    match plan.get(probe + 1) {
        Some(l) if l.contains("Index Cond") && l.contains(cond) && !l.contains("ANY") => Ok(()),
        _ => Err(format!("{index} not probed by {cond}:\n{text}")),
    }
}

/// A schema whose session `big` holds 5,000 registers, entries and usage
/// rows (no statistics yet), and a client of it.
fn big_session() -> ::postgres::Client {
    let t = new_target("storage_fp");
    drop(PgStorage::open(StorageConfig::new(t.clone(), "big", owner("o"))).unwrap());
    let mut c = client(&t);
    c.batch_execute(
        "INSERT INTO storage_registers (session, namespace, key, value, seq)
             SELECT 'big', 'n', 'k' || g, '\\x00'::bytea, g FROM generate_series(1, 5000) g;
         INSERT INTO storage_entries (session, seq, id, parent, kind, payload, ts, segment, pos)
             SELECT 'big', 5000 + g, 'e' || g, NULL, 'm', '\\x00'::bytea, 0, g, 0
             FROM generate_series(1, 5000) g;
         INSERT INTO storage_usage (session, seq, id, ts, input_tokens, output_tokens,
                 cache_read_tokens, cache_write_tokens, cost_micros, details)
             SELECT 'big', 10000 + g, 'u' || g, 0, 1, 1, 0, 0, 1, '\\x7b7d'::bytea
             FROM generate_series(1, 5000) g;",
    )
    .unwrap();
    c
}

/// `(what, statement, parameter types, arguments, table, index, condition)`
/// of each keyed read: the plan must probe `index` of `table` by
/// `condition`.
type KeyedRead = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

/// The keyed reads of session storage: a commit's footprint (registers,
/// ids in both tables), `get_entries` and a snapshot's cells.
const KEYED_READS: [KeyedRead; 5] = [
    (
        "footprint registers",
        custos_postgres::storage::REGISTERS_FOOTPRINT_SQL,
        "text, text[], text[]",
        "'big', ARRAY['n'], ARRAY['k7']",
        "storage_registers",
        "storage_registers_pkey",
        "key =",
    ),
    (
        "footprint ids (entries)",
        custos_postgres::storage::IDS_FOOTPRINT_SQL,
        "text, text[]",
        "'big', ARRAY['e7', 'u7']",
        "storage_entries",
        "storage_entries_id",
        "id =",
    ),
    (
        "footprint ids (usage)",
        custos_postgres::storage::IDS_FOOTPRINT_SQL,
        "text, text[]",
        "'big', ARRAY['e7', 'u7']",
        "storage_usage",
        "storage_usage_id",
        "id =",
    ),
    (
        "get_entries",
        custos_postgres::storage::ENTRIES_BY_ID_SQL,
        "text, text[]",
        "'big', ARRAY['e7', 'e8']",
        "storage_entries",
        "storage_entries_id",
        "id =",
    ),
    (
        "snapshot cells",
        custos_postgres::storage::CELLS_SQL,
        "text, text, text[]",
        "'big', 'n', ARRAY['k7', 'k8']",
        "storage_registers",
        "storage_registers_pkey",
        "key =",
    ),
];

/// The footprint reads as they were: a plain join of the wanted keys, and
/// `id = ANY($2)`.
const OLD_READS: [KeyedRead; 2] = [
    (
        "old footprint registers",
        "SELECT r.namespace, r.key, r.seq::text FROM storage_registers r
         JOIN unnest($2::text[], $3::text[]) AS f(namespace, key)
           ON r.namespace = f.namespace AND r.key = f.key
         WHERE r.session = $1",
        "text, text[], text[]",
        "'big', ARRAY['n'], ARRAY['k7']",
        "storage_registers",
        "storage_registers_pkey",
        "key =",
    ),
    (
        "old footprint ids",
        "SELECT id, true FROM storage_entries WHERE session = $1 AND id = ANY($2)
         UNION ALL
         SELECT id, false FROM storage_usage WHERE session = $1 AND id = ANY($2)",
        "text, text[]",
        "'big', ARRAY['e7', 'u7']",
        "storage_entries",
        "storage_entries_id",
        "id =",
    ),
];

/// A commit reads the rows its footprint names by key, however many the
/// session holds (5,000 registers, entries and usage rows), before and
/// after the tables are analyzed: under the statement's cached generic
/// plan each named register and id is one probe of its unique index, and
/// so are `get_entries` and a snapshot's cells. The check refuses the
/// reads as they were, which the generic plan of a table without
/// statistics made a hash join or a bitmap scan over every row of the
/// session (a commit grew slower with each key stored).
#[test]
fn a_commit_reads_its_footprint_by_key_whatever_the_session_holds() {
    let mut c = big_session();
    for analyzed in [false, true] {
        if analyzed {
            c.batch_execute("VACUUM ANALYZE").unwrap();
        }
        for (what, sql, types, args, table, index, cond) in KEYED_READS {
            let plan = generic_plan(&mut c, sql, types, args);
            println!("{what} (analyzed {analyzed}):\n{}", plan.join("\n"));
            if let Err(e) = probes_by_key(&plan, table, index, cond) {
                panic!("{what} (analyzed {analyzed}): {e}");
            }
        }
        if analyzed {
            continue;
        }
        for (what, sql, types, args, table, index, cond) in OLD_READS {
            let plan = generic_plan(&mut c, sql, types, args);
            println!("{what}:\n{}", plan.join("\n"));
            assert!(
                probes_by_key(&plan, table, index, cond).is_err(),
                "{what}: {}",
                plan.join("\n")
            );
        }
    }
}

// ------------------------------------------------------ sessions, versions

/// Two sessions of one schema, each with its own owner and lease, share
/// ids, keys and seqs without seeing each other.
#[test]
fn sessions_of_one_schema_are_isolated() {
    let t = new_target("storage_iso");
    let a = PgStorage::open(StorageConfig::new(t.clone(), "a", owner("x"))).unwrap();
    let b = PgStorage::open(StorageConfig::new(t, "b", owner("y"))).unwrap();
    let ra = a
        .commit(
            &Commit::at(1)
                .write(entry("e", None, "m"))
                .write(set("n", "k", b"a")),
        )
        .unwrap();
    let rb = b
        .commit(
            &Commit::at(2)
                .floor(10)
                .write(entry("e", None, "tool"))
                .write(usage("u", 5, 5)),
        )
        .unwrap();
    assert_eq!((ra.seqs, rb.seqs), (vec![1, 2], vec![10, 11]));
    assert_eq!(
        a.get_entries(&[id("e")]).unwrap()[0]
            .as_ref()
            .unwrap()
            .kind
            .as_str(),
        "m"
    );
    assert_eq!(
        b.get_entries(&[id("e")]).unwrap()[0]
            .as_ref()
            .unwrap()
            .kind
            .as_str(),
        "tool"
    );
    assert!(b.get_register(&ns("n"), &key("k")).unwrap().is_none());
    assert_eq!(a.stats().unwrap().usage_rows, 0);
    assert_eq!(b.scan_entries(&EntryScan::all()).unwrap().len(), 1);
    assert_eq!(a.scan_usage(&UsageScan::all()).unwrap().len(), 0);
    assert_eq!(a.lease_pair().unwrap().1, 1);
    assert_eq!(b.lease_pair().unwrap().1, 1);
}

/// A session name outside the bounds is refused before anything connects.
#[test]
fn invalid_session_names_are_refused() {
    let t = new_target("storage_names");
    for bad in [String::new(), "x".repeat(129), "a\nb".to_owned()] {
        let e =
            PgStorage::open(StorageConfig::new(t.clone(), bad.clone(), owner("o"))).unwrap_err();
        assert_eq!(e, OpenError::InvalidSession { len: bad.len() });
    }
    assert_eq!(
        support::schema_count(&t),
        0,
        "a refused name creates no schema"
    );
}

/// An open handle notices a newer build's migration before it writes: the
/// commit is refused as a fault naming both versions, and nothing of it is
/// stored (the version is read by the head-row lock statement itself).
#[test]
fn an_open_handle_refuses_to_write_under_a_newer_schema_version() {
    let t = new_target("storage_newer");
    let s = PgStorage::open(StorageConfig::new(t.clone(), "s", owner("o"))).unwrap();
    s.commit(&Commit::at(0).write(entry("a", None, "m")))
        .unwrap();
    let mut c = client(&t);
    c.execute(
        "UPDATE custos_versions SET version = version + 1 WHERE component = 'storage'",
        &[],
    )
    .unwrap();
    let e = s
        .commit(&Commit::at(1).write(entry("b", Some("a"), "m")))
        .unwrap_err();
    assert_eq!(e.reason(), "Faulted", "{e}");
    assert!(e.to_string().contains("schema-version"), "{e}");
    let stored: i64 = c
        .query_one("SELECT count(*) FROM storage_entries", &[])
        .unwrap()
        .get(0);
    assert_eq!(stored, 1, "the refused commit wrote");
}

/// How many sessions the schema holds, and the lease owner of session `s`.
fn sessions_and_lease(c: &mut ::postgres::Client) -> (i64, Option<String>) {
    let r = c
        .query_one(
            "SELECT (SELECT count(*) FROM storage_sessions),
                    (SELECT lease_owner FROM storage_sessions WHERE session = 's')",
            &[],
        )
        .unwrap();
    (r.get(0), r.get(1))
}

/// A newer stored version is refused, and nothing is written: no head row,
/// no lease, no table created in a schema that had none.
#[test]
fn a_newer_stored_version_is_refused_with_nothing_written() {
    let t = new_target("storage_ver");
    let s = PgStorage::open(StorageConfig::new(t.clone(), "s", owner("o"))).unwrap();
    s.commit(&Commit::at(0).write(entry("a", None, "m")))
        .unwrap();
    s.close().unwrap();
    let mut c = client(&t);
    c.execute(
        "UPDATE custos_versions SET version = 3 WHERE component = 'storage'",
        &[],
    )
    .unwrap();
    let before = sessions_and_lease(&mut c);
    for session in ["s", "new"] {
        let e = PgStorage::open(StorageConfig::new(t.clone(), session, owner("p"))).unwrap_err();
        assert!(
            matches!(
                e,
                OpenError::UnsupportedVersion {
                    found: 3,
                    supported: 2,
                    ..
                }
            ),
            "{e}"
        );
    }
    let after = sessions_and_lease(&mut c);
    assert_eq!(before, after);
    assert_eq!(before, (1, None));

    // A schema whose version row is newer but holds no tables gets none.
    let t2 = new_target("storage_ver");
    support::versions_only_schema(&t2, "storage", 7);
    let e = PgStorage::open(StorageConfig::new(t2.clone(), "s", owner("o"))).unwrap_err();
    assert!(
        matches!(e, OpenError::UnsupportedVersion { found: 7, .. }),
        "{e}"
    );
    assert_eq!(support::table_count(&t2), 1, "only custos_versions");
}

// ------------------------------------------------------------ corruption

/// Corrupt stored rows fail reads typed, naming table and column — never a
/// panic, never read as absent.
#[test]
fn corrupt_rows_fail_reads_typed() {
    let t = new_target("storage_corrupt");
    let s = PgStorage::open(StorageConfig::new(t.clone(), "s", owner("o"))).unwrap();
    s.commit(
        &Commit::at(0)
            .write(entry("a", None, "m"))
            .write(entry("b", Some("a"), "m"))
            .write(usage("u", 1, 1))
            .write(set("n", "k", b"v")),
    )
    .unwrap();
    let mut c = client(&t);
    // A negative seq (the range check and the write-once guard bypassed).
    c.batch_execute(
        "ALTER TABLE storage_entries DISABLE TRIGGER storage_entries_write_once;
         ALTER TABLE storage_entries DROP CONSTRAINT storage_entries_seq_range;
         UPDATE storage_entries SET seq = -1 WHERE session = 's' AND id = 'b';",
    )
    .unwrap();
    let corrupt = |r: Result<(), StorageError>, (table, column): (&str, &str)| match r {
        Err(StorageError::Corrupt { detail }) => {
            assert!(detail.starts_with(&format!("{table} row ")), "{detail}");
            assert!(detail.contains(&format!(": column {column}: ")), "{detail}");
        }
        other => panic!("expected Corrupt naming {table}.{column}, got {other:?}"),
    };
    corrupt(
        s.scan_entries(&EntryScan::all()).map(drop),
        ("storage_entries", "seq"),
    );
    corrupt(
        s.scan_entry_heads(&EntryScan::all()).map(drop),
        ("storage_entries", "seq"),
    );
    corrupt(
        s.get_entries(&[id("b")]).map(drop),
        ("storage_entries", "seq"),
    );
    // The branch index still names seq 2, which no entry holds now.
    assert!(
        matches!(
            s.scan_branch(&branch_scan(id("b"))),
            Err(StorageError::Corrupt { detail }) if detail.starts_with("storage_branch_entries: names seq 2")
        ),
        "a branch row naming no entry"
    );
    // Over-long text.
    c.execute(
        "UPDATE storage_entries SET kind = repeat('k', 100) WHERE session = 's' AND id = 'a'",
        &[],
    )
    .unwrap();
    corrupt(
        s.get_entries(&[id("a")]).map(drop),
        ("storage_entries", "kind"),
    );
    // A negative usage figure.
    c.batch_execute(
        "ALTER TABLE storage_usage DISABLE TRIGGER storage_usage_write_once;
         ALTER TABLE storage_usage DROP CONSTRAINT storage_usage_cost_micros_check;
         UPDATE storage_usage SET cost_micros = -3 WHERE session = 's';",
    )
    .unwrap();
    corrupt(
        s.scan_usage(&UsageScan::all()).map(drop),
        ("storage_usage", "cost_micros"),
    );
    // A register value read as the wrong type is corrupt, not absent.
    c.execute(
        "ALTER TABLE storage_registers ALTER COLUMN value TYPE text USING encode(value, 'hex')",
        &[],
    )
    .unwrap();
    corrupt(
        s.get_register(&ns("n"), &key("k")).map(drop),
        ("storage_registers", "value"),
    );
    corrupt(
        s.list_registers(&ns("n"), &KeyPrefix::all()).map(drop),
        ("storage_registers", "value"),
    );
    // A negative lease fence in the head row: commits fault, opens refuse.
    c.execute(
        "UPDATE storage_sessions SET lease_fence = -5 WHERE session = 's'",
        &[],
    )
    .unwrap();
    let e = s.commit(&Commit::at(0).write(del("n", "zz"))).unwrap_err();
    assert!(
        matches!(&e, CommitError::Faulted { reason } if reason.contains("storage_sessions row s: column lease_fence: ")),
        "{e}"
    );
    let e = PgStorage::open(StorageConfig::new(t, "s", owner("p"))).unwrap_err();
    assert!(
        matches!(&e, OpenError::Corrupt { detail } if detail.contains("storage_sessions row s: column lease_fence: ")),
        "{e}"
    );
}

// ----------------------------------------------------------------- lease

/// A second owner is refused while the lease is live and steals it after
/// expiry (server time, real sleeps) with the fence bumped; the old
/// handle's commit is then refused and applies nothing.
#[test]
fn an_expired_lease_is_stolen_and_the_old_handle_is_fenced_out() {
    let t = new_target("storage_lease");
    let a = PgStorage::open(StorageConfig::new(t.clone(), "s", owner("a")).ttl(300)).unwrap();
    assert_eq!(a.lease_pair().unwrap(), (owner("a"), 1));
    a.commit(&Commit::at(0).write(entry("r", None, "m")))
        .unwrap();
    match PgStorage::open(StorageConfig::new(t.clone(), "s", owner("b")).ttl(300)) {
        Err(OpenError::Lease(LeaseError::LeaseHeld { holder, fence, .. })) => {
            assert_eq!((holder, fence), (owner("a"), 1));
        }
        other => panic!("expected LeaseHeld, got {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(450));
    let b = PgStorage::open(StorageConfig::new(t.clone(), "s", owner("b")).ttl(300)).unwrap();
    assert_eq!(b.lease_pair().unwrap(), (owner("b"), 2));
    let before = custos_conformance::storage::dump(&b);
    let e = a
        .commit(
            &Commit::at(0)
                .write(entry("x", Some("r"), "m"))
                .write(usage("u", 9, 9)),
        )
        .unwrap_err();
    assert_eq!(
        e,
        CommitError::Lease(LeaseError::LeaseLost {
            held_by: Some(owner("b"))
        })
    );
    assert_eq!(custos_conformance::storage::dump(&b), before);
    assert!(matches!(
        a.renew_lease(),
        Err(CommitError::Lease(LeaseError::LeaseLost { .. }))
    ));
    // The old handle's close leaves the new holder alone.
    a.close().unwrap();
    b.commit(&Commit::at(0).write(entry("y", Some("r"), "m")))
        .unwrap();
    assert_eq!(b.renew_lease().unwrap().fence, 2);
}

/// Close releases the lease: a new owner opens at once, under a fence above
/// every fence issued.
#[test]
fn close_releases_the_lease_so_a_new_owner_opens_at_once() {
    let t = new_target("storage_lease");
    let a = PgStorage::open(StorageConfig::new(t.clone(), "s", owner("a")).ttl(60_000)).unwrap();
    assert!(matches!(
        PgStorage::open(StorageConfig::new(t.clone(), "s", owner("b"))),
        Err(OpenError::Lease(LeaseError::LeaseHeld { .. }))
    ));
    a.close().unwrap();
    let b = PgStorage::open(StorageConfig::new(t.clone(), "s", owner("b"))).unwrap();
    assert_eq!(b.lease_pair().unwrap(), (owner("b"), 2));
    assert_eq!(
        a.commit(&Commit::at(0).write(del("n", "k")))
            .unwrap_err()
            .reason(),
        "Faulted"
    );
    // Dropping a handle releases too.
    drop(b);
    let c = PgStorage::open(StorageConfig::new(t, "s", owner("c"))).unwrap();
    assert_eq!(c.lease_pair().unwrap().1, 3);
}

/// Renewal keeps a short lease live past its ttl; a restart of the same
/// owner takes a new fence and fences its earlier incarnation out.
#[test]
fn renewal_keeps_the_lease_and_a_restart_fences_the_old_incarnation() {
    let t = new_target("storage_lease");
    let a = PgStorage::open(StorageConfig::new(t.clone(), "s", owner("a")).ttl(300)).unwrap();
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(100));
        let l = a.renew_lease().unwrap();
        assert_eq!((l.owner.clone(), l.fence), (owner("a"), 1));
    }
    assert!(matches!(
        PgStorage::open(StorageConfig::new(t.clone(), "s", owner("b")).ttl(300)),
        Err(OpenError::Lease(LeaseError::LeaseHeld { .. }))
    ));
    let a2 = PgStorage::open(StorageConfig::new(t, "s", owner("a")).ttl(300)).unwrap();
    assert_eq!(a2.lease_pair().unwrap().1, 2);
    assert_eq!(
        a.commit(&Commit::at(0).write(del("n", "k"))).unwrap_err(),
        CommitError::Lease(LeaseError::LeaseLost {
            held_by: Some(owner("a"))
        })
    );
    a2.commit(&Commit::at(0).write(del("n", "k"))).unwrap();
}

/// Neither errors nor Debug output carry the URL's password.
#[test]
fn errors_and_debug_never_show_the_password() {
    let c = shared().unwrap();
    let t = new_target("storage_secret");
    let s = PgStorage::open(StorageConfig::new(t.clone(), "s", owner("a"))).unwrap();
    let held = PgStorage::open(StorageConfig::new(t.clone(), "s", owner("b"))).unwrap_err();
    let bad = Target::new(c.url().replace(c.password(), "wrong-secret-x"), t.schema()).unwrap();
    let unreachable = PgStorage::open(StorageConfig::new(bad, "s", owner("b"))).unwrap_err();
    assert!(
        matches!(unreachable, OpenError::Unavailable { .. }),
        "{unreachable}"
    );
    for text in [
        format!("{s:?}"),
        format!("{held} {held:?}"),
        format!("{unreachable} {unreachable:?}"),
        format!("{:?}", StorageConfig::new(t, "s", owner("a"))),
    ] {
        assert!(!text.contains(c.password()), "{text}");
        assert!(!text.contains("wrong-secret-x"), "{text}");
    }
}
