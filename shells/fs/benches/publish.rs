//! Publications per second through `ReleaseRepository::publish` on the real
//! filesystem, and the ratio to the disk's own limit measured in the same
//! run, in the same directory: a raw loop of create + write + fsync +
//! rename + directory fsync. The two loops alternate in blocks so the
//! shared, noisy disk hits both alike. It also prints how many fsyncs one
//! publication issues (counted from a recording-filesystem trace) against
//! the baseline's per-iteration count. No assertion: it prints.
//!
//! `CUSTOS_BENCH_PUBLICATIONS` sets the publications per loop (default
//! 2000); `CUSTOS_BENCH_DIR` the directory (default: cargo's target tmp dir).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use custos_core::release::bounds::Bounds;
use custos_core::release::contract::{Contract, MagicOnly, ValType};
use custos_core::release::Sha256;
use custos_fs::release::ReleaseRepository;
use custos_fs::{Fs, Op, RealFs, RecordingFs};

#[path = "../tests/support/mod.rs"]
mod support;
use support::{contract_of, param};

/// Bytes of each synthetic component (and of the baseline's file).
const COMPONENT: usize = 4096;
const BLOCK: u64 = 25;

fn contract() -> Contract {
    contract_of(
        "api:bench/run",
        vec![param("n", ValType::U64)],
        vec![ValType::String],
    )
}

/// Release `n`: manifest, component.
fn release(n: u64) -> (Vec<u8>, Vec<u8>) {
    let mut c = b"\0asm\x0d\0\x01\0".to_vec();
    c.extend_from_slice(&n.to_le_bytes());
    c.resize(COMPONENT, 0x5a);
    let d = Sha256::of(&c);
    let m = format!(
        r#"{{"name":"bench-{n}","version":"1.0.0","tenant":"bench","service":"s{}","component_digest":"{d}","exports":["api:bench/run"]}}"#,
        n % 8
    );
    (m.into_bytes(), c)
}

/// The baseline: the disk's cost of one durable file publication.
struct Raw {
    dir: PathBuf,
    payload: Vec<u8>,
    next: u64,
}

impl Raw {
    fn new(dir: PathBuf) -> Self {
        std::fs::create_dir_all(&dir).unwrap();
        File::open(&dir).unwrap().sync_all().unwrap();
        Raw {
            dir,
            payload: vec![0x5a; COMPONENT],
            next: 0,
        }
    }

    fn publish(&mut self) {
        let n = self.next;
        self.next += 1;
        let temp = self.dir.join(format!("{n}.tmp"));
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .unwrap();
        f.write_all(&self.payload).unwrap();
        f.sync_all().unwrap();
        drop(f);
        std::fs::rename(&temp, self.dir.join(format!("{n}"))).unwrap();
        File::open(&self.dir).unwrap().sync_all().unwrap();
    }
}

/// Through the release repository.
struct Ours<F: Fs> {
    repo: ReleaseRepository<F>,
    contract: Contract,
    next: u64,
}

impl<F: Fs> Ours<F> {
    fn open(fs: F, root: &Path) -> Self {
        Ours {
            repo: ReleaseRepository::open(fs, root, Bounds::default(), Arc::new(MagicOnly))
                .unwrap(),
            contract: contract(),
            next: 0,
        }
    }

    fn publish(&mut self) {
        let (m, c) = release(self.next);
        self.next += 1;
        self.repo.publish(&m, c, self.contract.clone()).unwrap();
    }
}

/// fsyncs (file, directory) and other mutating operations of one traced
/// publication into a root that already holds `before` releases.
fn count_one(dir: &Path) {
    let fs = RecordingFs::new(RealFs);
    let mut ours = Ours::open(fs.clone(), &dir.join("traced"));
    ours.publish();
    fs.clear_trace();
    ours.publish();
    let trace = fs.trace();
    let count = |f: fn(&Op) -> bool| trace.iter().filter(|r| f(&r.op)).count();
    let files = count(|o| matches!(o, Op::SyncFile(_)));
    let dirs = count(|o| matches!(o, Op::SyncDir(_)));
    let writes = count(|o| matches!(o, Op::WriteNew(..)));
    let renames = count(|o| matches!(o, Op::Rename(..)));
    let reads = count(|o| matches!(o, Op::Read(_)));
    println!(
        "one publication: {} fsyncs ({files} file, {dirs} directory), {writes} file writes, \
         {renames} renames, {reads} file reads, {} operations in all",
        files + dirs,
        trace.len()
    );
    println!("one baseline iteration: 2 fsyncs (1 file, 1 directory), 1 file write, 1 rename");
}

fn main() {
    let n: u64 = std::env::var("CUSTOS_BENCH_PUBLICATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let base = std::env::var("CUSTOS_BENCH_DIR")
        .unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_owned());
    std::fs::create_dir_all(&base).unwrap();
    let dir = tempfile::tempdir_in(&base).unwrap();
    println!(
        "publish bench: {n} publications of a {COMPONENT}-byte component each, in {}",
        dir.path().display()
    );
    count_one(dir.path());
    let mut raw = Raw::new(dir.path().join("raw"));
    let mut ours = Ours::open(RealFs, &dir.path().join("catalog"));
    for _ in 0..BLOCK {
        raw.publish();
        ours.publish();
    }
    let (mut t_raw, mut t_ours) = (Duration::ZERO, Duration::ZERO);
    let mut block_ratios = Vec::new();
    for _ in 0..n / BLOCK {
        let t = Instant::now();
        for _ in 0..BLOCK {
            raw.publish();
        }
        let r = t.elapsed();
        let t = Instant::now();
        for _ in 0..BLOCK {
            ours.publish();
        }
        let o = t.elapsed();
        t_raw += r;
        t_ours += o;
        block_ratios.push(r.as_secs_f64() / o.as_secs_f64());
    }
    block_ratios.sort_by(f64::total_cmp);
    let median = block_ratios
        .get(block_ratios.len() / 2)
        .copied()
        .unwrap_or(f64::NAN);
    let done = (n / BLOCK * BLOCK) as f64;
    let raw_rate = done / t_raw.as_secs_f64();
    let ours_rate = done / t_ours.as_secs_f64();
    println!("baseline (create + write + fsync + rename + dir fsync): {raw_rate:.1} /s");
    println!(
        "ReleaseRepository::publish:                             {ours_rate:.1} publications/s"
    );
    println!(
        "ratio publish / baseline: {:.3} overall, {median:.3} median of {} interleaved blocks",
        ours_rate / raw_rate,
        block_ratios.len()
    );
    println!("catalog after the run: {} releases", ours.repo.len());
}
