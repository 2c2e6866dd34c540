//! Scale probe of the release repository, ignored by default:
//!
//! ```text
//! cargo test -p custos-fs --release --test release_scale -- --ignored scale --nocapture
//! ```
//!
//! A publisher child publishes `CUSTOS_SCALE_RELEASES` (default 100,000)
//! distinct synthetic releases through [`ReleaseRepository::publish`] on
//! [`RealFs`] (production syncs, the 1 GiB index-accounting budget), then
//! lists, resolves and fetches every one byte-for-byte. After it exits, a
//! reopen child opens the same root (full recovery) and does the same. Each
//! reports publications (or verifications) per second and its thread and
//! file-descriptor counts (`/proc/self/status` `Threads`, `/proc/self/fd`)
//! at baseline, after open, after its work and after close; the catalog
//! starts no thread and holds one descriptor (the root lock) while open.
//!
//! The parent only supervises: it tails each child's log in bounded 8 KiB
//! chunks with its own read cursor, forwards it live, checks completion
//! before declaring a timeout, and kills and reaps a child that passes its
//! absolute deadline (publisher 60 min, reopen 30 min) or stays silent too
//! long (publisher 10 min; reopen 30 min, since a rebuild prints nothing).
//! `CUSTOS_SCALE_LOG_DIR` keeps the logs; `CUSTOS_SCALE_DIR` picks the disk.
//! The fast tests below cover the supervisor itself.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use custos_core::release::bounds::{Bounds, KIB, MIB};
use custos_core::release::contract::{Contract, MagicOnly, ValType};
use custos_core::release::Sha256;
use custos_fs::release::ReleaseRepository;
use custos_fs::RealFs;

mod support;
use support::{contract_of, param};

const MODE_ENV: &str = "CUSTOS_SCALE_CHILD";
const ROOT_ENV: &str = "CUSTOS_SCALE_ROOT";
const COUNT_ENV: &str = "CUSTOS_SCALE_RELEASES";
const TENANT: &str = "scale";
const SERVICES: u64 = 16;
const CHECKPOINT: u64 = 1_000;

/// The probe's bounds: the defaults with the 1 GiB index-accounting budget.
fn bounds() -> Bounds {
    Bounds {
        max_index_bytes: 1024 * MIB,
        ..Bounds::default()
    }
}

fn contract() -> Contract {
    contract_of(
        "api:scale/run",
        vec![param("n", ValType::U64)],
        vec![ValType::List(Box::new(ValType::U8))],
    )
}

fn component(n: u64) -> Vec<u8> {
    let mut c = b"\0asm\x0d\0\x01\0".to_vec();
    c.extend_from_slice(&n.to_le_bytes());
    c.extend_from_slice(&Sha256::of(&n.to_le_bytes()).0);
    c
}

fn reference(n: u64) -> String {
    format!("scale-{n}@1.0.{n}")
}

fn manifest(n: u64, digest: &Sha256) -> Vec<u8> {
    format!(
        r#"{{"name":"scale-{n}","version":"1.0.{n}","tenant":"{TENANT}","service":"s{}","component_digest":"{digest}","exports":["api:scale/run"]}}"#,
        n % SERVICES
    )
    .into_bytes()
}

/// `(threads, open fds)` of this process.
fn resources() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    // The read_dir handle itself is one descriptor: not counted.
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64 - 1);
    (threads, fds)
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

fn report(label: &str, at: &str) -> (u64, u64) {
    let (t, f) = resources();
    say(&format!("{label}: {at}: threads {t}, fds {f}"));
    (t, f)
}

