//! `custos catalog discover|show` end to end: a control catalog written by
//! the SQLite shell is listed (destroyed worlds included) and described,
//! as a table and as JSON; a missing catalog or world exits 3 and creates
//! nothing.

#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};

use custos_core::identity::StorageIdentity;
use custos_core::schema::{Field, LogicalType, Schema};
use custos_core::world::{
    ControlCatalog, Request, Signature, WorldIdentity, WorldRecord, WriterMode,
};
use custos_sqlite::control::SqliteControlCatalog;

fn custos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(args)
        .output()
        .expect("custos runs")
}

fn seed(uri: &Path) -> Signature {
    let id = StorageIdentity::new(uri.to_str().unwrap(), "ns", "iceberg").unwrap();
    let c = SqliteControlCatalog::open_for(&id).unwrap();
    let live = WorldRecord::active(
        WorldIdentity {
            world_id: "w-live".into(),
            name: "the live one".into(),
            run_id: Some("run-7".into()),
            parent_world_id: None,
        },
        WriterMode::Resumable,
    );
    c.register(&live).unwrap();
    let schema = Schema::new(vec![
        Field::new(
            "entity",
            LogicalType::Int {
                bits: 64,
                signed: true,
            },
            false,
        ),
        Field::new(
            "Score",
            LogicalType::Int {
                bits: 64,
                signed: true,
            },
            true,
        ),
    ]);
    let sig = Signature::new(vec!["Score".into()], schema, "t_score");
    c.apply(&Request::RegisterSignature {
        world_id: "w-live".into(),
        signature: sig.clone(),
    })
    .unwrap();
    let gone = WorldRecord::active(
        WorldIdentity::new("w-gone", "retired"),
        WriterMode::CleanupOnly,
    );
    c.register(&gone).unwrap();
    c.retire(&gone).unwrap();
    sig
}

fn files(dir: &Path) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.display().to_string());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn discover_lists_every_world_including_destroyed() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let uri = dir.path().to_str().unwrap();
    let out = custos(&["catalog", "discover", uri, "--namespace", "ns", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["storage"]["namespace"], "ns");
    assert_eq!(v["storage"]["backend"], "iceberg");
    assert!(v["storage"]["catalog"]
        .as_str()
        .unwrap()
        .ends_with("ns/.custos-catalog-iceberg.db"));
    let worlds = v["worlds"].as_array().unwrap();
    assert_eq!(worlds.len(), 2);
    assert_eq!(worlds[0]["identity"]["world_id"], "w-gone");
    assert_eq!(worlds[0]["status"], "destroyed");
    assert_eq!(worlds[0]["writer_mode"], "cleanup_only");
    assert_eq!(worlds[1]["identity"]["world_id"], "w-live");
    assert_eq!(worlds[1]["status"], "active");
    assert_eq!(worlds[1]["identity"]["run_id"], "run-7");

    // The same through a file:// spelling and as a table.
    let out = custos(&[
        "catalog",
        "discover",
        &format!("file://{uri}/"),
        "--namespace",
        "ns",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("w-gone") && text.contains("destroyed"),
        "{text}"
    );
    assert!(text.contains("w-live") && text.contains("run-7"), "{text}");
    assert!(text.contains("2 world(s)"), "{text}");
}

#[test]
fn show_prints_the_descriptor_and_signatures() {
    let dir = tempfile::tempdir().unwrap();
    let sig = seed(dir.path());
    let uri = dir.path().to_str().unwrap();
    let out = custos(&[
        "catalog",
        "show",
        uri,
        "w-live",
        "--namespace",
        "ns",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["world"]["record"]["identity"]["name"], "the live one");
    let sigs = v["world"]["signatures"].as_array().unwrap();
    assert_eq!(sigs.len(), 1);
    assert_eq!(sigs[0]["table_id"], "t_score");
    assert_eq!(sigs[0]["fingerprint"], sig.fingerprint.as_str());
    assert_eq!(sigs[0]["components"], serde_json::json!(["Score"]));

    let out = custos(&["catalog", "show", uri, "w-live", "--namespace", "ns"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("t_score") && text.contains(&sig.fingerprint),
        "{text}"
    );
    assert!(text.contains("column      entity"), "{text}");

    // A destroyed world is still described.
    let out = custos(&[
        "catalog",
        "show",
        uri,
        "w-gone",
        "--namespace",
        "ns",
        "--json",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["world"]["record"]["status"], "destroyed");
}

#[test]
fn not_found_is_a_clean_exit_code_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap();
    let before = files(dir.path());
    for args in [
        vec!["catalog", "discover", uri],
        vec![
            "catalog",
            "discover",
            uri,
            "--namespace",
            "nowhere",
            "--json",
        ],
        vec!["catalog", "show", uri, "w-live"],
    ] {
        let out = custos(&args);
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("NotFound: no control catalog"), "{err}");
        assert!(out.stdout.is_empty());
    }
    assert_eq!(files(dir.path()), before, "a miss created files");

    seed(dir.path());
    let out = custos(&["catalog", "show", uri, "w-nobody", "--namespace", "ns"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NotFound: world w-nobody"));
    // A malformed identity is a usage error.
    let out = custos(&["catalog", "discover", uri, "--namespace", "a/b"]);
    assert_eq!(out.status.code(), Some(2));
}
