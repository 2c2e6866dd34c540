//! Artifact relocation against a raw copy loop measured in the same run
//! (prints; no assertion): 1,000 distinct 64 KiB objects ingested into a
//! source `ArtifactStore`, then
//!
//! - **relocate**: `custos_core::migration::artifacts::relocate` into a
//!   fresh destination store on `RealFs` — every object probed, read and
//!   verified (SHA-256, XXH3-64, size) at the source, its destination
//!   address inspected, read again, staged + fsynced + renamed + the
//!   fan-out directory fsynced, then read back and verified in full;
//! - **raw**: the same bytes copied file by file (read the source file,
//!   write a temp file, fsync, rename into one directory, fsync the
//!   directory), no hashing, no verification.
//!
//! Goal: raw / relocate ≥ 0.5. `CUSTOS_BENCH_DIR` sets the directory
//! (default: cargo's target tmp dir); `CUSTOS_BENCH_OBJECTS` the count.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use custos_core::migration::artifacts::{relocate, OccurrenceMeta};
use custos_core::migration::Name;
use custos_fs::artifacts::ArtifactStore;
use custos_fs::RealFs;

const OBJECT: usize = 64 << 10;

fn object(i: u64) -> Vec<u8> {
    let mut state = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..OBJECT)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn meta(i: u64) -> OccurrenceMeta {
    OccurrenceMeta {
        artifact_id: Name::new(format!("a{i:05}")).unwrap(),
        ingested_at: i as i64,
        source_uri: format!("file:///bench/{i}"),
        logical_path: format!("bench/{i}.bin"),
        world: Name::new("bench").unwrap(),
        run: None,
        tick: Some(i),
        media_type: "application/octet-stream".into(),
    }
}

/// The raw baseline: each source file read and durably copied into `dir`.
fn raw_copy(sources: &[std::path::PathBuf], dir: &Path) -> Duration {
    std::fs::create_dir_all(dir).unwrap();
    File::open(dir.parent().unwrap())
        .unwrap()
        .sync_all()
        .unwrap();
    let t = Instant::now();
    for (i, src) in sources.iter().enumerate() {
        let bytes = std::fs::read(src).unwrap();
        let tmp = dir.join(format!(".tmp{i}"));
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .unwrap();
        f.write_all(&bytes).unwrap();
        f.sync_all().unwrap();
        drop(f);
        std::fs::rename(&tmp, dir.join(format!("{i}"))).unwrap();
        File::open(dir).unwrap().sync_all().unwrap();
    }
    t.elapsed()
}

fn main() {
    let n: u64 = std::env::var("CUSTOS_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let base = std::env::var("CUSTOS_BENCH_DIR")
        .unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_owned());
    std::fs::create_dir_all(&base).unwrap();
    let dir = tempfile::tempdir_in(&base).unwrap();
    println!(
        "relocate bench: {n} distinct objects of {OBJECT} bytes ({:.1} MiB), in {}",
        (n as f64 * OBJECT as f64) / f64::from(1 << 20),
        dir.path().display()
    );
    let src_path = dir.path().join("src");
    let src = ArtifactStore::open(RealFs, &src_path).unwrap();
    let rows: Vec<_> = (0..n)
        .map(|i| src.ingest(&object(i), meta(i)).unwrap())
        .collect();
    let files: Vec<_> = rows
        .iter()
        .map(|r| src.path_of(&r.object_uri).unwrap())
        .collect();
    drop(src);
    let src = ArtifactStore::open_read_only(RealFs, &src_path).unwrap();

    // Alternate so neither side gets a warmer cache: raw, relocate, raw.
    let raw1 = raw_copy(&files, &dir.path().join("raw1"));
    let dst = ArtifactStore::open(RealFs, &dir.path().join("dst")).unwrap();
    let t = Instant::now();
    let r = relocate(&rows, &src, src.root_uri(), &dst, dst.root_uri()).unwrap();
    let ours = t.elapsed();
    let raw2 = raw_copy(&files, &dir.path().join("raw2"));
    let raw = (raw1 + raw2) / 2;
    assert_eq!(r.copied, n);

    let t = Instant::now();
    let again = relocate(&rows, &src, src.root_uri(), &dst, dst.root_uri()).unwrap();
    let reuse = t.elapsed();
    assert_eq!((again.copied, again.reused), (0, n));

    let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    println!(
        "raw copy (read + write + fsync + rename + dir fsync): {:.3} s ({:.1} us/object; runs {:.3} s, {:.3} s)",
        raw.as_secs_f64(),
        per(raw),
        raw1.as_secs_f64(),
        raw2.as_secs_f64()
    );
    println!(
        "relocate (verify source, inspect destination, copy once, read back + verify): {:.3} s ({:.1} us/object; {} copied, {} MiB verified)",
        ours.as_secs_f64(),
        per(ours),
        r.copied,
        r.verified_bytes >> 20
    );
    println!(
        "ratio raw/relocate: {:.2} (goal >= 0.5)",
        raw.as_secs_f64() / ours.as_secs_f64()
    );
    println!(
        "second relocate (everything verified and reused, nothing written): {:.3} s ({:.1} us/object)",
        reuse.as_secs_f64(),
        per(reuse)
    );
}