/// Lists every release (all pages of every service scope), resolves and
/// fetches each byte-for-byte. Returns the number verified.
fn verify_all(
    repo: &ReleaseRepository<RealFs>,
    count: u64,
    label: &str,
    started: Instant,
    open: (u64, u64),
) -> u64 {
    let mut listed = vec![false; usize::try_from(count).unwrap()];
    for s in 0..SERVICES {
        let service = format!("s{s}");
        let mut token: Option<String> = None;
        loop {
            let page = repo
                .list_catalog_entries(TENANT, Some(&service), token.as_deref())
                .unwrap();
            for e in &page.entries {
                let n: u64 = e
                    .descriptor
                    .name
                    .trim_start_matches("scale-")
                    .parse()
                    .unwrap();
                let slot = listed.get_mut(usize::try_from(n).unwrap()).unwrap();
                assert!(!*slot, "{n} listed twice");
                *slot = true;
            }
            match page.next_page_token {
                Some(t) => token = Some(t),
                None => break,
            }
        }
    }
    assert!(
        listed.iter().all(|l| *l),
        "{label}: a release is missing from the listing"
    );
    say(&format!(
        "{label}: listed {count} in {:.1}s",
        started.elapsed().as_secs_f64()
    ));
    let c = contract();
    for n in 0..count {
        let comp = component(n);
        let digest = Sha256::of(&comp);
        assert_eq!(
            repo.resolve(Some(TENANT), &reference(n))
                .unwrap()
                .component_digest,
            digest
        );
        let got = repo.fetch(&digest).unwrap();
        assert_eq!(got.component, comp, "{label}: component {n} differs");
        assert_eq!(got.contract, c);
        assert_eq!(got.manifest.reference(), reference(n));
        if (n + 1) % CHECKPOINT == 0 {
            let (t, f) = resources();
            say(&format!(
                "{label}: verified {} elapsed {:.1}s (threads {t}, fds {f})",
                n + 1,
                started.elapsed().as_secs_f64()
            ));
            assert_eq!((t, f), open, "{label}: resources grew during verification");
        }
    }
    count
}

