//! The seams between the command line and what it talks to: no part of a
//! connection string's password reaches any output, a silent server never
//! makes a command wait forever, and a locked catalog either fails at once
//! or waits exactly as long as `--wait` allows.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn custos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(args)
        .env_remove("CUSTOS_CONTROL_CATALOG_URL")
        .stdin(Stdio::null())
        .output()
        .expect("custos runs")
}

/// Runs custos on a thread of its own; the harness's bound, far above
/// any wait under test, turns a hang into a failure instead of a stuck CI.
fn custos_bounded(args: Vec<String>) -> Output {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let _ = tx.send(custos(&a));
    });
    rx.recv_timeout(Duration::from_secs(120))
        .expect("the command ended")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// Every substring of four or more characters of `secret` in `text`.
use custos_conformance::leaked_parts as leaks;

/// Writes the inputs of release `name@1.0.0` of tenant `acme` (exporting
/// nothing) into `dir`: the component `component` (from `wat_text`), the
/// manifest `manifest` naming it, and the empty contract `k.json`. Answers
/// the component's digest.
#[cfg(feature = "fs")]
fn write_release(
    dir: &std::path::Path,
    component: &str,
    manifest: &str,
    name: &str,
    wat_text: &str,
) -> custos_core::release::Sha256 {
    let comp = wat::parse_str(wat_text).unwrap();
    let d = custos_core::release::Sha256::of(&comp);
    std::fs::write(dir.join(component), &comp).unwrap();
    std::fs::write(
        dir.join(manifest),
        format!(r#"{{"name":"{name}","version":"1.0.0","tenant":"acme","component_digest":"{d}","exports":[]}}"#),
    )
    .unwrap();
    std::fs::write(dir.join("k.json"), r#"{"interfaces":[]}"#).unwrap();
    d
}

/// The arguments of `custos releases publish` into the catalog `root` of
/// the manifest `manifest` and the component `component` in `dir`, with
/// its contract `k.json` ([`write_release`]'s files).
#[cfg(feature = "fs")]
fn publish_args(root: &str, dir: &std::path::Path, manifest: &str, component: &str) -> Vec<String> {
    let p = |n: &str| dir.join(n).display().to_string();
    vec![
        "releases".into(),
        "publish".into(),
        root.into(),
        "--manifest".into(),
        p(manifest),
        "--component".into(),
        p(component),
        "--contract".into(),
        p("k.json"),
    ]
}

/// Runs custos with `args`.
#[cfg(feature = "fs")]
fn custos_owned(args: &[String]) -> Output {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    custos(&a)
}

#[cfg(feature = "postgres")]
#[test]
fn no_part_of_a_password_reaches_the_output_of_catalog_commands() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("w");
    std::fs::create_dir_all(uri.join("default")).unwrap();
    let uri = uri.to_str().unwrap().to_owned();
    let specials = ["@", ":", "/", "#", "?", "%", "[", "]", " ", "@@", ":@/?#"];
    for c in specials {
        let pw = format!("Hunter2{c}SecretTail");
        // Port 1: nothing listens; the connection is refused at once.
        for url in [
            format!("postgresql://custos:{pw}@127.0.0.1:1/custos"),
            format!("postgresql://custos:{pw}@127.0.0.1:1/custos%0Ax%1B"),
        ] {
            for json in [false, true] {
                let mut args = vec![
                    "catalog",
                    "discover",
                    uri.as_str(),
                    "--catalog-url",
                    url.as_str(),
                ];
                if json {
                    args.push("--json");
                }
                let o = custos(&args);
                assert!(!o.status.success());
                for (what, t) in [("stdout", text(&o.stdout)), ("stderr", text(&o.stderr))] {
                    let found = leaks(&t, &pw);
                    assert!(found.is_empty(), "{url}: {what} shows {found:?}: {t}");
                    assert!(
                        !t.contains('\u{1b}'),
                        "{url}: {what} holds a raw ESC: {t:?}"
                    );
                }
            }
        }
    }
}

/// A TCP listener that accepts and never answers: `catalog discover`
/// against it ends within the connect timeout, unavailable, naming it.
#[cfg(feature = "postgres")]
#[test]
fn a_silent_server_ends_a_command_within_its_connect_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming() {
            held.push(s);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap().to_owned();
    let url = format!("postgresql://u:SecretTail@127.0.0.1:{port}/db?connect_timeout=1");
    let o = custos_bounded(
        ["catalog", "discover", &uri, "--catalog-url", &url]
            .map(str::to_owned)
            .to_vec(),
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(5), "{err}");
    assert!(err.contains("connect timeout"), "{err}");
    assert!(leaks(&err, "SecretTail").is_empty(), "{err}");
}

/// A catalog another process holds: refused at once without `--wait`
/// (exit 5, the lock named), answered once the holder lets go within
/// `--wait`, and refused again when it does not.
#[cfg(feature = "fs")]
#[test]
fn a_locked_catalog_fails_at_once_or_waits_as_told() {
    use fs2::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("releases");
    write_release(dir.path(), "c.wasm", "m.json", "a", "(component)");
    let r = root.to_str().unwrap().to_owned();
    let o = custos_bounded(publish_args(&r, dir.path(), "m.json", "c.wasm"));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lock = std::fs::File::open(root.join(".catalog.lock")).unwrap();
    lock.lock_exclusive().unwrap();
    let list = |extra: &[&str]| {
        let mut args: Vec<String> = ["releases", "list", &r, "--tenant", "acme"]
            .map(str::to_owned)
            .to_vec();
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        custos_bounded(args)
    };
    let started = Instant::now();
    let o = list(&[]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("--wait"), "{}", text(&o.stderr));
    let at_once = started.elapsed();
    // Held for the whole wait: still refused, after the wait.
    let started = Instant::now();
    let o = list(&["--wait", "1"]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(1),
        "gave up after {waited:?} (at once: {at_once:?})"
    );
    // Let go within the wait: the command goes ahead.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        FileExt::unlock(&lock).unwrap();
        drop(lock);
    });
    let o = list(&["--wait", "30"]);
    releaser.join().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("a@1.0.0"), "{}", text(&o.stdout));
    // --wait accepts whole seconds up to a day.
    let o = custos(&["releases", "--wait", "-1", "list", &r]);
    assert_eq!(o.status.code(), Some(2));
}

