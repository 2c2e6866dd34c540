//! `custos migrate abandon`, an interrupted run, and the host lock.
//!
//! - A run SIGKILLed at every step boundary before activation is
//!   abandoned: the destination holds no table and no discoverable World,
//!   the abandoned id never resumes, and the same source moves to the same
//!   destination under a new id with no acknowledgement of a second copy.
//!   Killed at activation or later, abandon is refused and changes
//!   nothing.
//! - SIGINT stops a run at the next step boundary with the resumable
//!   status (5) and says how to resume; the retry completes.
//! - Two runs whose environments differ (`TMPDIR`) still exclude each
//!   other, and no run leaves a lock file anywhere.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/fixture.rs"]
#[allow(dead_code)]
mod fixture;
#[path = "support/migration.rs"]
#[allow(dead_code)]
mod migration;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use custos_core::identity::StorageIdentity;
use custos_core::migration::Status;
use custos_iceberg::IcebergStore;
use fixture::Size;
use migration::{bin, custos, destination, run, run_args, Run};

/// The tables of `dst`'s namespace (none without an Iceberg catalog).
fn tables(dst: &Path) -> Vec<String> {
    let id = StorageIdentity::new(dst.to_str().unwrap(), "default", "iceberg").unwrap();
    if !custos_iceberg::store::iceberg_catalog_path(&id)
        .unwrap()
        .exists()
    {
        return vec![];
    }
    IcebergStore::open_writable(&id)
        .unwrap()
        .list_tables()
        .unwrap()
}

/// Table directories under `dst`'s namespace (the store's own files, which
/// start with `.custos`, aside).
fn table_dirs(dst: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dst.join("default")) else {
        return vec![];
    };
    entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with(".custos"))
        .collect()
}

fn abandon(dst: &Path, id: &str) -> Run {
    custos(&[
        "migrate",
        "abandon",
        "--dest",
        dst.to_str().unwrap(),
        "--migration-id",
        id,
    ])
}

