//! Crash-state enumeration of the release repository: the recorded traces
//! of real operations — the first open of an empty root, a first publication, a
//! second one, an identical retry, a revoke and a retire, an open that
//! clears debris, a publication beside that debris, and the exact retry
//! that reconciles a publication which failed past its rename — are
//! replayed by [`crash_states_with`] into the crash states of every prefix
//! (unsynced entries lost, unsynced data empty or torn at sector
//! granularity, renames absent or half-done, where POSIX allows). Each
//! distinct state (per image, acknowledgement and side of the lifecycle
//! rename) is written into a fresh directory and reopened with
//! [`ReleaseRepository::open`], which must succeed, and then:
//!
//! - every release acknowledged before the crash point is present with its
//!   acknowledged membership, and a full verified fetch returns the exact
//!   bytes published;
//! - an operation in flight shows its old or its new effect, never
//!   anything else, and its new effect only once the lifecycle rename was
//!   issued; nothing that was never published is visible;
//! - a renamed but uncommitted release is an invisible orphan, and an exact
//!   retry of the interrupted operation succeeds and is then fetchable.
//!
//! CI (default `cargo test`): 4 KiB components and the bounded sample of
//! [`Options::ci`]. Deep (`CUSTOS_CRASH_DEEP=1`, `make crash-deep`): 512 KiB
//! components (every one of their 1,023 torn prefixes), every combination,
//! and a lifecycle history over 100 more releases (half revoked; half
//! retired, then revoked). Distinct images are counted per protocol
//! (release publication, release lifecycle change, release open) and
//! printed as `crash states <protocol>: N distinct (T torn), all
//! recovered`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use custos_core::release::bounds::Bounds;
use custos_core::release::contract::{Contract, MagicOnly, ValType};
use custos_core::release::lifecycle::Membership;
use custos_core::release::Sha256;
use custos_fs::crash::{
    crash_states, crash_states_with, digest, image_of, Distinct, Image, NoSync, Node, Options,
};
use custos_fs::release::{ReleaseError, ReleaseRepository, RELEASES_DIR, STAGING_DIR};
use custos_fs::{Fs, Op, RealFs, Recorded, RecordingFs, LOCK_FILE};

mod support;
use support::{contract_of, param};

const TENANT: &str = "acme";

/// The protocols whose distinct crash states are counted.
const PUBLICATION: &str = "release publication";
/// A revoke or a retire.
const LIFECYCLE: &str = "release lifecycle change";
/// An open (first, or clearing debris).
const OPEN: &str = "release open";
/// The deep run's lifecycle history (its scenarios are not printed one by one).
const HISTORY: &str = "lifecycle history";
/// The releases of the deep run's lifecycle history.
const DEEP_LIFECYCLE_RELEASES: u32 = 100;

/// The inputs of one publication.
#[derive(Clone, Debug)]
struct Input {
    manifest: Vec<u8>,
    component: Vec<u8>,
    contract: Contract,
    digest: Sha256,
}

/// The component's length: several sectors in CI (torn states of its
/// unsynced write reached), 512 KiB in the deep run (1,023 torn prefixes).
fn component_len(options: &Options) -> usize {
    if options.is_deep() {
        512 << 10
    } else {
        4 << 10
    }
}

fn input(n: u32, len: usize) -> Input {
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    component.extend_from_slice(format!("release body {n}").as_bytes());
    let mut x = n.wrapping_mul(0x9e37_79b9) | 1;
    while component.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        component.push(x as u8);
    }
    let digest = Sha256::of(&component);
    let contract = contract_of(
        "api:demo/run",
        vec![param("x", ValType::List(Box::new(ValType::U8)))],
        vec![ValType::Option(Box::new(ValType::String))],
    );
    // Deliberately not canonical (field order, spacing): stored canonically.
    let manifest = format!(
        r#"{{ "version": "1.0.{n}", "name": "rel-{n}", "tenant": "{TENANT}", "service": "svc", "exports": ["api:demo/run"], "component_digest": "{digest}" }}"#
    )
    .into_bytes();
    Input {
        manifest,
        component,
        contract,
        digest,
    }
}