/// Commands that add nothing never create anything: revoking, retiring or
/// upgrading at a mistyped path, or deleting a deployment from a missing
/// catalog, is not found (exit 3) and leaves no directory, lock or marker
/// behind — not at a missing path, not in an empty directory.
#[cfg(feature = "fs")]
#[test]
fn commands_that_change_nothing_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    // A real release catalog for the deployment command to open.
    let d = write_release(dir.path(), "c.wasm", "m.json", "a", "(component)");
    let releases = dir.path().join("releases");
    let rel = releases.to_str().unwrap();
    let o = custos_owned(&publish_args(rel, dir.path(), "m.json", "c.wasm"));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let digest = d.to_string();
    for root in [&missing, &empty] {
        let r = root.to_str().unwrap();
        let lines: Vec<Vec<&str>> = vec![
            vec!["releases", "revoke", r, &digest],
            vec!["releases", "retire", r, "calc@1.0.0", "--tenant", "acme"],
            vec!["releases", "upgrade", r],
            vec![
                "deployments",
                "delete",
                r,
                "--releases",
                rel,
                "--tenant",
                "acme",
                "blue",
            ],
        ];
        for args in lines {
            let o = custos(&args);
            assert_eq!(o.status.code(), Some(3), "{args:?}: {}", text(&o.stderr));
            assert!(
                text(&o.stderr).contains("NotFound"),
                "{args:?}: {}",
                text(&o.stderr)
            );
            if root == &missing {
                assert!(!missing.exists(), "{args:?} created {}", missing.display());
            } else {
                let left: Vec<_> = std::fs::read_dir(&empty).unwrap().collect();
                assert!(left.is_empty(), "{args:?} left {left:?}");
            }
        }
    }
}