/// Child mode: a no-op unless `CUSTOS_SCALE_CHILD` is set (`publish`,
/// `reopen`, or the supervisor tests' `silent` and `chatty`).
#[test]
fn scale_child() {
    let Ok(mode) = std::env::var(MODE_ENV) else {
        return;
    };
    // The supervisor's own tests run the `silent` and `chatty` modes,
    // which need neither.
    let root = PathBuf::from(std::env::var(ROOT_ENV).unwrap_or_default());
    let count: u64 = std::env::var(COUNT_ENV)
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    match mode.as_str() {
        "publish" => child_publish(&root, count),
        "reopen" => child_reopen(&root, count),
        "silent" => std::thread::sleep(Duration::from_secs(60)),
        "chatty" => {
            for i in 0..6 {
                say(&format!("tick {i} {}", "x".repeat(5000)));
                std::thread::sleep(Duration::from_millis(300));
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// Child mode `publish`: publishes `count` releases into a new root at
/// `root`, reporting the rate and checking that no thread or fd leaks.
fn child_publish(root: &Path, count: u64) {
    let base = report("publish", "baseline");
    let t = Instant::now();
    let repo = ReleaseRepository::open(RealFs, root, bounds(), Arc::new(MagicOnly)).unwrap();
    let opened = report("publish", "after open");
    let c = contract();
    let started = Instant::now();
    let mut window = Instant::now();
    for n in 0..count {
        let comp = component(n);
        let digest = Sha256::of(&comp);
        let p = repo
            .publish(&manifest(n, &digest), comp, c.clone())
            .unwrap();
        assert_eq!(p.digest, digest);
        if (n + 1) % CHECKPOINT == 0 {
            let (t, f) = resources();
            say(&format!(
                "publish: published {} elapsed {:.1}s ({:.0}/s over the last {CHECKPOINT}; threads {t}, fds {f})",
                n + 1,
                started.elapsed().as_secs_f64(),
                CHECKPOINT as f64 / window.elapsed().as_secs_f64()
            ));
            assert_eq!((t, f), opened, "publish: resources grew during publication");
            window = Instant::now();
        }
    }
    let secs = started.elapsed().as_secs_f64();
    say(&format!(
        "RESULT publish: {count} publications in {secs:.1}s = {:.1} publications/s",
        count as f64 / secs
    ));
    let published = report("publish", "after publication");
    assert_eq!(repo.len() as u64, count);
    let v = Instant::now();
    verify_all(&repo, count, "publish", v, opened);
    say(&format!(
        "RESULT publish-verify: {count} listed+resolved+fetched in {:.1}s = {:.1}/s",
        v.elapsed().as_secs_f64(),
        count as f64 / v.elapsed().as_secs_f64()
    ));
    let verified = report("publish", "after verification");
    let usage = repo.usage();
    say(&format!(
        "publish: usage: {} entries, {} accounted index bytes, {} directories",
        usage.entries, usage.index_bytes, usage.recovery_directories
    ));
    drop(repo);
    let closed = report("publish", "after close");
    say(&format!("publish: total {:.1}s", t.elapsed().as_secs_f64()));
    assert_eq!(opened.0, base.0, "open started a thread");
    assert_eq!(opened.1, base.1 + 1, "open holds more than the lock fd");
    assert_eq!((published, verified), (opened, opened), "resources grew");
    assert_eq!(closed, base, "close leaked a thread or fd");
}

/// Child mode `reopen`: reopens the root `child_publish` left, rebuilding
/// and verifying its `count` releases, with the same resource checks.
fn child_reopen(root: &Path, count: u64) {
    let base = report("reopen", "baseline");
    let t = Instant::now();
    let repo = ReleaseRepository::open(RealFs, root, bounds(), Arc::new(MagicOnly)).unwrap();
    let secs = t.elapsed().as_secs_f64();
    say(&format!(
        "RESULT reopen: rebuilt {} releases in {secs:.1}s = {:.1} releases/s",
        repo.len(),
        repo.len() as f64 / secs
    ));
    let opened = report("reopen", "after open");
    assert_eq!(repo.len() as u64, count);
    let v = Instant::now();
    verify_all(&repo, count, "reopen", v, opened);
    say(&format!(
        "RESULT reopen-verify: {count} listed+resolved+fetched in {:.1}s = {:.1}/s",
        v.elapsed().as_secs_f64(),
        count as f64 / v.elapsed().as_secs_f64()
    ));
    let verified = report("reopen", "after verification");
    drop(repo);
    let closed = report("reopen", "after close");
    assert_eq!(opened.0, base.0, "open started a thread");
    assert_eq!(opened.1, base.1 + 1, "open holds more than the lock fd");
    assert_eq!(verified, opened, "resources grew");
    assert_eq!(closed, base, "close leaked a thread or fd");
}

/// Why a supervised child did not succeed.
#[derive(Debug, PartialEq, Eq)]
enum Supervised {
    /// It exited unsuccessfully.
    Failed(Option<i32>),
    /// It passed its absolute deadline and was killed.
    Deadline,
    /// It printed nothing for the silence allowance and was killed.
    Silent,
}

/// Limits of one supervised child.
#[derive(Clone, Copy, Debug)]
struct Budget {
    absolute: Duration,
    silence: Duration,
}

/// Spawns this test binary as child `mode`, its output into `log`, and
/// supervises it: forwards the log to stderr in 8 KiB chunks, kills and
/// reaps it past `budget`. Returns the forwarded output.
fn supervise(
    mode: &str,
    envs: &[(&str, String)],
    log: &Path,
    budget: Budget,
) -> (Result<(), Supervised>, String) {
    let out = File::create(log).unwrap();
    let err = out.try_clone().unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "scale_child", "--nocapture", "--test-threads=1"])
        .env(MODE_ENV, mode)
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err));
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child: Child = cmd.spawn().unwrap();
    let mut reader = File::open(log).unwrap();
    let mut cursor = 0u64;
    let mut forwarded = String::new();
    let mut buf = vec![0u8; 8 * KIB as usize];
    let start = Instant::now();
    let mut heard = Instant::now();
    let mut pump = |reader: &mut File, cursor: &mut u64, forwarded: &mut String| -> bool {
        let mut any = false;
        loop {
            reader.seek(SeekFrom::Start(*cursor)).unwrap();
            let n = reader.read(&mut buf).unwrap();
            if n == 0 {
                return any;
            }
            any = true;
            *cursor += n as u64;
            let text = String::from_utf8_lossy(buf.get(..n).unwrap());
            eprint!("{text}");
            forwarded.push_str(&text);
        }
    };
    let result = loop {
        if pump(&mut reader, &mut cursor, &mut forwarded) {
            heard = Instant::now();
        }
        // Completion is checked before any timeout is declared.
        if let Some(status) = child.try_wait().unwrap() {
            pump(&mut reader, &mut cursor, &mut forwarded);
            break if status.success() {
                Ok(())
            } else {
                Err(Supervised::Failed(status.code()))
            };
        }
        let timeout = if start.elapsed() >= budget.absolute {
            Some(Supervised::Deadline)
        } else if heard.elapsed() >= budget.silence {
            Some(Supervised::Silent)
        } else {
            None
        };
        if let Some(t) = timeout {
            let _ = child.kill();
            child.wait().unwrap();
            pump(&mut reader, &mut cursor, &mut forwarded);
            break Err(t);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (result, forwarded)
}

#[test]
#[ignore = "scale probe: minutes to hours on a real disk; run with --ignored scale"]
fn scale_probe_production_catalog() {
    let count: u64 = std::env::var(COUNT_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let base =
        std::env::var("CUSTOS_SCALE_DIR").map_or_else(|_| std::env::temp_dir(), PathBuf::from);
    let dir = tempfile::tempdir_in(&base).unwrap();
    let logs = std::env::var("CUSTOS_SCALE_LOG_DIR")
        .map_or_else(|_| dir.path().to_path_buf(), PathBuf::from);
    std::fs::create_dir_all(&logs).unwrap();
    let root = dir.path().join("catalog");
    eprintln!(
        "scale probe: {count} releases in {} (logs in {})",
        root.display(),
        logs.display()
    );
    let envs = [
        (ROOT_ENV, root.display().to_string()),
        (COUNT_ENV, count.to_string()),
    ];
    let (r, out) = supervise(
        "publish",
        &envs,
        &logs.join("publish.log"),
        Budget {
            absolute: Duration::from_secs(60 * 60),
            silence: Duration::from_secs(10 * 60),
        },
    );
    assert_eq!(r, Ok(()), "publisher child");
    assert!(out.contains("RESULT publish:"));
    let (r, out) = supervise(
        "reopen",
        &envs,
        &logs.join("reopen.log"),
        Budget {
            absolute: Duration::from_secs(30 * 60),
            silence: Duration::from_secs(30 * 60),
        },
    );
    assert_eq!(r, Ok(()), "reopen child");
    assert!(out.contains("RESULT reopen:"));
}

#[test]
fn supervisor_kills_a_silent_child() {
    if std::env::var(MODE_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let (r, _) = supervise(
        "silent",
        &[],
        &dir.path().join("silent.log"),
        Budget {
            absolute: Duration::from_secs(120),
            silence: Duration::from_millis(1500),
        },
    );
    assert_eq!(r, Err(Supervised::Silent));
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "the child outlived its silence allowance"
    );
}

#[test]
fn supervisor_deadline_is_not_extended_by_output_and_forwards_everything() {
    if std::env::var(MODE_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Progress resets the silence allowance but never the deadline.
    let (r, out) = supervise(
        "chatty",
        &[],
        &dir.path().join("chatty.log"),
        Budget {
            absolute: Duration::from_millis(1000),
            silence: Duration::from_secs(120),
        },
    );
    assert_eq!(r, Err(Supervised::Deadline));
    assert!(!out.contains("tick 5"), "the deadline was extended");
    // With room, every chunk (each line is over half a chunk) is forwarded
    // and the exit is seen before any timeout.
    let (r, out) = supervise(
        "chatty",
        &[],
        &dir.path().join("chatty2.log"),
        Budget {
            absolute: Duration::from_secs(120),
            silence: Duration::from_secs(60),
        },
    );
    assert_eq!(r, Ok(()));
    for i in 0..6 {
        assert!(
            out.contains(&format!("tick {i} ")),
            "tick {i} not forwarded"
        );
    }
}
