//! Multi-process crash test of the release repository. The test binary
//! re-executes itself as a child (`CUSTOS_RELEASE_KILL_ROOT=<dir>`) that
//! opens the catalog with production syncs and publishes distinct releases
//! in a loop, printing `ACK <digest>` after each acknowledged publication;
//! between publications it revokes or retires one of its earlier releases
//! (`TRY REVOKE|RETIRE <digest>` before, `ACK …` after). The parent
//! SIGKILLs it 0-40 ms after it has opened and acknowledged 0-3
//! publications (the count cycles; the delay is xorshift seeded from the
//! clock, printed; `CUSTOS_SIGKILL_SEED` replays a run;
//! `CUSTOS_TORTURE_ITERATIONS` sets the count), reopens with the same
//! bounds and checks: the open never fails; every acknowledged release has
//! its acknowledged membership (a change cut off mid-way is old or new);
//! a member resolves and fetches byte-identically, a revoked or retired
//! one is refused by both; and nothing but the children's own releases is
//! visible (at most one unacknowledged release per kill — the one whose
//! acknowledgment was cut off). After each kill the releases the dead
//! child acknowledged and a sample of older ones are fetched; a last sweep
//! fetches every one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use custos_core::release::bounds::Bounds;
use custos_core::release::contract::{Contract, MagicOnly, ValType};
use custos_core::release::lifecycle::Membership;
use custos_core::release::Sha256;
use custos_fs::release::ReleaseRepository;
use custos_fs::RealFs;

mod support;
use custos_torture::{self as torture, xorshift, Out, Replay};
use support::{contract_of, param};

const ROOT_ENV: &str = "CUSTOS_RELEASE_KILL_ROOT";
const TAG_ENV: &str = "CUSTOS_RELEASE_KILL_TAG";
/// The default count, so that `cargo test` stays fast; `make torture` sets more.
const DEFAULT_ITERATIONS: u64 = 24;
/// Older releases fetched again after each kill (all of them at the end).
const SAMPLE: usize = 16;

/// The bounds both the child and the parent open with (room for the
/// releases of a thousand kills; the default index bound holds about 7,700
/// of these).
fn bounds() -> Bounds {
    Bounds {
        max_entries: 100_000,
        max_index_bytes: 1 << 30,
        ..Bounds::default()
    }
}

/// The inputs of release `n` of child `tag`: manifest, component, contract.
fn release(tag: u64, n: u64) -> (Vec<u8>, Vec<u8>, Contract) {
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    component.extend_from_slice(format!("child {tag} release {n} ").as_bytes());
    component.extend(std::iter::repeat_n(u8::try_from(n % 251).unwrap(), 512));
    let digest = Sha256::of(&component);
    let manifest = format!(
        r#"{{"name":"k{tag}-r{n}","version":"0.{tag}.{n}","tenant":"crash","service":"child-{tag}","component_digest":"{digest}","exports":["api:kill/run"]}}"#
    )
    .into_bytes();
    let contract = contract_of(
        "api:kill/run",
        vec![param("n", ValType::U64)],
        vec![ValType::String],
    );
    (manifest, component, contract)
}

fn open(root: &Path) -> ReleaseRepository<RealFs> {
    ReleaseRepository::open(RealFs, root, bounds(), Arc::new(MagicOnly))
        .unwrap_or_else(|e| panic!("open {}: {e}", root.display()))
}

/// Child mode: a no-op unless `CUSTOS_RELEASE_KILL_ROOT` names a root.
#[test]
fn release_sigkill_child() {
    let Ok(root) = std::env::var(ROOT_ENV) else {
        return;
    };
    let tag: u64 = std::env::var(TAG_ENV).unwrap().parse().unwrap();
    let repo = open(Path::new(&root));
    let mut out = Out::stdout();
    out.line(&format!("OPEN {}", repo.len()));
    let digest = |n: u64| Sha256::of(&release(tag, n).1);
    for n in 0u64.. {
        let (manifest, component, contract) = release(tag, n);
        let p = repo.publish(&manifest, component, contract).unwrap();
        out.line(&format!("ACK {}", p.digest));
        // Lifecycle commits between publications: revoke the previous
        // release every third one, retire the one before every fifth.
        let mut change = |op: &str, d: Sha256| {
            out.line(&format!("TRY {op} {d}"));
            match op {
                "REVOKE" => repo.revoke(&d).unwrap(),
                _ => repo.retire(&d).unwrap(),
            };
            out.line(&format!("ACK {op} {d}"));
        };
        if n % 3 == 2 {
            change("REVOKE", digest(n - 1));
        }
        if n % 5 == 4 {
            change("RETIRE", digest(n - 2));
        }
    }
}

/// How long the parent waits for the child's next line before killing it
/// anyway (a child that stalls this long is killed where it stands).
const LINE_WAIT: Duration = Duration::from_secs(30);