fn open<F: Fs>(fs: F, root: &Path) -> Result<ReleaseRepository<F>, ReleaseError> {
    ReleaseRepository::open(fs, root, Bounds::default(), Arc::new(MagicOnly))
}

fn publish<F: Fs>(repo: &ReleaseRepository<F>, i: &Input) -> Result<(), ReleaseError> {
    repo.publish(&i.manifest, i.component.clone(), i.contract.clone())
        .map(|p| assert_eq!(p.digest, i.digest))
}

/// The image of everything under `base` on the real disk (the lock file
/// excluded: it is no durable state and open recreates it).
fn snapshot(base: &Path) -> Image {
    let mut image = image_of(base).unwrap();
    image.retain(|p, _| p.file_name().is_none_or(|n| n != LOCK_FILE));
    image
}

fn materialize(image: &Image, from: &Path, to: &Path) {
    custos_fs::crash::materialize(image, from, to).unwrap();
}

/// What one traced operation changes: per digest, the membership (or
/// `None`: not visible) before it and once it is acknowledged.
struct Scenario<'a> {
    name: &'a str,
    /// The protocol whose distinct crash states it counts toward.
    protocol: &'static str,
    before: BTreeMap<Sha256, Membership>,
    after: BTreeMap<Sha256, Membership>,
    /// How to redo the operation after a crash that interrupted it.
    retry: &'a dyn Fn(&ReleaseRepository<NoSync>),
}

/// Per-scenario counts.
#[derive(Debug, Default)]
struct Tally {
    states: usize,
    /// States whose image, acknowledgement and commit side were already
    /// checked in this scenario (the same image recovers the same way).
    repeated: usize,
    old: usize,
    new: usize,
    orphans: usize,
    retried: usize,
}

/// What every scenario of one history shares.
struct Ctx<'a> {
    /// The directory holding the root.
    base: &'a Path,
    root_name: &'a str,
    inputs: &'a BTreeMap<Sha256, Input>,
    options: Options,
}

/// Redoes an interrupted operation on the reopened `repo`: it must succeed
/// and leave the acknowledged state, durably.
fn redo(
    repo: ReleaseRepository<NoSync>,
    root: &Path,
    sc: &Scenario<'_>,
    inputs: &BTreeMap<Sha256, Input>,
    ctx: &str,
) {
    (sc.retry)(&repo);
    for (d, m) in &sc.after {
        assert_eq!(repo.membership(d), Some(*m), "{ctx}: retry did not land");
        check_visible(&repo, inputs, d, Some(*m), ctx);
    }
    drop(repo);
    let again = open(NoSync, root).unwrap_or_else(|e| panic!("{ctx}: reopen after retry: {e}"));
    for (d, m) in &sc.after {
        assert_eq!(again.membership(d), Some(*m), "{ctx}: retry not durable");
    }
}

