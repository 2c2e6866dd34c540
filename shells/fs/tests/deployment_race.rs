//! Threads and writers over one shared deployment repository (real files,
//! real release catalog). Each round, several writers read the current
//! object version of one id and then — all at once, behind a barrier —
//! apply it with that version as the precondition: exactly one wins, the
//! others get `deployment-generation-conflict` naming the winner's
//! version, and the winner's receipt is exactly what `get` returns right
//! after. Meanwhile readers call `resolve` and walk `page`s without pause:
//! the only error they may meet is `Contended` (retried; an expired page
//! token restarts the walk, by design), and every answer is one complete
//! generation: resolved and paged generations never exceed the live one,
//! never go backwards for one reader, the hot id's object version equals
//! the catalog generation it was read at (only it is mutated), and pages
//! are ascending by id within and across one walk.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::Class;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use custos_core::deployment::page::PageRequest;
use custos_core::deployment::route::Target;
use custos_core::deployment::state::Receipt;
use custos_core::deployment::DeploymentError;
use custos_core::release::Sha256;
use custos_fs::deployment::{DeploymentRepoError, DeploymentRepository};
use custos_fs::{Access, RealFs};

mod support;
use support::{apply, releases};

const WRITERS: usize = 4;
const READERS: usize = 3;
const ROUNDS: u64 = 40;
/// Ids besides the hot one, so that a walk spans several pages.
const OTHERS: usize = 9;
const PAGE: u32 = 3;
const HOT: &str = "hot";

type Repo = DeploymentRepository<RealFs>;

fn target(route: Option<&str>) -> Target {
    Target {
        tenant: "acme".into(),
        service: "api".into(),
        route: route.map(Into::into),
        contract: "api".into(),
        function: "run".into(),
    }
}