/// `custos --help` prints the one exit-status table, and the README holds
/// it verbatim.
#[test]
fn the_exit_status_table_is_printed_and_documented() {
    let o = custos(&["--help"]);
    assert!(o.status.success());
    let help = text(&o.stdout);
    let start = help
        .find("Exit status (every command):")
        .expect("the table in --help");
    let table = help[start..].trim_end();
    for code in [
        "  0  done",
        "  5  unavailable",
        "  8  committed but unreported",
        "141  stdout",
    ] {
        assert!(table.contains(code), "{table}");
    }
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    assert!(
        readme.contains(table),
        "the README's table differs from --help:\n{table}"
    );
}

/// The files the exit-status examples use, under `dir`: component `c`
/// with manifest `m` (`a@1.0.0` of `acme`), another component `c2` under
/// the same reference (`m2`), an empty contract `k`, a broken manifest
/// `bad`. Answers the first component's digest.
#[cfg(all(feature = "fs", feature = "sqlite"))]
fn exit_fixture(dir: &std::path::Path) -> custos_core::release::Sha256 {
    let d = write_release(dir, "c.wasm", "m.json", "a", "(component)");
    // Another component under the same reference: a conflict.
    write_release(dir, "c2.wasm", "m2.json", "a", "(component (core module))");
    std::fs::write(dir.join("bad.json"), "{").unwrap();
    d
}

/// One example per class per command group, each with the status the
/// table gives it (run in order: the later ones build on the earlier).
#[cfg(all(feature = "fs", feature = "sqlite"))]
#[test]
fn each_group_answers_each_class_with_the_tables_status() {
    let dir = tempfile::tempdir().unwrap();
    let d = exit_fixture(dir.path());
    let p = |n: &str| dir.path().join(n).display().to_string();
    let (rel, dep, missing) = (p("releases"), p("deployments"), p("missing"));
    for (file, tenant) in [("steal.json", "other"), ("own.json", "acme")] {
        std::fs::write(
            p(file),
            format!(
                r#"{{"id":"s","tenant":"{tenant}","service":"x","release":"{d}","route_weight":1}}"#
            ),
        )
        .unwrap();
    }
    let publish = |m: &str, c: &str| {
        format!(
            "releases publish {rel} --manifest {} --component {} --contract {}",
            p(m),
            p(c),
            p("k.json")
        )
    };
    let apply = |tenant: &str, m: &str| {
        format!(
            "deployments apply {dep} --releases {rel} --tenant {tenant} --manifest {}",
            p(m)
        )
    };
    // The paths hold no whitespace: each case is one line split at it.
    let cases = [
        (0, publish("m.json", "c.wasm")),
        (2, publish("bad.json", "c.wasm")),
        (3, format!("releases show {rel} nope@1 --tenant acme")),
        (3, format!("releases list {missing}")),
        (4, publish("m2.json", "c2.wasm")),
        (2, apply("acme", "bad.json")),
        (3, apply("other", "steal.json")),
        (0, apply("acme", "own.json")),
        (4, apply("acme", "own.json") + " --expected-generation 0"),
        (
            3,
            format!("deployments delete {dep} --releases {rel} --tenant acme nope"),
        ),
        (0, format!("releases revoke {rel} {d}")),
        (6, apply("acme", "own.json")),
        (3, format!("catalog discover {missing}")),
        (2, format!("catalog discover {missing} --namespace a/b")),
    ];
    for (want, line) in cases {
        let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        let o = custos_bounded(args);
        assert_eq!(o.status.code(), Some(want), "{line}: {}", text(&o.stderr));
    }
    // Corrupt: a damaged completion record.
    let complete = std::path::Path::new(&rel)
        .join("releases")
        .join(d.hex())
        .join("COMPLETE");
    std::fs::write(&complete, b"{").unwrap();
    let o = custos(&["releases", "verify", &rel]);
    assert_eq!(o.status.code(), Some(7), "{}", text(&o.stderr));
}