fn check_scenario(
    cx: &Ctx<'_>,
    initial: &Image,
    trace: &[Recorded],
    sc: &Scenario<'_>,
    distinct: &mut Distinct,
) -> Tally {
    let Ctx {
        base,
        root_name,
        inputs,
        options,
    } = cx;
    // The commit point: the first rename of lifecycle state into place
    // (whatever its layout, its path names `lifecycle`).
    let commit_at = trace
        .iter()
        .position(|r| r.ok && matches!(&r.op, Op::Rename(_, to) if is_lifecycle(to)));
    let mut tally = Tally::default();
    let mut checked = std::collections::HashSet::new();
    for (n, state) in crash_states_with(initial, trace, options).enumerate() {
        tally.states += 1;
        let (k, image) = (&state.prefix, &state.image);
        let d = digest(image);
        distinct.insert_digest(d, state.torn > 0);
        let acknowledged = *k == trace.len();
        let issued = commit_at.is_some_and(|c| *k > c);
        if !checked.insert((d, acknowledged, issued)) {
            tally.repeated += 1;
            continue;
        }
        let scratch = tempfile::tempdir().unwrap();
        materialize(image, base, scratch.path());
        let root = scratch.path().join(root_name);
        let ctx = format!("{}: state {n} (prefix {k} of {})", sc.name, trace.len());
        let repo = open(NoSync, &root).unwrap_or_else(|e| {
            panic!("{ctx}: reopen failed (debris must never fail an open): {e} ({image:?})")
        });
        let mut changed = false;
        let mut orphaned = false;
        let digests: BTreeSet<Sha256> = sc.before.keys().chain(sc.after.keys()).copied().collect();
        for d in &digests {
            let seen = repo.membership(d);
            let (old, new) = (sc.before.get(d).copied(), sc.after.get(d).copied());
            if acknowledged {
                assert_eq!(seen, new, "{ctx}: {d} lost its acknowledged state");
            } else {
                assert!(
                    seen == old || seen == new,
                    "{ctx}: {d} is {seen:?}, neither {old:?} nor {new:?}"
                );
            }
            if seen != old {
                changed = true;
                assert!(issued, "{ctx}: {d} changed before its lifecycle rename");
            }
            if seen.is_none() && repo.orphans().contains(d) {
                orphaned = true;
            }
            check_visible(&repo, inputs, d, seen, &ctx);
        }
        // Nothing else is visible, adopted or orphaned.
        let visible = digests.iter().filter(|d| repo.membership(d).is_some());
        assert_eq!(
            repo.len(),
            visible.count(),
            "{ctx}: unexpected adopted release"
        );
        for o in repo.orphans() {
            assert!(
                sc.after.contains_key(&o) && !sc.before.contains_key(&o),
                "{ctx}: orphan {o} was not in flight"
            );
        }
        assert!(repo.pending().is_none(), "{ctx}: pending right after open");
        if changed {
            tally.new += 1;
        } else {
            tally.old += 1;
        }
        if orphaned {
            tally.orphans += 1;
        }
        // Redo an interrupted operation: it must succeed and leave the
        // acknowledged state.
        if !changed && sc.before != sc.after {
            redo(repo, &root, sc, inputs, &ctx);
            tally.retried += 1;
        }
    }
    assert!(
        tally.states > trace.len(),
        "{}: fewer crash states than prefixes",
        sc.name
    );
    if sc.name.starts_with(HISTORY) {
        return tally;
    }
    eprintln!(
        "{}: {} operations, {} crash states ({} repeated; {} old, {} new, {} with an orphan, {} retried)",
        sc.name,
        trace.len(),
        tally.states,
        tally.repeated,
        tally.old,
        tally.new,
        tally.orphans,
        tally.retried
    );
    tally
}

/// Whether `path` is lifecycle state (not a release directory).
fn is_lifecycle(path: &Path) -> bool {
    !path.components().any(|c| c.as_os_str() == RELEASES_DIR)
        && path
            .components()
            .any(|c| c.as_os_str().to_string_lossy().starts_with("lifecycle"))
}