/// One round: every writer reads the hot id's version, waits for the
/// others, applies with it; checks one winner and exact refusals and
/// receipt. Returns the winner.
fn round(repo: &Repo, digests: [Sha256; 2], n: u64) -> usize {
    let barrier = Barrier::new(WRITERS);
    let results: Vec<(u64, Result<Receipt, DeploymentRepoError>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..WRITERS)
            .map(|w| {
                let barrier = &barrier;
                s.spawn(move || {
                    let seen = repo.get("acme", HOT).unwrap().unwrap().generation;
                    barrier.wait();
                    let weight = 1 + u32::try_from(w).unwrap();
                    let req = apply(HOT, digests[w % 2], weight, Some(seen));
                    (seen, repo.mutate(req))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let seen = results[0].0;
    assert!(
        results.iter().all(|r| r.0 == seen),
        "round {n}: versions read differ"
    );
    let winners: Vec<usize> = (0..WRITERS).filter(|&w| results[w].1.is_ok()).collect();
    let [winner] = winners.as_slice() else {
        panic!("round {n}: {} winners: {results:?}", winners.len());
    };
    // Right after the round nobody else commits: the receipt is exact.
    let Ok(Receipt::Applied {
        deployments,
        catalog_generation,
    }) = &results[*winner].1
    else {
        panic!("round {n}: winner's receipt {:?}", results[*winner].1);
    };
    let [installed] = deployments.as_slice() else {
        panic!("round {n}: {deployments:?}");
    };
    assert_eq!(repo.get("acme", HOT).unwrap().as_ref(), Some(installed));
    assert_eq!(*catalog_generation, repo.generation().unwrap());
    assert_eq!(installed.generation, *catalog_generation);
    assert!(installed.generation > seen, "round {n}");
    assert_eq!(
        installed.manifest.route_weight,
        1 + u32::try_from(*winner).unwrap()
    );
    assert_eq!(installed.manifest.release, digests[winner % 2]);
    for (w, (_, r)) in results.iter().enumerate() {
        if w == *winner {
            continue;
        }
        let e = r.as_ref().unwrap_err();
        assert_eq!(
            e.reason(),
            "deployment-generation-conflict",
            "round {n}: {e}"
        );
        assert_eq!(e.class(), Class::StateConflict);
        let DeploymentRepoError::Rule(DeploymentError::GenerationConflict { id, expected, live }) =
            e
        else {
            panic!("round {n}: {e:?}");
        };
        assert_eq!((id.as_str(), *expected), (HOT, seen));
        assert_eq!(
            *live,
            Some(installed.generation),
            "round {n}: the live version named"
        );
    }
    *winner
}

#[derive(Debug, Default)]
struct ReaderStats {
    resolves: u64,
    contended: u64,
    walks: u64,
    pages: u64,
    restarts: u64,
    generations_seen: u64,
}

/// Resolves until one answer comes (`Contended` is retried).
fn resolve(repo: &Repo, route: Option<&str>, stats: &mut ReaderStats) -> (u64, String, u64) {
    loop {
        match repo.resolve(&target(route), Some("user-9")) {
            Ok(r) => {
                stats.resolves += 1;
                return (r.catalog_generation, r.deployment_id, r.generation);
            }
            Err(DeploymentRepoError::Contended) => stats.contended += 1,
            Err(e) => panic!("resolve: {e}"),
        }
    }
}

/// One complete walk of the tenant's pages (restarted on an expired
/// token); returns its generation.
fn walk(repo: &Repo, stats: &mut ReaderStats) -> u64 {
    'walk: loop {
        let mut token = None;
        let mut ids: Vec<String> = Vec::new();
        let mut generation = None;
        loop {
            let req = PageRequest {
                tenant: "acme".into(),
                service: None,
                page_size: PAGE,
                page_token: token.clone(),
            };
            let page = match repo.page(&req) {
                Ok(p) => p,
                Err(e) if token.is_some() && e.reason() == "expired-deployment-page-token" => {
                    stats.restarts += 1;
                    continue 'walk;
                }
                Err(e) => panic!("page: {e}"),
            };
            stats.pages += 1;
            let g = page.catalog_generation;
            assert!(g <= repo.generation().unwrap(), "a page from the future");
            assert_eq!(*generation.get_or_insert(g), g, "one walk, one generation");
            for d in &page.deployments {
                assert!(
                    ids.last().is_none_or(|l| *l < d.manifest.id),
                    "pages ascending"
                );
                assert!(d.generation <= g);
                if d.manifest.id == HOT {
                    assert_eq!(d.generation, g, "a torn generation in a page");
                }
                ids.push(d.manifest.id.clone());
            }
            assert!(page.deployments.len() <= PAGE as usize);
            token = page.next_page_token;
            if token.is_none() {
                assert_eq!(ids.len(), OTHERS + 1, "a walk lost or gained records");
                stats.walks += 1;
                return g;
            }
        }
    }
}

/// A reader's loop until `stop`.
fn reader(repo: &Repo, stop: &AtomicBool, k: usize) -> ReaderStats {
    let mut stats = ReaderStats::default();
    let mut last = 0u64;
    let mut monotone = |g: u64, stats: &mut ReaderStats, what: &str| {
        assert!(g >= last, "reader {k}: {what} went back from {last} to {g}");
        if g > last {
            stats.generations_seen += 1;
        }
        last = g;
        assert!(
            g <= repo.generation().unwrap(),
            "reader {k}: {what} from the future"
        );
    };
    while !stop.load(Ordering::Relaxed) {
        let (g, id, version) = resolve(repo, Some(HOT), &mut stats);
        assert_eq!(
            (id.as_str(), version),
            (HOT, g),
            "reader {k}: a torn generation"
        );
        monotone(g, &mut stats, "resolve");
        let (g, _, version) = resolve(repo, None, &mut stats);
        assert!(version <= g);
        monotone(g, &mut stats, "resolve");
        if k % 2 == 0 || stats.resolves % 8 == 0 {
            let g = walk(repo, &mut stats);
            monotone(g, &mut stats, "page walk");
        }
    }
    stats
}

#[test]
fn stale_writers_conflict_the_winner_is_exact_and_readers_see_whole_generations() {
    let tmp = tempfile::tempdir().unwrap();
    let (source, digests) = releases(tmp.path());
    let repo = Arc::new(
        DeploymentRepository::open(RealFs, &tmp.path().join("d"), source, Access::Write).unwrap(),
    );
    for i in 0..OTHERS {
        repo.mutate(apply(&format!("o{i}"), digests[i % 2], 1, Some(0)))
            .unwrap();
    }
    repo.mutate(apply(HOT, digests[0], 1, Some(0))).unwrap();
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..READERS)
        .map(|k| {
            let (repo, stop) = (Arc::clone(&repo), Arc::clone(&stop));
            std::thread::spawn(move || reader(&repo, &stop, k))
        })
        .collect();
    let mut wins = [0u64; WRITERS];
    for n in 0..ROUNDS {
        wins[round(&repo, digests, n)] += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let stats: Vec<ReaderStats> = readers.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(repo.generation().unwrap(), OTHERS as u64 + 1 + ROUNDS);
    let sum = |f: fn(&ReaderStats) -> u64| stats.iter().map(f).sum::<u64>();
    eprintln!(
        "deployment race: {ROUNDS} rounds x {WRITERS} writers: exactly one winner each (wins \
         {wins:?}), {} conflicts exact; {READERS} readers: {} resolves ({} contended retries), \
         {} page walks over {} pages ({} restarted on an expired token), {} generation steps \
         seen; {:.1}s",
        ROUNDS * (WRITERS as u64 - 1),
        sum(|s| s.resolves),
        sum(|s| s.contended),
        sum(|s| s.walks),
        sum(|s| s.pages),
        sum(|s| s.restarts),
        sum(|s| s.generations_seen),
        started.elapsed().as_secs_f64()
    );
    assert!(sum(|s| s.walks) > 0 && sum(|s| s.resolves) > 0);
}