/// Runs child `tag` until it has opened the catalog and printed `acks`
/// publication acknowledgments, then for `delay` more, and SIGKILLs it;
/// returns its output lines. Killing relative to the child's own progress
/// (not after a fixed time from its start) keeps the kills landing inside
/// publications however long the open takes as the catalog grows.
fn run_child(root: &Path, tag: u64, acks: u64, delay: Duration) -> Vec<String> {
    let mut cmd = torture::child("release_sigkill_child");
    cmd.env(ROOT_ENV, root).env(TAG_ENV, tag.to_string());
    let mut run = torture::Running::spawn(cmd);
    let (mut opened, mut seen) = (false, 0u64);
    run.wait_until(LINE_WAIT, |line| {
        // libtest prints `test … ... ` before the child's first line.
        opened |= line.contains("OPEN ");
        if line.starts_with("ACK ") && line.split(' ').count() == 2 {
            seen += 1;
        }
        opened && seen >= acks
    });
    run.kill_after(delay).lines
}

/// Every acknowledged release of `acked` is present after the kill with
/// the membership `expected` records: a member resolves and fetches its
/// exact bytes, a revoked or retired one is refused `FailedPrecondition`.
/// Answers how many were not (lost), each reported.
fn check_acknowledged<'a>(
    repo: &ReleaseRepository<RealFs>,
    tag: u64,
    acked: impl Iterator<Item = &'a (u64, u64, Sha256)>,
    expected: &BTreeMap<Sha256, Membership>,
) -> u64 {
    let mut lost = 0;
    for (t, n, d) in acked {
        let (manifest, component, contract) = release(*t, *n);
        let reference = format!("k{t}-r{n}@0.{t}.{n}");
        let want = expected.get(d).copied().unwrap();
        let got = repo.membership(d);
        if got != Some(want) {
            eprintln!("iteration {tag}: {d} ({reference}) is {got:?}, acknowledged {want:?}");
            lost += 1;
            continue;
        }
        if want != Membership::Member {
            assert_eq!(
                repo.fetch(d).map(|_| ()).map_err(|e| e.class()),
                Err(custos_core::Class::FailedPrecondition)
            );
            assert_eq!(
                repo.resolve(Some("crash"), &reference)
                    .map(|_| ())
                    .map_err(|e| e.class()),
                Err(custos_core::Class::FailedPrecondition)
            );
            continue;
        }
        let (resolved, fetched) = (repo.resolve(Some("crash"), &reference), repo.fetch(d));
        let (Ok(resolved), Ok(got)) = (resolved, fetched) else {
            eprintln!("iteration {tag}: {reference} does not resolve and fetch");
            lost += 1;
            continue;
        };
        assert_eq!(resolved.component_digest, *d);
        assert_eq!(got.component, component, "iteration {tag}: {d} component");
        assert_eq!(got.contract, contract, "iteration {tag}: {d} contract");
        let canonical =
            custos_core::release::manifest::Manifest::parse(&manifest, 1 << 20).unwrap();
        assert_eq!(got.manifest, canonical, "iteration {tag}: {d} manifest");
    }
    lost
}