/// A visible release: a member fetches byte-identically; a revoked or
/// retired one is refused by fetch and keeps its catalog row.
fn check_visible<F: Fs>(
    repo: &ReleaseRepository<F>,
    inputs: &BTreeMap<Sha256, Input>,
    d: &Sha256,
    seen: Option<Membership>,
    ctx: &str,
) {
    let Some(m) = seen else {
        assert!(repo.fetch(d).is_err(), "{ctx}: invisible {d} fetched");
        return;
    };
    let want = inputs.get(d).unwrap();
    let row = repo.get_catalog_entry(TENANT, d).unwrap();
    assert_eq!(row.membership, m, "{ctx}: catalog row of {d}");
    if m == Membership::Member {
        let got = repo
            .fetch(d)
            .unwrap_or_else(|e| panic!("{ctx}: fetch {d}: {e}"));
        assert_eq!(got.component, want.component, "{ctx}: component of {d}");
        assert_eq!(got.contract, want.contract, "{ctx}: contract of {d}");
        assert_eq!(got.descriptor.component_digest, *d);
        assert_eq!(
            repo.resolve(got.manifest.tenant.as_deref(), &got.manifest.reference())
                .unwrap()
                .component_digest,
            *d
        );
    } else {
        assert_eq!(
            repo.fetch(d).map(|_| ()).map_err(|e| e.class()),
            Err(custos_core::Class::FailedPrecondition),
            "{ctx}: ineligible {d} fetched"
        );
    }
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one history of one catalog, in numbered steps: each step is traced from the disk the previous step left, so the steps read in order in one place; split up, every helper would take and return the repository, the recording fs and the expected memberships"
)]
fn every_crash_state_of_every_release_operation_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let root_name = "catalog";
    let root = base.join(root_name);
    let options = Options::from_env().unwrap();
    let len = component_len(&options);
    let (a, b, c, d) = (input(1, len), input(2, len), input(3, len), input(4, len));
    // The deep run's lifecycle history: more releases (small components).
    let extras: Vec<Input> = if options.is_deep() {
        (0..DEEP_LIFECYCLE_RELEASES)
            .map(|i| input(100 + i, 1 << 10))
            .collect()
    } else {
        Vec::new()
    };
    let inputs: BTreeMap<Sha256, Input> = [&a, &b, &c, &d]
        .into_iter()
        .chain(&extras)
        .map(|i| (i.digest, i.clone()))
        .collect();
    let fs = RecordingFs::new(RealFs);
    let none = BTreeMap::new();
    let member = |ds: &[&Input]| -> BTreeMap<Sha256, Membership> {
        ds.iter().map(|i| (i.digest, Membership::Member)).collect()
    };
    let mut total = 0;
    let mut protocols: BTreeMap<&'static str, Distinct> = BTreeMap::new();
    let cx = Ctx {
        base: &base,
        root_name,
        inputs: &inputs,
        options,
    };
    let mut check = |initial: &Image, trace: &[Recorded], sc: Scenario<'_>| {
        let distinct = protocols.entry(sc.protocol).or_default();
        total += check_scenario(&cx, initial, trace, &sc, distinct).states;
    };

    // 1. The first open of an empty root (created by the open).
    let initial = snapshot(&base);
    fs.clear_trace();
    let repo = open(fs.clone(), &root).unwrap();
    let trace = fs.trace();
    check(
        &initial,
        &trace,
        Scenario {
            name: "first open",
            protocol: OPEN,
            before: none.clone(),
            after: none.clone(),
            retry: &|_| {},
        },
    );

    // 2. The first publication.
    let initial = snapshot(&base);
    fs.clear_trace();
    publish(&repo, &a).unwrap();
    let trace = fs.trace();
    let redo_a = |r: &ReleaseRepository<NoSync>| publish(r, &a).unwrap();
    check(
        &initial,
        &trace,
        Scenario {
            name: "first publication",
            protocol: PUBLICATION,
            before: none.clone(),
            after: member(&[&a]),
            retry: &redo_a,
        },
    );

    // 3. A second publication.
    let initial = snapshot(&base);
    fs.clear_trace();
    publish(&repo, &b).unwrap();
    let trace = fs.trace();
    let redo_b = |r: &ReleaseRepository<NoSync>| publish(r, &b).unwrap();
    check(
        &initial,
        &trace,
        Scenario {
            name: "second publication",
            protocol: PUBLICATION,
            before: member(&[&a]),
            after: member(&[&a, &b]),
            retry: &redo_b,
        },
    );

    // 4. An identical retry of the second publication (a verified no-op).
    let initial = snapshot(&base);
    fs.clear_trace();
    publish(&repo, &b).unwrap();
    let trace = fs.trace();
    assert!(
        !trace.iter().any(|r| matches!(
            r.op,
            Op::WriteNew(..) | Op::Rename(..) | Op::CreateDir(_) | Op::RemoveDirAll(_)
        )),
        "an identical retry changed the disk"
    );
    check(
        &initial,
        &trace,
        Scenario {
            name: "identical retry",
            protocol: PUBLICATION,
            before: member(&[&a, &b]),
            after: member(&[&a, &b]),
            retry: &|_| {},
        },
    );

    // 5. Lifecycle commits: revoke the first release, retire the second.
    let initial = snapshot(&base);
    fs.clear_trace();
    repo.revoke(&a.digest).unwrap();
    let trace = fs.trace();
    let revoked = BTreeMap::from([
        (a.digest, Membership::Revoked),
        (b.digest, Membership::Member),
    ]);
    let redo_revoke = |r: &ReleaseRepository<NoSync>| {
        r.revoke(&a.digest).unwrap();
    };
    check(
        &initial,
        &trace,
        Scenario {
            name: "revoke",
            protocol: LIFECYCLE,
            before: member(&[&a, &b]),
            after: revoked.clone(),
            retry: &redo_revoke,
        },
    );
    let initial = snapshot(&base);
    fs.clear_trace();
    repo.retire(&b.digest).unwrap();
    let trace = fs.trace();
    let settled = BTreeMap::from([
        (a.digest, Membership::Revoked),
        (b.digest, Membership::Retired),
    ]);
    let redo_retire = |r: &ReleaseRepository<NoSync>| {
        r.retire(&b.digest).unwrap();
    };
    check(
        &initial,
        &trace,
        Scenario {
            name: "retire",
            protocol: LIFECYCLE,
            before: revoked,
            after: settled.clone(),
            retry: &redo_retire,
        },
    );
    drop(repo);

    // 6. Recovery: debris under .tmp (a complete abandoned stage, a partial
    // one, a stray lifecycle temp) and a non-digest directory under
    // releases/; the open that clears them is traced.
    let stage = root.join(STAGING_DIR);
    let full = stage.join("0000000000000000-7");
    std::fs::create_dir(&full).unwrap();
    let a_dir = root.join(RELEASES_DIR).join(a.digest.hex());
    for e in std::fs::read_dir(&a_dir).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), full.join(e.file_name())).unwrap();
    }
    std::fs::create_dir(stage.join("0000000000000000-8")).unwrap();
    std::fs::write(
        stage.join("0000000000000000-8").join("metadata.json"),
        b"{\"desc",
    )
    .unwrap();
    std::fs::write(stage.join("lifecycle-dead-0"), b"{").unwrap();
    let junk = root.join(RELEASES_DIR).join("incomplete-upload");
    std::fs::create_dir(&junk).unwrap();
    std::fs::write(junk.join("component.wasm"), b"\0asm").unwrap();
    let initial = snapshot(&base);
    fs.clear_trace();
    let repo = open(fs.clone(), &root).unwrap();
    let trace = fs.trace();
    assert_eq!(
        std::fs::read_dir(&stage).unwrap().count(),
        0,
        ".tmp not cleared"
    );
    assert_eq!(
        repo.usage().recovery_directories,
        3,
        "two releases and one debris directory"
    );
    check(
        &initial,
        &trace,
        Scenario {
            name: "recovery with debris",
            protocol: OPEN,
            before: settled.clone(),
            after: settled.clone(),
            retry: &|_| {},
        },
    );

    // 7. A publication beside the retained debris.
    let initial = snapshot(&base);
    fs.clear_trace();
    publish(&repo, &c).unwrap();
    let trace = fs.trace();
    let mut with_c = settled.clone();
    with_c.insert(c.digest, Membership::Member);
    let redo_c = |r: &ReleaseRepository<NoSync>| publish(r, &c).unwrap();
    check(
        &initial,
        &trace,
        Scenario {
            name: "publication beside debris",
            protocol: PUBLICATION,
            before: settled,
            after: with_c.clone(),
            retry: &redo_c,
        },
    );

    // 8. The exact retry of a publication that failed past its rename (its
    // lifecycle rename failed): the pending release is reconciled.
    let commit = trace
        .iter()
        .position(|r| matches!(&r.op, Op::Rename(_, to) if is_lifecycle(to)))
        .expect("a publication renames lifecycle state");
    fs.clear_trace();
    fs.fail_at(commit);
    let failed = publish(&repo, &d).unwrap_err();
    assert!(failed.step().is_some_and(|s| s.past_rename()), "{failed}");
    assert_eq!(repo.pending(), Some(d.digest));
    let initial = snapshot(&base);
    fs.clear_trace();
    publish(&repo, &d).unwrap();
    assert_eq!(repo.pending(), None);
    let trace = fs.trace();
    let mut with_d = with_c.clone();
    with_d.insert(d.digest, Membership::Member);
    let redo_d = |r: &ReleaseRepository<NoSync>| publish(r, &d).unwrap();
    check(
        &initial,
        &trace,
        Scenario {
            name: "pending retry (reconcile)",
            protocol: PUBLICATION,
            before: with_c,
            after: with_d.clone(),
            retry: &redo_d,
        },
    );

    // 9. Deep only: a lifecycle history over more releases — each extra
    // release published (not enumerated), then the first half revoked
    // (member → revoked), the second half retired (member → retired) and
    // then revoked (retired → revoked), each change traced from the disk
    // the previous one left. (Retiring a revoked release changes nothing:
    // a revocation is never weakened, so that step is not a change.)
    let mut now = with_d;
    for x in &extras {
        publish(&repo, x).unwrap();
        now.insert(x.digest, Membership::Member);
    }
    let (first, second) = extras.split_at(extras.len() / 2);
    let steps = [
        ("revoke", Membership::Revoked, first),
        ("retire", Membership::Retired, second),
        ("revoke", Membership::Revoked, second),
    ];
    let mut history_traces = 0;
    for (op, to, releases) in steps {
        for x in releases {
            let before = now.clone();
            let initial = snapshot(&base);
            fs.clear_trace();
            let digest = x.digest;
            let change = move |r: &ReleaseRepository<NoSync>| {
                if op == "revoke" {
                    r.revoke(&digest).unwrap();
                } else {
                    r.retire(&digest).unwrap();
                }
            };
            if op == "revoke" {
                repo.revoke(&digest).unwrap();
            } else {
                repo.retire(&digest).unwrap();
            }
            let trace = fs.trace();
            now.insert(digest, to);
            assert_eq!(repo.membership(&digest), Some(to), "{op} {digest}");
            let name = format!("{HISTORY}: {op} {digest}");
            history_traces += 1;
            check(
                &initial,
                &trace,
                Scenario {
                    name: &name,
                    protocol: LIFECYCLE,
                    before,
                    after: now.clone(),
                    retry: &change,
                },
            );
        }
    }
    drop(repo);
    eprintln!(
        "release crash states: {total} enumerated over {} traces",
        9 + history_traces
    );
    for (protocol, distinct) in &protocols {
        println!(
            "crash states {protocol}: {} distinct ({} torn), all recovered",
            distinct.len(),
            distinct.torn()
        );
    }
    let publication = protocols.get(PUBLICATION).unwrap();
    assert!(publication.torn() > 0, "no torn publication state");
    if options.is_deep() {
        assert!(
            publication.len() >= 10_000,
            "deep: {} distinct publication states",
            publication.len()
        );
    }
}

/// The crash model's rule the lifecycle commit relies on: a file written
/// and fsynced in a directory that is never synced, then renamed into a
/// directory that is synced, is present once that sync returns.
#[test]
fn a_file_renamed_into_a_synced_directory_is_never_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let (src, dst) = (base.join("stage"), base.join("root"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&dst).unwrap();
    let initial = snapshot(&base);
    let fs = RecordingFs::new(RealFs);
    fs.write_new(&src.join("f"), b"state").unwrap();
    fs.sync_file(&src.join("f")).unwrap();
    fs.rename(&src.join("f"), &dst.join("f")).unwrap();
    fs.sync_dir(&dst).unwrap();
    let trace = fs.trace();
    let states = crash_states(&initial, &trace);
    let mut absent = 0;
    for (k, image) in &states {
        let got = image.get(&dst.join("f"));
        if *k == trace.len() {
            assert_eq!(
                got,
                Some(&Node::File(b"state".to_vec())),
                "lost after the sync"
            );
        } else if got.is_none() {
            absent += 1;
        }
    }
    assert!(absent > 0, "no crash state before the sync lacks the file");
}
