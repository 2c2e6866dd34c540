//! `custos releases publish|list|show|verify` end to end through the
//! binary: a release published from files is listed (table and JSON),
//! shown by digest and by reference with its verified contract, survives a
//! verifying reopen; an identical republication is a no-op; bad input
//! exits non-zero with a clear message and publishes nothing.

#![cfg(feature = "fs")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use custos_core::release::Sha256;

fn custos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(args)
        .output()
        .expect("custos runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

struct Files {
    manifest: PathBuf,
    component: PathBuf,
    contract: PathBuf,
    digest: Sha256,
}

/// The contract of [`component`]: one exported function `add`.
const CONTRACT: &str = r#"{"interfaces":[{"name":"add","functions":[{"name":"add","params":[{"name":"a","ty":"u32"},{"name":"b","ty":"u32"}],"results":["u32"]}]}]}"#;

/// Component `n`: with the `wasm` feature a real component (the Wasm
/// inspector validates it and extracts [`CONTRACT`]); without it, bytes
/// with the Wasm magic (all the trusted-local inspector checks).
fn component(n: u8) -> Vec<u8> {
    #[cfg(feature = "wasm")]
    let bytes = wat::parse_str(format!(
        r#"(component
  (core module $m
    (func (export "add") (param i32 i32) (result i32)
      local.get 0 local.get 1 i32.add i32.const {n} i32.add))
  (core instance $i (instantiate $m))
  (func $add (param "a" u32) (param "b" u32) (result u32)
    (canon lift (core func $i "add")))
  (export "add" (func $add)))"#
    ))
    .unwrap();
    #[cfg(not(feature = "wasm"))]
    let bytes = {
        let mut c = b"\0asm\x0d\0\x01\0".to_vec();
        c.extend(std::iter::repeat_n(n, 100));
        c
    };
    bytes
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
    let out = custos(&[
        "releases",
        "list",
        r,
        "--tenant",
        "acme",
        "--service",
        "greeter",
        "--json",
    ]);
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
    let out = custos(&["releases", "show", r, "welcome@1.2.2", "--json"]);
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
    // Debris under releases/ is counted, never fatal; .tmp is cleared.
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
    assert!(!root.join(".tmp").join("abandoned").exists());
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
    let out = publish(&root, &bad, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("component_digest"),
        "{}",
        stderr(&out)
    );

    // A contract that does not parse.
    std::fs::write(&a.contract, b"{\"interfaces\": 7}").unwrap();
    let out = publish(&root, &a, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is not a contract"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&a.contract, CONTRACT).unwrap();

    // A contract whose exports are not the manifest's.
    std::fs::write(&a.contract, br#"{"interfaces":[]}"#).unwrap();
    let out = publish(&root, &a, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("InvalidContract"), "{}", stderr(&out));
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
    let out = publish(&root, &bad, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot read the contract"),
        "{}",
        stderr(&out)
    );

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
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).contains("InvalidContract"), "{}", stderr(&out));
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