/// Everything visible after kill `tag` is some child's release, listed in
/// its child's scope, and at most one per kill was not acknowledged (of
/// `acked`): the number of unacknowledged releases visible.
fn check_visible(repo: &ReleaseRepository<RealFs>, tag: u64, acked: usize) -> usize {
    // Everything visible is some child's release; at most one per kill
    // was not acknowledged.
    let visible = repo.len();
    assert!(
        visible >= acked,
        "iteration {tag}: fewer releases than acks"
    );
    let extra = visible - acked;
    assert!(
        extra as u64 <= tag + 1,
        "iteration {tag}: {extra} unacknowledged releases visible after {} kills",
        tag + 1
    );
    // The tenant's listing, page by page: every entry is its child's
    // release (the service names the child, the version the release).
    let mut listed = 0;
    let mut token: Option<String> = None;
    loop {
        let page = repo
            .list_catalog_entries("crash", None, token.as_deref())
            .unwrap();
        for e in &page.entries {
            let d = &e.descriptor;
            let t: u64 = d
                .service
                .as_deref()
                .unwrap()
                .strip_prefix("child-")
                .unwrap()
                .parse()
                .unwrap();
            let n: u64 = d.version.rsplit('.').next().unwrap().parse().unwrap();
            assert!(t <= tag, "iteration {tag}: a release of child {t}");
            let (_, component, _) = release(t, n);
            assert_eq!(Sha256::of(&component), d.component_digest);
        }
        listed += page.entries.len();
        match page.next_page_token {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    assert_eq!(
        listed, visible,
        "iteration {tag}: a release outside the children's scopes"
    );
    extra
}

/// Folds one child's lines into the acknowledged releases and their
/// memberships (`changes`: revocations and retirements acknowledged);
/// answers how many it published and the lifecycle change cut off.
fn fold(
    lines: &[String],
    tag: u64,
    acked: &mut Vec<(u64, u64, Sha256)>,
    expected: &mut BTreeMap<Sha256, Membership>,
    changes: &mut (u64, u64),
) -> (u64, Option<(Sha256, Membership)>) {
    let mut n = 0u64;
    // A lifecycle change begun and not acknowledged: either outcome.
    let mut pending: Option<(Sha256, Membership)> = None;
    for line in lines {
        let mut words = line.split(' ');
        // A torn last line does not parse: not acknowledged.
        match (
            words.next(),
            words.next(),
            words.next().and_then(Sha256::parse),
        ) {
            (Some("ACK"), Some(d), None) => {
                let Some(d) = Sha256::parse(d) else { continue };
                let (_, component, _) = release(tag, n);
                assert_eq!(
                    Sha256::of(&component),
                    d,
                    "child {tag}: ack {n} names another digest"
                );
                acked.push((tag, n, d));
                expected.insert(d, Membership::Member);
                n += 1;
            }
            (Some("TRY"), Some(op), Some(d)) => {
                let now = expected.get(&d).copied().unwrap();
                let after = match (op, now) {
                    ("REVOKE", _) | (_, Membership::Revoked) => Membership::Revoked,
                    _ => Membership::Retired,
                };
                pending = Some((d, after));
            }
            (Some("ACK"), Some(op), Some(d)) => {
                let (p, after) = pending.take().unwrap();
                assert_eq!(p, d);
                expected.insert(d, after);
                if op == "REVOKE" {
                    changes.0 += 1;
                } else {
                    changes.1 += 1;
                }
            }
            _ => {}
        }
    }
    (n, pending)
}

#[test]
fn sigkilled_publisher_loses_no_acknowledged_release() {
    if std::env::var(ROOT_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("catalog");
    let seed = torture::seed("release", None);
    let iterations = torture::iterations(DEFAULT_ITERATIONS);
    let mut rng = seed;
    let started = Instant::now();
    let mut acked: Vec<(u64, u64, Sha256)> = Vec::new();
    // The membership each acknowledged release must have.
    let mut expected: BTreeMap<Sha256, Membership> = BTreeMap::new();
    let (mut changes, mut in_doubt) = ((0, 0), 0);
    let mut killed_with_acks = 0;
    let mut unacknowledged_visible = 0;
    let (mut lost, mut checked) = (0u64, 0u64);
    for tag in 0..iterations {
        let _replay = Replay {
            store: "release",
            seed,
            iteration: tag,
        };
        // Kill after 0-3 acknowledged publications, 0-40 ms into the next
        // operation: mostly inside a publication or a lifecycle change.
        // (The count cycles, so three kills in four follow an ack.)
        let acks = tag % 4;
        let delay = Duration::from_millis(xorshift(&mut rng) % 41);
        let lines = run_child(&root, tag, acks, delay);
        let (n, pending) = fold(&lines, tag, &mut acked, &mut expected, &mut changes);
        if n > 0 {
            killed_with_acks += 1;
        }
        checked += lines.iter().filter(|l| l.starts_with("ACK ")).count() as u64;
        let repo = open(&root);
        let pending_digest = pending.map(|p| p.0);
        if let Some((d, after)) = pending {
            // Killed mid-change: old or new, and from now on what it is.
            let seen = repo.membership(&d).unwrap();
            assert!(
                seen == after || Some(&seen) == expected.get(&d),
                "iteration {tag}: {d} is {seen:?}"
            );
            expected.insert(d, seen);
            in_doubt += 1;
        }
        // This child's releases (and the change cut off), and a sample.
        let mine = acked
            .iter()
            .filter(|a| a.0 == tag || pending_digest == Some(a.2));
        let sample: Vec<_> = (0..SAMPLE.min(acked.len()))
            .map(|_| &acked[(xorshift(&mut rng) % acked.len() as u64) as usize])
            .collect();
        lost += check_acknowledged(&repo, tag, mine.chain(sample), &expected);
        let extra = check_visible(&repo, tag, acked.len());
        assert!(repo.pending().is_none());
        unacknowledged_visible = extra;
        drop(repo);
    }
    // A last sweep over every acknowledged release.
    let repo = open(&root);
    lost += check_acknowledged(&repo, iterations, acked.iter(), &expected);
    drop(repo);
    println!(
        "torture release: {iterations} SIGKILLs, {checked} acknowledged operations checked, \
         {lost} lost; {killed_with_acks} kills landed after at least one ack; {} publications, \
         {} revocations and {} retirements acknowledged; {in_doubt} lifecycle \
         changes cut off mid-way; {unacknowledged_visible} published but unacknowledged; seed \
         {seed}; {:.1}s",
        acked.len(),
        changes.0,
        changes.1,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(lost, 0, "acknowledged operations lost (seed {seed})");
    assert!(
        killed_with_acks >= iterations / 2,
        "the child rarely got to publish"
    );
}