/// Runs `migrate run` and SIGKILLs it once `n` lines are on stderr;
/// answers whether the kill ended it.
fn killed_at_line(src: &Path, dst: &Path, n: usize) -> bool {
    let mut child = Command::new(bin())
        .args(run_args(src, dst, "m-1"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    for _ in 0..n {
        if lines.next().is_none() {
            break;
        }
    }
    let _ = child.kill();
    for _ in lines.by_ref() {}
    use std::os::unix::process::ExitStatusExt;
    child.wait().unwrap().signal() == Some(9)
}

#[test]
fn a_run_killed_before_activation_is_abandoned_and_the_source_moves_again() {
    let dir = tempfile::tempdir().unwrap();
    // The steps a whole run announces. (Every kill gets a source of its
    // own: a fixture records its objects' absolute uris, so a copied
    // directory is not a source.)
    let cal_src = dir.path().join("cal-src");
    fixture::build(&cal_src, Size::SMALL);
    let cal = run(&cal_src, &dir.path().join("cal-dst"), "m-1", &[]);
    assert_eq!(cal.code, 0, "{}", cal.stderr);
    let lines: Vec<&str> = cal.stderr.lines().collect();
    let activation = lines
        .iter()
        .position(|l| l.contains("activate the destination"))
        .expect("a run announces activation");
    let (mut abandoned, mut refused) = (0, 0);
    // Kill after stderr line n: the step that line announces is under way.
    for n in 1..=lines.len() {
        let src = dir.path().join(format!("src-{n}"));
        let dst = dir.path().join(format!("dst-{n}"));
        fixture::build(&src, Size::SMALL);
        if !killed_at_line(&src, &dst, n) {
            continue;
        }
        let (status, _, _) = destination(&dst);
        let out = abandon(&dst, "m-1");
        match status {
            None => {
                // Killed before the reservation: nothing to abandon; the
                // same id resumes (and is refused nothing).
                assert_eq!(out.code, 6, "line {n}: {}", out.stderr);
                assert!(out.stderr.contains("nothing-to-abandon"), "{}", out.stderr);
                assert_eq!(run(&src, &dst, "m-1", &[]).code, 0);
                continue;
            }
            Some(Status::Activated | Status::Completed) => {
                assert!(n > activation, "line {n}: activated before its step");
                let before = migration::tree(&dst);
                assert_eq!(out.code, 6, "line {n}: {}", out.stderr);
                assert!(
                    out.stderr.contains("abandon-after-activation"),
                    "{}",
                    out.stderr
                );
                assert_eq!(
                    migration::tree(&dst),
                    before,
                    "a refusal changed the destination"
                );
                refused += 1;
                continue;
            }
            Some(s) => assert!(
                matches!(s, Status::Reserved | Status::Invalidated),
                "line {n}: {s:?}"
            ),
        }
        assert_eq!(out.code, 0, "line {n}: {}", out.stderr);
        assert!(
            out.stdout.contains("abandoned migration m-1"),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.contains("may be planned again"),
            "{}",
            out.stdout
        );
        abandoned += 1;
        let (status, receipt, worlds) = destination(&dst);
        assert_eq!(status, Some(Status::Abandoned));
        assert!(!receipt);
        assert_eq!(worlds, 0, "line {n}: discoverable after abandon");
        assert!(tables(&dst).is_empty(), "line {n}: {:?}", tables(&dst));
        assert!(
            table_dirs(&dst).is_empty(),
            "line {n}: {:?}",
            table_dirs(&dst)
        );
        // Repeatable: a second abandon says it was abandoned already.
        let again = abandon(&dst, "m-1");
        assert_eq!(again.code, 0, "{}", again.stderr);
        assert!(
            again.stdout.contains("abandoned already"),
            "{}",
            again.stdout
        );
        // The abandoned id never resumes.
        let resumed = run(&src, &dst, "m-1", &[]);
        assert_eq!(resumed.code, 6, "{}", resumed.stderr);
        assert!(
            resumed.stderr.contains("migration-abandoned"),
            "{}",
            resumed.stderr
        );
        // The source is free and the destination empty: a new migration
        // goes through, no second copy acknowledged.
        let next = run(&src, &dst, "m-2", &[]);
        assert_eq!(next.code, 0, "line {n}: {}", next.stderr);
        assert_eq!(destination(&dst).0, Some(Status::Completed));
    }
    assert!(abandoned >= 5, "{abandoned} kills abandoned");
    assert!(refused >= 1, "{refused} activated kills refused");
    println!("{abandoned} kills before activation abandoned, {refused} after it refused");
}

#[test]
fn sigint_stops_a_run_at_a_step_boundary_and_the_retry_completes() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    fixture::build(&src, Size::SMALL);
    let mut child = Command::new(bin())
        .args(run_args(&src, &dst, "m-1"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // Interrupt once the run copies its first table.
    let mut seen = Vec::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        let copying = l.contains("copy table");
        seen.push(l);
        if copying {
            break;
        }
    }
    let ok = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    seen.extend(lines.map_while(Result::ok));
    let status = child.wait().unwrap();
    let text = seen.join("\n");
    assert_eq!(status.code(), Some(5), "{text}");
    let last = seen.last().unwrap();
    assert!(
        last.contains("interrupted: stopped before the step"),
        "{text}"
    );
    assert!(last.contains("--migration-id m-1"), "{text}");
    // Stopped between steps: reserved, nothing discoverable.
    let (s, receipt, worlds) = destination(&dst);
    assert_eq!((s, receipt, worlds), (Some(Status::Reserved), false, 0));
    let done = run(&src, &dst, "m-1", &[]);
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(destination(&dst).0, Some(Status::Completed));
}

/// Entries of `dir` named `custos-migrate-…`.
fn lock_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("custos-migrate-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn runs_exclude_each_other_whatever_their_environment_and_leave_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    fixture::build(&src, Size::SMALL);
    let (t1, t2) = (dir.path().join("tmp-1"), dir.path().join("tmp-2"));
    std::fs::create_dir_all(&t1).unwrap();
    std::fs::create_dir_all(&t2).unwrap();
    let system = std::env::temp_dir();
    let before = lock_files(&system);
    let mut first = Command::new(bin())
        .args(run_args(&src, &dst, "m-1"))
        .env("TMPDIR", &t1)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(first.stderr.take().unwrap()).lines();
    assert!(lines.next().is_some());
    let second = Command::new(bin())
        .args(run_args(&src, &dst, "m-1"))
        .env("TMPDIR", &t2)
        .output()
        .unwrap();
    for _ in lines.by_ref() {}
    assert!(first.wait().unwrap().success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("migration-running"), "{stderr}");
    assert!(lock_files(&t1).is_empty() && lock_files(&t2).is_empty());
    let after = lock_files(&system);
    assert!(
        after.iter().all(|n| before.contains(n)),
        "new lock files in {}: {after:?}",
        system.display()
    );
}

/// `migrate run --plan plan` SIGKILLed once it announces its first table
/// copy; answers the stderr lines it printed.
fn killed_copying(src: &Path, dst: &Path, plan: &str) -> String {
    let mut child = Command::new(bin())
        .args(run_args(src, dst, "move-1"))
        .args(["--plan", plan])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = String::new();
    for l in BufReader::new(child.stderr.take().unwrap()).lines() {
        let l = l.unwrap();
        seen.push_str(&l);
        seen.push('\n');
        if l.contains("copy table") {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    seen
}

/// The arguments of `custos migrate plan` from `src` to `dst` under
/// migration id `id`, writing the plan to `out`.
fn plan_args<'a>(src: &'a str, dst: &'a str, id: &'a str, out: &'a str) -> [&'a str; 10] {
    [
        "migrate",
        "plan",
        "--source",
        src,
        "--dest",
        dst,
        "--migration-id",
        id,
        "--out",
        out,
    ]
}

/// The operator's flow, as a transcript (`--nocapture` prints it, with the
/// temporary paths shown as `S`, `D` and `W`): plan, a run killed while it
/// copies, abandon, plan again under a new id, run, verify read-only.
#[test]
fn operator_flow_plan_kill_abandon_plan_again_run_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("S"), dir.path().join("D"));
    fixture::build(&src, Size::SMALL);
    let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
    let w = dir.path().to_str().unwrap();
    let transcript = std::cell::RefCell::new(String::new());
    let shown = |t: &str| t.replace(s, "S").replace(d, "D").replace(w, "W");
    let say = |args: &[&str], out: &Run| {
        let mut t = transcript.borrow_mut();
        t.push_str(&format!("$ custos {}\n", shown(&args.join(" "))));
        for l in out.stdout.lines().chain(out.stderr.lines()) {
            t.push_str(&shown(l));
            t.push('\n');
        }
        t.push_str(&format!("# exit {}\n", out.code));
    };
    // Runs `custos args`, writes it into the transcript and asserts its
    // exit code.
    let step = |args: &[&str], code: i32| {
        let out = custos(args);
        say(args, &out);
        assert_eq!(out.code, code, "{args:?}: {}", out.stderr);
    };
    let plan1 = dir.path().join("move-1.plan");
    let p1 = plan1.to_str().unwrap();
    step(&plan_args(s, d, "move-1", p1), 0);
    let seen = killed_copying(&src, &dst, p1);
    transcript.borrow_mut().push_str(&format!(
        "$ custos migrate run --source S --dest D --migration-id move-1 --plan W/move-1.plan\n{}# SIGKILL\n",
        shown(&seen)
    ));
    assert_eq!(destination(&dst).0, Some(Status::Reserved));
    // Another id is refused while move-1 holds the destination.
    let plan2 = dir.path().join("move-2.plan");
    let p2 = plan2.to_str().unwrap();
    let args2 = plan_args(s, d, "move-2", p2);
    step(&args2, 6);
    step(
        &[
            "migrate",
            "abandon",
            "--dest",
            d,
            "--migration-id",
            "move-1",
        ],
        0,
    );
    step(&args2, 0);
    let receipt = dir.path().join("move-2.receipt");
    let r = receipt.to_str().unwrap();
    step(
        &[
            "migrate",
            "run",
            "--source",
            s,
            "--dest",
            d,
            "--migration-id",
            "move-2",
            "--plan",
            p2,
            "--receipt",
            r,
        ],
        0,
    );
    let before = migration::tree(&dst);
    step(&["migrate", "verify", "--dest", d, "--receipt", r], 0);
    assert_eq!(migration::tree(&dst), before, "verify wrote");
    println!("{}", transcript.borrow());
}
