//! `custos releases publish|list|show|verify` end to end through the
//! binary: a release published from files is listed (table and JSON),
//! shown by digest and by reference with its verified contract, survives a
//! verifying reopen; an identical republication is a no-op; bad input
//! exits non-zero with a clear message and publishes nothing.

#![cfg(feature = "fs")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/binary.rs"]
mod binary;
#[path = "support/release_inputs.rs"]
mod release_inputs;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use custos_core::release::Sha256;

use binary::{closed_pipe, custos, custos_into, full_device, stderr, stdout};
use release_inputs::{component, CONTRACT};

struct Files {
    manifest: PathBuf,
    component: PathBuf,
    contract: PathBuf,
    digest: Sha256,
}

fn files(dir: &Path, name: &str, n: u8) -> Files {
    let component = component(n);
    let digest = Sha256::of(&component);
    let manifest = format!(
        r#"{{"name":"{name}","version":"1.2.{n}","tenant":"acme","service":"greeter","component_digest":"{digest}","exports":["add"]}}"#
    );
    let f = Files {
        manifest: dir.join(format!("{name}.manifest.json")),
        component: dir.join(format!("{name}.wasm")),
        contract: dir.join(format!("{name}.contract.json")),
        digest,
    };
    std::fs::write(&f.manifest, manifest).unwrap();
    std::fs::write(&f.component, component).unwrap();
    std::fs::write(&f.contract, CONTRACT).unwrap();
    f
}