/// A hidden completed release — a publication interrupted after its
/// directory's rename and before its lifecycle record — still reserves its
/// reference: `show` says so and names it, as `publish` of another digest
/// under that reference does, instead of a bare "not found".
#[cfg(feature = "fs")]
#[test]
fn show_explains_a_hidden_release_that_reserves_a_reference() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).display().to_string();
    let rel = p("releases");
    // Release `name` from `wat_text` as the files `<tag>.wasm` and
    // `<tag>.json`.
    let release = |tag: &str, name: &str, wat_text: &str| {
        let (c, m) = (format!("{tag}.wasm"), format!("{tag}.json"));
        write_release(dir.path(), &c, &m, name, wat_text)
    };
    let calc = |tag: &str, wat_text: &str| release(tag, "calc", wat_text);
    let publish = |tag: &str| {
        let (m, c) = (format!("{tag}.json"), format!("{tag}.wasm"));
        custos_owned(&publish_args(&rel, dir.path(), &m, &c))
    };
    // An empty catalog first, so that its head exists to be restored.
    release("o", "other", "(component (core module (func)))");
    assert!(publish("o").status.success());
    let root = std::path::Path::new(&rel);
    let head = std::fs::read(root.join("LIFECYCLE")).unwrap();
    let a = calc("a", "(component)");
    assert!(publish("a").status.success());
    // The state a crash before the lifecycle commit leaves.
    std::fs::remove_file(root.join("lifecycle").join(a.hex())).unwrap();
    std::fs::write(root.join("LIFECYCLE"), head).unwrap();
    let o = custos(&["releases", "show", &rel, "calc@1.0.0", "--tenant", "acme"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("reserved") && err.contains(&a.to_string()),
        "{err}"
    );
    // Another digest under the reference: held by the same hidden release.
    calc("b", "(component (core module))");
    let o = publish("b");
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(&a.to_string()),
        "{}",
        text(&o.stderr)
    );
    // Its exact publication reconciles it.
    let a2 = calc("a", "(component)");
    assert_eq!(a, a2);
    assert!(publish("a").status.success());
    let o = custos(&["releases", "show", &rel, "calc@1.0.0", "--tenant", "acme"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// A refused change creates nothing either: a publication or an apply
/// refused into a missing root leaves no catalog behind; a digest given
/// with `--tenant` names that tenant's release only, another tenant's
/// answering exactly as an absent one; help is output like any other.
#[cfg(all(feature = "fs", feature = "sqlite"))]
#[test]
fn refusals_create_nothing_and_a_digest_is_scoped_by_its_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let d = exit_fixture(dir.path());
    let p = |n: &str| dir.path().join(n).display().to_string();
    let (rel, dep, fresh) = (p("releases"), p("deployments"), p("fresh"));
    std::fs::write(
        p("steal.json"),
        format!(r#"{{"id":"s","tenant":"other","service":"x","release":"{d}","route_weight":1}}"#),
    )
    .unwrap();
    let line = |l: String| {
        let args: Vec<String> = l.split_whitespace().map(str::to_owned).collect();
        custos_bounded(args)
    };
    let o = line(format!(
        "releases publish {fresh} --manifest {} --component {} --contract {}",
        p("bad.json"),
        p("c.wasm"),
        p("k.json")
    ));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        !std::path::Path::new(&fresh).exists(),
        "a refused publication created a catalog"
    );
    let o = line(format!(
        "releases publish {rel} --manifest {} --component {} --contract {}",
        p("m.json"),
        p("c.wasm"),
        p("k.json")
    ));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = line(format!(
        "deployments apply {dep} --releases {rel} --tenant other --manifest {}",
        p("steal.json")
    ));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(
        !std::path::Path::new(&dep).exists(),
        "a refused apply created a catalog"
    );
    let absent = custos_core::release::Sha256::of(b"absent");
    for verb in ["show", "revoke", "retire"] {
        let foreign = line(format!("releases {verb} {rel} {d} --tenant other"));
        let none = line(format!("releases {verb} {rel} {absent} --tenant other"));
        assert_eq!(
            foreign.status.code(),
            Some(3),
            "{verb}: {}",
            text(&foreign.stderr)
        );
        assert_eq!(
            text(&foreign.stderr).replace(&d.to_string(), "D"),
            text(&none.stderr).replace(&absent.to_string(), "D"),
            "{verb}"
        );
    }
    let o = line(format!("releases show {rel} {d} --tenant acme"));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = Command::new(env!("CARGO_BIN_EXE_custos"))
        .arg("--help")
        .stdout(writer)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(141));
}
