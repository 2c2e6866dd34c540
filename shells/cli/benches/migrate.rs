//! The whole migration of a ≥ 100 MB identity (tables and objects) by
//! `custos migrate run` — preflight, planning, copy, read-back, recheck,
//! staging, activation, cold verification in a child process, receipt —
//! against a raw recursive copy + fsync of the same source directory in the
//! same run. Prints the figures and where the migration's time goes (the
//! gaps between its step lines); asserts nothing about time.
//!
//! `cargo bench -p custos --bench migrate` (`CUSTOS_BENCH_MB` scales the
//! fixture; default 104).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/support/fixture.rs"]
#[allow(dead_code)]
mod fixture;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fixture::Size;

/// Copies `from` to `to` recursively, fsyncing every file and directory;
/// answers the bytes copied.
fn raw_copy(from: &Path, to: &Path) -> u64 {
    std::fs::create_dir_all(to).unwrap();
    let mut bytes = 0;
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        let kind = e.file_type().unwrap();
        if kind.is_dir() {
            bytes += raw_copy(&e.path(), &target);
        } else if kind.is_file() {
            bytes += std::fs::copy(e.path(), &target).unwrap();
            File::open(&target).unwrap().sync_all().unwrap();
        }
    }
    File::open(to).unwrap().sync_all().unwrap();
    bytes
}

/// Runs the migration; answers its duration and the time from each step
/// line to the next, summed by step.
fn migrate(src: &Path, dst: &Path) -> (Duration, BTreeMap<String, Duration>) {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["migrate", "run", "--source"])
        .arg(src)
        .arg("--dest")
        .arg(dst)
        .args(["--migration-id", "bench"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut steps: BTreeMap<String, Duration> = BTreeMap::new();
    let mut last = ("start".to_string(), start);
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        let now = Instant::now();
        *steps.entry(last.0.clone()).or_default() += now - last.1;
        // Group per-table steps: "copy table t_…" -> "copy table".
        let text = line.trim_start_matches("migrate: ");
        let words: Vec<&str> = text.split_whitespace().collect();
        let key = match words.as_slice() {
            ["copy" | "verify", "table", ..] => words[..2].join(" "),
            ["table", ..] => "table copied (until the next step)".to_string(),
            _ => text.split(':').next().unwrap_or_default().to_string(),
        };
        last = (key, now);
    }
    let status = child.wait().unwrap();
    let total = start.elapsed();
    *steps.entry(last.0).or_default() += Instant::now() - last.1;
    assert!(status.success(), "the migration failed");
    (total, steps)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let mb: usize = std::env::var("CUSTOS_BENCH_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(104);
    // About 40 % table payload, 60 % objects.
    let object_bytes = 1 << 20;
    let objects = (mb * 6 / 10).max(1);
    let rows = ((mb * 4 / 10) << 20) as i64 / 2 / 200;
    let size = Size {
        rows,
        row_bytes: 200,
        objects,
        object_bytes,
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let t = Instant::now();
    let f = fixture::build(&src, size);
    println!(
        "fixture: {} bytes of payload and objects ({} rows × 2 tables × {} B, {} objects × {} B), built in {:.1} s",
        f.bytes,
        rows,
        size.row_bytes,
        objects,
        object_bytes,
        t.elapsed().as_secs_f64()
    );
    let mut raw = Vec::new();
    let mut ours = Vec::new();
    let mut copied = 0;
    let mut profile = BTreeMap::new();
    for round in 0..3 {
        let t = Instant::now();
        copied = raw_copy(&src, &dir.path().join(format!("raw-{round}")));
        raw.push(t.elapsed());
        let (total, steps) = migrate(&src, &dir.path().join(format!("dst-{round}")));
        ours.push(total);
        profile = steps;
        std::fs::remove_dir_all(dir.path().join(format!("raw-{round}"))).unwrap();
        std::fs::remove_dir_all(dir.path().join(format!("dst-{round}"))).unwrap();
    }
    let (r, m) = (median(raw), median(ours));
    println!("raw recursive copy + fsync of the source directory ({copied} bytes): {:.3} s (median of 3)", r.as_secs_f64());
    println!(
        "custos migrate run, cold verification included:  {:.3} s (median of 3)",
        m.as_secs_f64()
    );
    println!(
        "ratio raw / migration = {:.2} (goal ≥ 0.5)",
        r.as_secs_f64() / m.as_secs_f64()
    );
    println!("where the last migration's time went:");
    let mut by: Vec<_> = profile.into_iter().collect();
    by.sort_by_key(|e| std::cmp::Reverse(e.1));
    for (step, d) in by {
        println!("  {:>8.3} s  {step}", d.as_secs_f64());
    }
}