fn publish(root: &Path, f: &Files, extra: &[&str]) -> Output {
    let mut args = vec![
        "releases",
        "publish",
        root.to_str().unwrap(),
        "--manifest",
        f.manifest.to_str().unwrap(),
        "--component",
        f.component.to_str().unwrap(),
        "--contract",
        f.contract.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    custos(&args)
}

#[test]
fn publish_then_list_show_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("catalog");
    let r = root.to_str().unwrap();
    let a = files(dir.path(), "greeter", 1);
    let b = files(dir.path(), "welcome", 2);

    let out = publish(&root, &a, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("new {}", a.digest)),
        "{}",
        stdout(&out)
    );
    let out = publish(&root, &b, &["--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["digest"], b.digest.to_string());
    assert_eq!(v["plan"], "new");
    assert_eq!(v["membership"], "member");

    // An identical republication changes nothing.
    let out = publish(&root, &a, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("identical {}", a.digest)));

    let out = custos(&["releases", "list", r, "--tenant", "acme"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains(&a.digest.to_string()) && text.contains("greeter@1.2.1"));
    assert!(text.contains(&b.digest.to_string()) && text.contains("welcome@1.2.2"));
    assert!(text.contains("2 release(s)"), "{text}");
    let out = list(r, "acme", &["--service", "greeter", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["releases"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    // Ascending digest order.
    let mut want = [a.digest.to_string(), b.digest.to_string()];
    want.sort();
    let got: Vec<&str> = rows
        .iter()
        .map(|row| row["descriptor"]["component_digest"].as_str().unwrap())
        .collect();
    assert_eq!(got, want);
    // Another tenant sees nothing.
    let out = custos(&["releases", "list", r, "--tenant", "other", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["releases"].as_array().unwrap().len(), 0);

    let out = custos(&["releases", "show", r, &a.digest.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("greeter@1.2.1"), "{text}");
    assert!(
        text.contains(&format!(
            "verified        {} component bytes",
            component(1).len()
        )),
        "{text}"
    );
    assert!(text.contains("interface       add"), "{text}");
    let show = ["releases", "show", r, "welcome@1.2.2", "--tenant", "acme"];
    let out = custos(&[&show[..], &["--json"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["descriptor"]["component_digest"], b.digest.to_string());
    assert_eq!(
        v["contract"],
        serde_json::from_str::<serde_json::Value>(CONTRACT).unwrap()
    );
    assert_eq!(v["membership"], "member");

    let out = custos(&["releases", "verify", r]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("releases                2"), "{text}");
    assert!(text.contains("incomplete directories  0"), "{text}");
    // Debris under releases/ is counted, never fatal; a read cleans
    // nothing (the next writing open clears .tmp).
    std::fs::create_dir(root.join("releases").join("half-upload")).unwrap();
    std::fs::create_dir(root.join(".tmp").join("abandoned")).unwrap();
    let out = custos(&["releases", "verify", r, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["releases"], 2);
    assert_eq!(v["incomplete_directories"], 1);
    assert_eq!(v["components_verified"], 2);
    assert_eq!(
        v["component_bytes_hashed"],
        component(1).len() + component(2).len()
    );
    assert!(
        root.join(".tmp").join("abandoned").exists(),
        "verify only reads"
    );
    let out = publish(&root, &a, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!root.join(".tmp").join("abandoned").exists());
}

/// `out` is a refused input: exit status 2 and `needle` in the message.
fn refused(out: &Output, needle: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", stderr(out));
    assert!(stderr(out).contains(needle), "{}", stderr(out));
}

#[test]
fn bad_input_exits_nonzero_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("catalog");
    let r = root.to_str().unwrap();
    let a = files(dir.path(), "greeter", 1);

    // A manifest whose digest is not the component's.
    let other = files(dir.path(), "other", 9);
    let mut bad = a.clone_with_manifest(&other.manifest);
    refused(&publish(&root, &bad, &[]), "component_digest");

    // A contract that does not parse.
    std::fs::write(&a.contract, b"{\"interfaces\": 7}").unwrap();
    refused(&publish(&root, &a, &[]), "is not a contract");
    std::fs::write(&a.contract, CONTRACT).unwrap();

    // A contract whose exports are not the manifest's.
    std::fs::write(&a.contract, br#"{"interfaces":[]}"#).unwrap();
    refused(&publish(&root, &a, &[]), "InvalidContract");
    std::fs::write(&a.contract, CONTRACT).unwrap();

    // A component that is not Wasm.
    bad.component = dir.path().join("elf.bin");
    std::fs::write(&bad.component, b"ELF not wasm").unwrap();
    let digest = Sha256::of(b"ELF not wasm");
    std::fs::write(
        &bad.manifest,
        format!(r#"{{"name":"elf","version":"1","component_digest":"{digest}","exports":[]}}"#),
    )
    .unwrap();
    bad.contract = dir.path().join("missing.contract.json");
    let out = custos(&[
        "releases",
        "publish",
        r,
        "--manifest",
        bad.manifest.to_str().unwrap(),
        "--component",
        bad.component.to_str().unwrap(),
    ]);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("magic"), "{}", stderr(&out));

    // A missing input file.
    refused(&publish(&root, &bad, &[]), "cannot read the contract");

    // No contract declared: the Wasm inspector's extraction is used; the
    // trusted-local inspector extracts none, which is not the manifest's.
    let out = custos(&[
        "releases",
        "publish",
        r,
        "--manifest",
        a.manifest.to_str().unwrap(),
        "--component",
        a.component.to_str().unwrap(),
    ]);
    let extracted = cfg!(feature = "wasm");
    assert_eq!(out.status.success(), extracted, "{}", stderr(&out));
    if !extracted {
        refused(&out, "InvalidContract");
    }

    // Nothing else was published by any of the above.
    let out = custos(&["releases", "verify", r, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["releases"], usize::from(extracted));

    // Unknown releases, malformed names, and a directory that is no catalog.
    let out = custos(&["releases", "show", r, &other.digest.to_string()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("NotFound"), "{}", stderr(&out));
    let out = custos(&["releases", "show", r, "nobody@1"]);
    assert_eq!(out.status.code(), Some(3));
    let out = custos(&["releases", "show", r, "not-a-digest"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("neither a digest"),
        "{}",
        stderr(&out)
    );
    let empty = dir.path().join("not-a-catalog");
    std::fs::create_dir(&empty).unwrap();
    let out = custos(&[
        "releases",
        "list",
        empty.to_str().unwrap(),
        "--tenant",
        "acme",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("no release catalog"),
        "{}",
        stderr(&out)
    );
    assert!(!empty.join("releases").exists(), "a read created a catalog");
}

impl Files {
    fn clone_with_manifest(&self, manifest: &Path) -> Files {
        Files {
            manifest: manifest.to_path_buf(),
            component: self.component.clone(),
            contract: self.contract.clone(),
            digest: self.digest,
        }
    }
}

/// Every directory and file under `dir` with its bytes: what
/// "byte-untouched" is checked against.
fn tree(dir: &Path) -> custos_fs::crash::Image {
    custos_fs::crash::image_of(dir).unwrap()
}

/// A catalog at `dir/catalog` with releases `greeter` (1) and `welcome`
/// (2) published.
fn catalog(dir: &Path) -> (PathBuf, Files, Files) {
    let root = dir.join("catalog");
    let a = files(dir, "greeter", 1);
    let b = files(dir, "welcome", 2);
    for f in [&a, &b] {
        let out = publish(&root, f, &[]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    (root, a, b)
}

/// The issue's example: a user's directory holding `releases/` and
/// `.tmp/cache/important.txt`. Every command — reads and publish — is
/// refused with a message naming the rule, and the directory is
/// byte-identical afterwards (before the fix, `list` answered "0
/// release(s)", deleted important.txt and created lifecycle/ and
/// .catalog.lock).
#[test]
fn a_user_directory_is_never_adopted_by_any_command() {
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("x");
    std::fs::create_dir_all(user.join("releases")).unwrap();
    std::fs::create_dir_all(user.join(".tmp/cache")).unwrap();
    std::fs::write(user.join(".tmp/cache/important.txt"), b"keep me").unwrap();
    let a = files(dir.path(), "greeter", 1);
    let u = user.to_str().unwrap();
    let before = tree(&user);
    let runs: [Vec<&str>; 5] = [
        vec!["releases", "list", u, "--tenant", "acme"],
        vec!["releases", "list", u],
        vec!["releases", "show", u, "greeter@1.2.1", "--tenant", "acme"],
        vec!["releases", "verify", u],
        vec!["releases", "upgrade", u],
    ];
    for args in &runs {
        let out = custos(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("NotACatalog"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert_eq!(tree(&user), before, "{args:?} changed the directory");
    }
    let out = publish(&user, &a, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("left it untouched"),
        "{}",
        stderr(&out)
    );
    assert_eq!(tree(&user), before, "publish changed the directory");
}

/// Read commands on a real catalog leave every byte (and the set of
/// files) as it was, debris included.
#[test]
fn read_commands_leave_the_catalog_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let (root, a, _) = catalog(dir.path());
    let r = root.to_str().unwrap();
    std::fs::create_dir(root.join(".tmp/abandoned")).unwrap();
    std::fs::create_dir(root.join("releases/half-upload")).unwrap();
    let before = tree(&root);
    let digest = a.digest.to_string();
    for args in [
        vec!["releases", "list", r, "--tenant", "acme"],
        vec!["releases", "list", r, "--json"],
        vec!["releases", "show", r, &digest],
        vec![
            "releases",
            "show",
            r,
            "welcome@1.2.2",
            "--tenant",
            "acme",
            "--json",
        ],
        vec!["releases", "verify", r],
    ] {
        let out = custos(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_eq!(tree(&root), before, "{args:?} wrote");
    }
}

/// Deleting lifecycle/ from an initialized catalog used to bootstrap every
/// completed release as a member, bringing a revoked one back. Now every
/// command fails with the corruption named, and nothing is re-created.
#[test]
fn a_deleted_lifecycle_directory_is_corruption_not_a_new_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let (root, a, b) = catalog(dir.path());
    let r = root.to_str().unwrap();
    let out = custos(&["releases", "revoke", r, "greeter@1.2.1", "--tenant", "acme"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("revoked {}", a.digest)));
    std::fs::remove_dir_all(root.join("lifecycle")).unwrap();
    let before = tree(&root);
    for args in [
        vec!["releases", "list", r, "--tenant", "acme"],
        vec!["releases", "show", r, "greeter@1.2.1", "--tenant", "acme"],
        vec!["releases", "retire", r, "welcome@1.2.2", "--tenant", "acme"],
    ] {
        let out = custos(&args);
        assert_eq!(out.status.code(), Some(7), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("CorruptArtifact") && err.contains("lifecycle/"),
            "{err}"
        );
        assert!(err.contains("restore it from a backup"), "{err}");
        assert_eq!(err.matches("preserve the directory").count(), 1, "{err}");
        assert_eq!(tree(&root), before);
    }
    let out = publish(&root, &b, &[]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(!root.join("lifecycle").exists());
}

/// `publish --component /dev/zero` used to read until the OOM killer
/// stopped it; every input is now read through its limit on bytes read.
/// A pipe is an ordinary input.
#[test]
fn inputs_are_bounded_by_bytes_read_and_pipes_work() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("catalog");
    let a = files(dir.path(), "greeter", 1);
    let mut zero = a.clone_with_manifest(&a.manifest);
    zero.component = PathBuf::from("/dev/zero");
    let out = publish(&root, &zero, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("ResourceExhausted") && err.contains("limit"),
        "{err}"
    );
    let mut manifest_zero = a.clone_with_manifest(Path::new("/dev/zero"));
    manifest_zero.contract = a.contract.clone();
    let out = publish(&root, &manifest_zero, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!root.exists(), "refused before the catalog is touched");
    // The component from a pipe.
    let child = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args([
            "releases",
            "publish",
            root.to_str().unwrap(),
            "--manifest",
            a.manifest.to_str().unwrap(),
            "--component",
            "/dev/stdin",
            "--contract",
            a.contract.to_str().unwrap(),
        ])
        .stdin(std::fs::File::open(&a.component).unwrap())
        .output()
        .unwrap();
    assert!(child.status.success(), "{}", stderr(&child));
    assert!(stdout(&child).contains(&format!("new {}", a.digest)));
}

/// Messages a person can act on: one class word, the object named, no
/// "Internal" for a mistake.
#[test]
fn errors_name_the_object_and_the_rule_once() {
    let dir = tempfile::tempdir().unwrap();
    let (root, a, _) = catalog(dir.path());
    let r = root.to_str().unwrap();
    // A root that is a file.
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let out = custos(&["releases", "list", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a directory"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("Internal"), "{}", stderr(&out));
    // Unknown release: the class word once.
    let out = custos(&["releases", "show", r, "nobody@1"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        stderr(&out).matches("NotFound").count(),
        1,
        "{}",
        stderr(&out)
    );
    // A truncated COMPLETE names the release.
    let complete = root.join("releases").join(a.digest.hex()).join("COMPLETE");
    let bytes = std::fs::read(&complete).unwrap();
    std::fs::write(&complete, &bytes[..bytes.len() / 2]).unwrap();
    let out = custos(&["releases", "verify", r]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&a.digest.hex()) || err.contains(&a.digest.to_string()),
        "{err}"
    );
    assert_eq!(err.matches("CorruptArtifact").count(), 1, "{err}");
    std::fs::write(&complete, &bytes).unwrap();
    // .tmp that is a file: corruption of a named directory, not Internal.
    std::fs::remove_dir_all(root.join(".tmp")).unwrap();
    std::fs::write(root.join(".tmp"), b"").unwrap();
    let out = custos(&["releases", "verify", r]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(stderr(&out).contains(".tmp/"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("Internal"), "{}", stderr(&out));
}

/// revoke, retire, and the trusted-local listing.
#[test]
fn operators_revoke_retire_and_list_tenantless_releases() {
    let dir = tempfile::tempdir().unwrap();
    let (root, a, b) = catalog(dir.path());
    let r = root.to_str().unwrap();
    let out = custos(&[
        "releases",
        "revoke",
        r,
        "greeter@1.2.1",
        "--tenant",
        "acme",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["membership"], "revoked");
    assert_eq!(v["changed"], true);
    let out = custos(&["releases", "revoke", r, &a.digest.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("unchanged"), "{}", stdout(&out));
    let out = custos(&["releases", "retire", r, &b.digest.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("retired {}", b.digest)));
    let out = custos(&["releases", "list", r, "--tenant", "acme"]);
    let text = stdout(&out);
    assert!(
        text.contains("revoked") && text.contains("retired"),
        "{text}"
    );
    let out = custos(&["releases", "show", r, "greeter@1.2.1", "--tenant", "acme"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("not served"), "{}", stdout(&out));
    let out = custos(&["releases", "revoke", r, "nobody@1"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));

    // A release published without a tenant: only the trusted-local listing.
    let c = component(7);
    let digest = Sha256::of(&c);
    let comp = dir.path().join("local.wasm");
    std::fs::write(&comp, &c).unwrap();
    let man = dir.path().join("local.json");
    std::fs::write(
        &man,
        format!(r#"{{"name":"local","version":"1.0.0","component_digest":"{digest}","exports":["add"]}}"#),
    )
    .unwrap();
    let out = custos(&[
        "releases",
        "publish",
        r,
        "--manifest",
        man.to_str().unwrap(),
        "--component",
        comp.to_str().unwrap(),
        "--contract",
        a.contract.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = custos(&["releases", "list", r]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("local@1.0.0") && text.contains("1 trusted-local release(s) (no tenant)"),
        "{text}"
    );
    assert!(!text.contains("greeter"), "{text}");
    let out = custos(&["releases", "list", r, "--tenant", "acme"]);
    assert!(!stdout(&out).contains("local@1.0.0"));
}

/// A catalog written before the marker existed is refused until an
/// explicit upgrade adopts it.
#[test]
fn an_unmarked_catalog_needs_an_explicit_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let (root, _, _) = catalog(dir.path());
    let r = root.to_str().unwrap();
    std::fs::remove_file(root.join("INITIALIZED")).unwrap();
    std::fs::remove_dir_all(root.join("lifecycle")).unwrap();
    // The lifecycle head remains: this catalog had lifecycle state and
    // lost it. The upgrade refuses it (corrupt), byte-untouched.
    let before = custos_fs::crash::image_of(&root).unwrap();
    let out = custos(&["releases", "upgrade", r]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(stderr(&out).contains("LIFECYCLE"), "{}", stderr(&out));
    assert_eq!(custos_fs::crash::image_of(&root).unwrap(), before);
    // Without the head it is a catalog written before lifecycle state.
    std::fs::remove_file(root.join("LIFECYCLE")).unwrap();
    let out = custos(&["releases", "list", r, "--tenant", "acme"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("upgrade"), "{}", stderr(&out));
    let out = custos(&["releases", "upgrade", r]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("2 releases verified"),
        "{}",
        stdout(&out)
    );
    let out = custos(&["releases", "upgrade", r]);
    assert!(
        stdout(&out).contains("already initialized"),
        "{}",
        stdout(&out)
    );
    let out = custos(&["releases", "list", r, "--tenant", "acme"]);
    assert!(stdout(&out).contains("2 release(s)"), "{}", stdout(&out));
}

/// Output into a closed pipe ends quietly (status 141, no panic); into a
/// full device, one line on stderr and status 1.
#[test]
fn every_releases_command_survives_a_closed_pipe_and_a_full_disk() {
    let dir = tempfile::tempdir().unwrap();
    let (root, a, _) = catalog(dir.path());
    let r = root.to_str().unwrap();
    let d = a.digest.to_string();
    let (m, c, k) = (
        a.manifest.to_str().unwrap(),
        a.component.to_str().unwrap(),
        a.contract.to_str().unwrap(),
    );
    // Writing commands too: an identical republication and a repeated
    // revocation write a report each time they run.
    let cases: Vec<Vec<&str>> = vec![
        vec![
            "releases",
            "publish",
            r,
            "--manifest",
            m,
            "--component",
            c,
            "--contract",
            k,
        ],
        vec!["releases", "revoke", r, "welcome@1.2.2", "--tenant", "acme"],
        vec![
            "releases",
            "retire",
            r,
            "welcome@1.2.2",
            "--tenant",
            "acme",
            "--json",
        ],
        vec!["releases", "list", r],
        vec!["releases", "list", r, "--tenant", "acme"],
        vec!["releases", "list", r, "--tenant", "acme", "--json"],
        vec!["releases", "show", r, &d],
        vec!["releases", "verify", r],
        vec!["releases", "verify", r, "--json"],
        vec!["releases", "upgrade", r],
    ];
    for args in &cases {
        let out = custos_into(args, closed_pipe());
        // The first revoke commits a change, and a lost report of a
        // committed change is 8; every other case changes nothing (an
        // identical publication, an unchanged retire, reads).
        let want = if args[1] == "revoke" { 8 } else { 141 };
        assert_eq!(out.status.code(), Some(want), "{args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
        let out = custos_into(args, full_device());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert_eq!(
            stderr(&out).lines().count(),
            1,
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

/// `custos releases list <root> --tenant <tenant>` with `extra` arguments.
fn list(root: &str, tenant: &str, extra: &[&str]) -> Output {
    let mut args = vec!["releases", "list", root, "--tenant", tenant];
    args.extend_from_slice(extra);
    custos(&args)
}

/// The continuation a text listing printed (`next page: --page-token …`).
fn next_page_token(out: &Output) -> String {
    stdout(out)
        .lines()
        .find_map(|l| l.strip_prefix("next page: --page-token "))
        .expect("a next page")
        .to_owned()
}

/// Every page of `releases list` with `size` rows per page, each a new
/// invocation continued by the previous page's cursor: the digests in
/// order and the number of pages.
fn list_pages(root: &str, size: &str) -> (Vec<String>, usize) {
    let mut digests = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut extra = vec!["--page-size", size, "--json"];
        if let Some(t) = &token {
            extra.extend(["--page-token", t.as_str()]);
        }
        let out = list(root, "acme", &extra);
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        pages += 1;
        for r in v["releases"].as_array().unwrap() {
            digests.push(
                r["descriptor"]["component_digest"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
        match v["next_page_token"].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => return (digests, pages),
        }
    }
}

/// `releases verify` over `n` releases shows bounded progress on stderr,
/// none on stdout.
fn verify_shows_bounded_progress(r: &str, n: usize) {
    let out = custos(&["releases", "verify", r]);
    assert!(out.status.success(), "{}", stderr(&out));
    let progress: Vec<String> = stderr(&out)
        .lines()
        .filter(|l| l.starts_with("releases verify: "))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        progress.first().map(String::as_str),
        Some(format!("releases verify: 0/{n} release directories").as_str())
    );
    assert_eq!(
        progress.last().map(String::as_str),
        Some(format!("releases verify: {n}/{n} release directories").as_str())
    );
    assert!(progress.len() <= 11, "{progress:?}");
    assert!(!stdout(&out).contains("release directories"));
}

#[test]
fn a_release_listing_continues_across_invocations_and_expires_on_any_change() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("catalog");
    let r = root.to_str().unwrap();
    let mut published = Vec::new();
    for n in 0..200u8 {
        let f = files(dir.path(), &format!("r{n}"), n);
        let out = publish(&root, &f, &[]);
        assert!(out.status.success(), "{}", stderr(&out));
        published.push(f.digest.to_string());
    }
    published.sort();
    // 200 releases, 17 per page: 12 pages, every digest exactly once, in
    // digest order, each page a fresh process.
    let (listed, pages) = list_pages(r, "17");
    assert_eq!(pages, 12);
    assert_eq!(listed, published);
    verify_shows_bounded_progress(r, 200);
    // The text form prints the same continuation.
    let out = list(r, "acme", &["--page-size", "17"]);
    let cursor = next_page_token(&out);
    assert!(cursor.starts_with("c1-"), "{cursor}");
    let next = |c: &str| list(r, "acme", &["--page-size", "17", "--page-token", c]);
    assert!(next(&cursor).status.success());
    // Another scope's cursor is invalid (2), never another tenant's page.
    let other = list(r, "other", &["--page-token", &cursor]);
    assert_eq!(other.status.code(), Some(2), "{}", stderr(&other));
    // A revocation between pages expires it: 4, re-list from the start.
    let out = custos(&["releases", "revoke", r, &published[0], "--tenant", "acme"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let expired = next(&cursor);
    assert_eq!(expired.status.code(), Some(4), "{}", stderr(&expired));
    assert!(stderr(&expired).contains("expired"), "{}", stderr(&expired));
    // So does a publication.
    let out = list(r, "acme", &["--page-size", "50"]);
    let cursor = next_page_token(&out);
    let f = files(dir.path(), "late", 250);
    assert!(publish(&root, &f, &[]).status.success());
    let expired = list(r, "acme", &["--page-size", "50", "--page-token", &cursor]);
    assert_eq!(expired.status.code(), Some(4), "{}", stderr(&expired));
    // A damaged cursor is a usage error.
    let damaged = list(r, "acme", &["--page-token", "c1-00"]);
    assert_eq!(damaged.status.code(), Some(2), "{}", stderr(&damaged));
}
