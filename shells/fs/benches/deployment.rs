//! The deployment repository against physical baselines measured in the
//! same run (prints; no assertion):
//!
//! - **resolve** through `DeploymentRepository::resolve` (try_read, route
//!   index, selection hash, owned result) against a `HashMap` lookup of the
//!   same key that clones out the same owned result — goal ≤ 3×;
//! - **apply** at 1,000 and 10,000 deployments: one single apply's wall
//!   time, fsyncs and bytes written (counted from a recording-filesystem
//!   trace), against a raw write + fsync + rename + dir-fsync of a file of
//!   the same size;
//! - **batch**: one batch apply of 1,000 deployments against 1,000 single
//!   applies into the same catalog size.
//!
//! `CUSTOS_BENCH_DIR` sets the directory (default: a temp dir).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use custos_core::deployment::manifest::DeploymentManifest;
use custos_core::deployment::route::{ReleaseFacts, ReleaseSource, ResolvedRevision, Target};
use custos_core::deployment::state::{Mutation, Request};
use custos_core::release::Sha256;
use custos_fs::deployment::DeploymentRepository;
use custos_fs::{Access, Op, RealFs, RecordingFs};

#[path = "../tests/support/mod.rs"]
mod support;
use support::contract_of;

fn contract(_: &Sha256) -> Result<Option<ReleaseFacts>, String> {
    Ok(Some(ReleaseFacts::eligible(
        "bench",
        contract_of("api", vec![], vec![]),
    )))
}

fn manifest(i: usize) -> DeploymentManifest {
    DeploymentManifest::decode(
        format!(
            r#"{{"id":"d{i:05}","tenant":"bench","service":"s{}","release":"{}","route_weight":{}}}"#,
            i % 16,
            Sha256::of(&(i % 8).to_le_bytes()),
            1 + i % 7
        )
        .as_bytes(),
    )
    .unwrap()
}

fn batch(range: std::ops::Range<usize>) -> Request {
    Request {
        tenant: Some("bench".into()),
        mutation: Mutation::ApplyMany {
            manifests: range.map(manifest).collect(),
        },
        compiled_at: 0,
        operation: None,
    }
}

fn single(i: usize) -> Request {
    Request {
        tenant: Some("bench".into()),
        mutation: Mutation::Apply {
            manifest: Box::new(manifest(i)),
            expected: None,
        },
        compiled_at: 0,
        operation: None,
    }
}

fn source() -> Arc<dyn ReleaseSource + Send + Sync> {
    Arc::new(contract)
}

/// The raw durable replacement of a file of `len` bytes: write, fsync,
/// rename, fsync the directory. Seconds per replacement.
fn raw_replace(dir: &Path, len: usize, n: usize) -> f64 {
    let data = vec![b'x'; len];
    let t = Instant::now();
    for _ in 0..n {
        let tmp = dir.join("raw.pending");
        let mut f = File::create(&tmp).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        std::fs::rename(&tmp, dir.join("raw.json")).unwrap();
        File::open(dir).unwrap().sync_all().unwrap();
    }
    t.elapsed().as_secs_f64() / n as f64
}

fn resolve_ratio(dir: &Path) {
    let repo =
        DeploymentRepository::open(RealFs, &dir.join("resolve"), source(), Access::Write).unwrap();
    repo.mutate(batch(0..1000)).unwrap();
    let targets: Vec<Target> = (0..1000)
        .map(|i| Target {
            tenant: "bench".into(),
            service: format!("s{}", i % 16),
            route: None,
            contract: "api".into(),
            function: "run".into(),
        })
        .collect();
    // The baseline: a HashMap from the same key (tenant, service, routing
    // key) to the same owned result, cloned out — what a precomputed
    // lookup table would return, without validation or selection.
    let map: HashMap<(String, String, String), ResolvedRevision> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let key = format!("d{i:05}");
            let r = repo.resolve(t, Some(&key)).unwrap();
            ((t.tenant.clone(), t.service.clone(), key), r)
        })
        .collect();
    let keys: Vec<_> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| (t.tenant.clone(), t.service.clone(), format!("d{i:05}")))
        .collect();
    let rounds = 200;
    let t = Instant::now();
    let mut n = 0usize;
    for _ in 0..rounds {
        for (i, target) in targets.iter().enumerate() {
            let r = repo.resolve(target, Some(&keys[i].2)).unwrap();
            n += r.deployment_id.len();
        }
    }
    let ours = t.elapsed().as_secs_f64() / (rounds * targets.len()) as f64;
    let t = Instant::now();
    for _ in 0..rounds {
        for k in &keys {
            let v = map.get(k).cloned().unwrap();
            n += v.deployment_id.len();
        }
    }
    let base = t.elapsed().as_secs_f64() / (rounds * keys.len()) as f64;
    println!(
        "resolve: {:.0} ns, HashMap lookup + clone of the same owned result: {:.0} ns, ratio {:.1}x (checksum {n})",
        ours * 1e9,
        base * 1e9,
        ours / base
    );
}

fn apply_cost(dir: &Path, size: usize) {
    let fs = RecordingFs::new(RealFs);
    let repo = DeploymentRepository::open(
        fs.clone(),
        &dir.join(format!("apply{size}")),
        source(),
        Access::Write,
    )
    .unwrap();
    repo.mutate(batch(0..size)).unwrap();
    fs.clear_trace();
    let n = 5;
    let t = Instant::now();
    for i in 0..n {
        repo.mutate(single(i)).unwrap();
    }
    let ours = t.elapsed().as_secs_f64() / n as f64;
    let trace = fs.trace();
    let fsyncs = trace
        .iter()
        .filter(|r| matches!(r.op, Op::SyncFile { .. } | Op::SyncDir { .. }))
        .count()
        / n;
    let bytes: usize = trace
        .iter()
        .map(|r| match &r.op {
            Op::WriteNew(_, data) => data.len(),
            _ => 0,
        })
        .sum::<usize>()
        / n;
    let raw = raw_replace(&dir.join(format!("apply{size}")), bytes, n);
    println!(
        "apply at {size} deployments: {:.1} ms, {fsyncs} fsyncs, {bytes} bytes written; raw replace of {bytes} bytes {:.1} ms; ratio {:.1}x",
        ours * 1e3,
        raw * 1e3,
        ours / raw
    );
}

fn batch_vs_singles(dir: &Path) {
    let a =
        DeploymentRepository::open(RealFs, &dir.join("batch"), source(), Access::Write).unwrap();
    let t = Instant::now();
    a.mutate(batch(0..1000)).unwrap();
    let one = t.elapsed().as_secs_f64();
    let b =
        DeploymentRepository::open(RealFs, &dir.join("singles"), source(), Access::Write).unwrap();
    let t = Instant::now();
    for i in 0..1000 {
        b.mutate(single(i)).unwrap();
    }
    let many = t.elapsed().as_secs_f64();
    println!(
        "1,000 deployments: one batch {:.1} ms, 1,000 single applies {:.1} ms, ratio {:.0}x",
        one * 1e3,
        many * 1e3,
        many / one
    );
}

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let dir =
        std::env::var_os("CUSTOS_BENCH_DIR").map_or_else(|| tmp.path().to_path_buf(), Into::into);
    resolve_ratio(&dir);
    apply_cost(&dir, 1000);
    apply_cost(&dir, 10_000);
    batch_vs_singles(&dir);
}
