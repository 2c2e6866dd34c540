//! `custos deployments …` end to end through the binary, over a release
//! catalog published by `custos releases publish`: apply, resolve, get,
//! list, delete, revision; every bad input refused with the deployment
//! catalog byte-untouched.

#![cfg(feature = "fs")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/binary.rs"]
mod binary;
#[path = "support/release_inputs.rs"]
mod release_inputs;

use std::path::Path;
use std::process::Output;

use custos_core::release::Sha256;
use custos_fs::crash::image_of;

use binary::{closed_pipe, custos, custos_into, full_device, stderr, stdout};
use release_inputs::{component, CONTRACT};

/// Publishes one release into `dir/releases`; returns its digest.
fn release(dir: &Path) -> Sha256 {
    let comp = component(7);
    let digest = Sha256::of(&comp);
    let manifest = format!(
        r#"{{"name":"adder","version":"1.0.0","tenant":"acme","service":"calc","component_digest":"{digest}","exports":["add"]}}"#
    );
    std::fs::write(dir.join("m.json"), manifest).unwrap();
    std::fs::write(dir.join("c.wasm"), comp).unwrap();
    std::fs::write(dir.join("contract.json"), CONTRACT).unwrap();
    let out = custos(&[
        "releases",
        "publish",
        dir.join("releases").to_str().unwrap(),
        "--manifest",
        dir.join("m.json").to_str().unwrap(),
        "--component",
        dir.join("c.wasm").to_str().unwrap(),
        "--contract",
        dir.join("contract.json").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    digest
}

fn deployment(dir: &Path, name: &str, id: &str, release: &str, weight: u32) -> String {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            r#"{{"id":"{id}","tenant":"acme","service":"calc","release":"{release}","route_weight":{weight}}}"#
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

/// The catalog arguments of tenant `acme`'s deployment catalog in `dir`
/// (`dir/deployments`, its releases at `dir/releases`).
fn at(dir: &Path) -> String {
    format!(
        "{} --releases {} --tenant acme",
        dir.join("deployments").display(),
        dir.join("releases").display()
    )
}

/// Runs `custos deployments <line>`, the line split at whitespace (the
/// temporary paths hold none).
fn dep(line: &str) -> Output {
    let mut args = vec!["deployments"];
    args.extend(line.split_whitespace());
    custos(&args)
}

fn json_of(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_str(&stdout(o)).unwrap()
}

#[test]
fn apply_resolve_get_list_delete_and_revision() {
    let tmp = tempfile::tempdir().unwrap();
    let digest = release(tmp.path());
    let at = at(tmp.path());
    assert!(!at.contains("  "));
    let blue = deployment(tmp.path(), "blue.json", "blue", &digest.to_string(), 3);
    let out = dep(&format!(
        "apply {at} --manifest {blue} --expected-generation 0"
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("applied blue generation 1"),
        "{}",
        stdout(&out)
    );

    let v = json_of(&dep(&format!(
        "resolve {at} --service calc --contract add --function add --routing-key k --json"
    )));
    assert_eq!(v["deployment_id"], "blue");
    assert_eq!(v["release"], digest.to_string());

    let rev = json_of(&dep(&format!("revision --manifest {blue} --json")));
    assert_eq!(rev["revision"], v["revision"]);
    assert!(rev["canonical"]
        .as_str()
        .unwrap()
        .contains(r#""route_weight":1"#));

    json_of(&dep(&format!("get {at} blue --json")));
    let other = at.replace("--tenant acme", "--tenant other");
    assert_eq!(dep(&format!("get {other} blue")).status.code(), Some(3));

    let green = deployment(tmp.path(), "green.json", "green", &digest.to_string(), 1);
    assert!(dep(&format!("apply {at} --manifest {green}"))
        .status
        .success());
    let page = json_of(&dep(&format!("list {at} --page-size 1 --json")));
    assert_eq!(page["deployments"][0]["manifest"]["id"], "blue");
    assert!(page["next_page_token"].is_string());

    let out = dep(&format!("delete {at} green --expected-generation 2"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("deleted green (was generation 2; catalog generation 3)"),
        "{}",
        stdout(&out)
    );
}

/// The seam between the two catalogs, as a user meets it: tenant `other`
/// cannot deploy (or resolve) tenant `acme`'s release, and is told exactly
/// what it would be told of a digest that exists nowhere; a revoked
/// release is refused with its own reason when applied, not later as a
/// contract mismatch.
#[test]
fn another_tenants_release_is_never_deployed() {
    let tmp = tempfile::tempdir().unwrap();
    let digest = release(tmp.path());
    let releases = tmp.path().join("releases");
    let root = tmp.path().join("deployments");
    let at = |tenant: &str| {
        format!(
            "{} --releases {} --tenant {tenant}",
            root.display(),
            releases.display()
        )
    };
    let as_other = |name: &str, release: &str| {
        let path = tmp.path().join(name);
        std::fs::write(
            &path,
            format!(r#"{{"id":"steal","tenant":"other","service":"calc","release":"{release}","route_weight":1}}"#),
        )
        .unwrap();
        path.display().to_string()
    };
    let steal = as_other("s.json", &digest.to_string());
    let out = dep(&format!(
        "apply {} --manifest {steal} --expected-generation 0",
        at("other")
    ));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let nothing = Sha256::of(b"nothing");
    let absent = as_other("n.json", &nothing.to_string());
    let out_absent = dep(&format!(
        "apply {} --manifest {absent} --expected-generation 0",
        at("other")
    ));
    assert_eq!(out_absent.status.code(), Some(3));
    assert_eq!(
        stderr(&out).replace(&digest.to_string(), "D"),
        stderr(&out_absent).replace(&nothing.to_string(), "D"),
        "another tenant's release answers as an absent one"
    );
    assert!(
        stderr(&out).contains("release-not-found"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("acme"), "{}", stderr(&out));
    // The refused apply created no catalog; with one holding acme's own
    // deployment, `other` still resolves nothing.
    let own = deployment(tmp.path(), "own.json", "own", &digest.to_string(), 1);
    assert!(dep(&format!("apply {} --manifest {own}", at("acme")))
        .status
        .success());
    let out = dep(&format!(
        "resolve {} --service calc --contract add --function add",
        at("other")
    ));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("route-unavailable"),
        "{}",
        stderr(&out)
    );

    // acme's own deployment goes in; after a revocation, a new apply of
    // the release is refused as revoked.
    let blue = deployment(tmp.path(), "blue.json", "blue", &digest.to_string(), 1);
    assert!(dep(&format!("apply {} --manifest {blue}", at("acme")))
        .status
        .success());
    let out = custos(&[
        "releases",
        "revoke",
        releases.to_str().unwrap(),
        &digest.to_string(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let green = deployment(tmp.path(), "green.json", "green", &digest.to_string(), 1);
    let out = dep(&format!("apply {} --manifest {green}", at("acme")));
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert!(stderr(&out).contains("release-revoked"), "{}", stderr(&out));
}

#[test]
fn every_bad_input_is_refused_with_the_catalog_byte_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let digest = release(tmp.path());
    let root = tmp.path().join("deployments");
    let at = at(tmp.path());
    let blue = deployment(tmp.path(), "blue.json", "blue", &digest.to_string(), 3);
    assert!(dep(&format!("apply {at} --manifest {blue}"))
        .status
        .success());
    let before = image_of(&root).unwrap();

    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, r#"{"id":"default","tenant":"acme"}"#).unwrap();
    let bad = bad.display();
    let nothing = Sha256::of(b"nothing").to_string();
    let unknown = deployment(tmp.path(), "unknown.json", "red", &nothing, 1);
    let weight = deployment(tmp.path(), "weight.json", "red", &digest.to_string(), 0);
    let beta = at.replace("--tenant acme", "--tenant beta");
    // One directory named as both catalogs: refused before either opens
    // (each holds a lock; the second open would wait on this command's
    // own first).
    let releases = tmp.path().join("releases");
    let same = format!(
        "{} --releases {} --tenant acme",
        releases.display(),
        releases.display()
    );
    // The two catalogs' paths swapped: each is the other kind, not
    // corruption.
    let swapped = format!(
        "{} --releases {} --tenant acme",
        releases.display(),
        root.display()
    );
    let cases = [
        (
            format!("apply {swapped} --manifest {blue}"),
            2,
            "NotThisKind: this directory is a deployment catalog, not a release catalog",
        ),
        (
            format!("--wait 30 apply {same} --manifest {blue}"),
            2,
            "named as both the deployment catalog and the release catalog",
        ),
        (
            format!("list {same}"),
            2,
            "named as both the deployment catalog and the release catalog",
        ),
        (
            format!("apply {at} --manifest {bad}"),
            2,
            "invalid-deployment",
        ),
        (
            format!("apply {at} --manifest {weight}"),
            2,
            "route weight 0",
        ),
        (
            format!("apply {at} --manifest {unknown}"),
            3,
            "release-not-found",
        ),
        (
            format!("apply {at} --manifest {blue} --expected-generation 7"),
            4,
            "deployment-generation-conflict",
        ),
        (
            format!("apply {beta} --manifest {blue}"),
            6,
            "deployment-tenant-mismatch",
        ),
        (format!("delete {at} nope"), 3, "deployment-not-found"),
        (
            format!("list {at} --page-token zz"),
            2,
            "invalid-deployment-page-token",
        ),
        (
            format!("list {at} --page-size 0"),
            2,
            "invalid-deployment-page-size",
        ),
        (
            format!("resolve {at} --service calc --route nope --contract add --function add"),
            3,
            "route-unavailable",
        ),
        (
            format!("resolve {at} --service calc --contract add --function sub"),
            3,
            "incompatible-contract",
        ),
    ];
    for (line, code, needle) in cases {
        let out = dep(&line);
        assert_eq!(out.status.code(), Some(code), "{line}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{line}: {}", stderr(&out));
        assert_eq!(
            image_of(&root).unwrap(),
            before,
            "{line} changed the catalog"
        );
    }
}

/// Runs `custos deployments <line>` with stdout into `stdout`.
fn dep_into(line: &str, stdout: impl Into<std::process::Stdio>) -> Output {
    let mut args = vec!["deployments"];
    args.extend(line.split_whitespace());
    custos_into(&args, stdout)
}

/// Every command, writing ones included (an unconditional apply reports
/// each time), ends quietly on a closed pipe (141) and with one line on a
/// full device (1): never a panic.
#[test]
fn every_deployments_command_survives_a_closed_pipe_and_a_full_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let digest = release(tmp.path());
    let at = at(tmp.path());
    let blue = deployment(tmp.path(), "blue.json", "blue", &digest.to_string(), 3);
    assert!(dep(&format!("apply {at} --manifest {blue}"))
        .status
        .success());
    let lines = [
        format!("apply {at} --manifest {blue}"),
        format!("apply {at} --manifest {blue} --json"),
        format!("get {at} blue"),
        format!("list {at} --json"),
        format!("resolve {at} --service calc --contract add --function add"),
        format!("revision --manifest {blue}"),
    ];
    for line in &lines {
        // A committed apply whose report is lost says so: 8, never the
        // status of a command that changed nothing.
        let committed = line.starts_with("apply");
        let out = dep_into(line, closed_pipe());
        let want = if committed { 8 } else { 141 };
        assert_eq!(out.status.code(), Some(want), "{line}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("panicked"),
            "{line}: {}",
            stderr(&out)
        );
        let out = dep_into(line, full_device());
        let want = if committed { 8 } else { 1 };
        assert_eq!(out.status.code(), Some(want), "{line}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("panicked"),
            "{line}: {}",
            stderr(&out)
        );
        assert_eq!(stderr(&out).lines().count(), 1, "{line}: {}", stderr(&out));
    }
}

/// 2,500 deployments, applied through the library in batches, then listed
/// page by page through the binary — a new process, so a new open of the
/// catalog, for every page: every id exactly once, in id order. A write
/// between two pages expires the continuation (exit 4, "list again"),
/// never a wrong page.
#[test]
fn a_listing_continues_across_invocations_and_expires_on_a_write() {
    use std::sync::Arc;

    use custos_core::deployment::manifest::DeploymentManifest;
    use custos_core::deployment::state::{Mutation, Request};
    use custos_core::release::bounds::Bounds;
    use custos_core::release::contract::MagicOnly;
    use custos_fs::deployment::{DeploymentRepository, ReleaseCatalog};
    use custos_fs::release::ReleaseRepository;
    use custos_fs::{Access, RealFs};

    let tmp = tempfile::tempdir().unwrap();
    let digest = release(tmp.path());
    let root = tmp.path().join("deployments");
    let ids: Vec<String> = (0..2_500).map(|i| format!("d{i}")).collect();
    {
        let releases = ReleaseRepository::open_as(
            Access::Read,
            RealFs,
            &tmp.path().join("releases"),
            Bounds::default(),
            Arc::new(MagicOnly),
        )
        .unwrap();
        let repo = DeploymentRepository::open(
            RealFs,
            &root,
            Arc::new(ReleaseCatalog(Arc::new(releases))),
            Access::Write,
        )
        .unwrap();
        for chunk in ids.chunks(500) {
            let manifests: Vec<DeploymentManifest> = chunk
                .iter()
                .map(|id| {
                    serde_json::from_str(&format!(
                        r#"{{"id":"{id}","tenant":"acme","service":"calc","release":"{digest}","route_weight":1}}"#
                    ))
                    .unwrap()
                })
                .collect();
            repo.mutate(Request {
                tenant: Some("acme".into()),
                mutation: Mutation::ApplyMany { manifests },
                compiled_at: 0,
                operation: None,
            })
            .unwrap();
        }
    }
    let at = format!(
        "{} --releases {} --tenant acme --page-size 173",
        root.display(),
        tmp.path().join("releases").display()
    );
    let mut listed: Vec<String> = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let line = match &token {
            Some(t) => format!("list {at} --json --page-token {t}"),
            None => format!("list {at} --json"),
        };
        let page = json_of(&dep(&line));
        pages += 1;
        for d in page["deployments"].as_array().unwrap() {
            listed.push(d["manifest"]["id"].as_str().unwrap().to_owned());
        }
        match page["next_page_token"].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
    }
    let mut want = ids.clone();
    want.sort();
    assert_eq!(pages, 15);
    assert_eq!(listed, want, "every id exactly once, in id order");

    // A write between two pages: the continuation expires.
    let first = json_of(&dep(&format!("list {at} --json")));
    let next = first["next_page_token"].as_str().unwrap().to_owned();
    let late = deployment(tmp.path(), "late.json", "a-late", &digest.to_string(), 1);
    let out = dep(&format!(
        "apply {} --releases {} --tenant acme --manifest {late}",
        root.display(),
        tmp.path().join("releases").display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = dep(&format!("list {at} --page-token {next}"));
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("expired-deployment-page-token"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("list again from the first page"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stdout(&out), "", "no rows of a page that cannot be right");
}

#[test]
fn a_batch_applies_atomically_with_bounded_progress_on_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let digest = release(tmp.path()).to_string();
    let root = tmp.path().join("deployments");
    let at = at(tmp.path());
    // 150 manifests in one call: one catalog generation, all applied.
    let manifests: Vec<String> = (0..150)
        .map(|i| {
            deployment(
                tmp.path(),
                &format!("d{i}.json"),
                &format!("d{i:03}"),
                &digest,
                1,
            )
        })
        .collect();
    let flags: String = manifests
        .iter()
        .map(|m| format!(" --manifest {m}"))
        .collect();
    let out = dep(&format!("apply {at}{flags}"));
    assert!(out.status.success(), "{}", stderr(&out));
    let applied = stdout(&out)
        .lines()
        .filter(|l| l.starts_with("applied d"))
        .count();
    assert_eq!(applied, 150, "{}", stdout(&out));
    assert!(
        stdout(&out).contains("(catalog generation 1)"),
        "{}",
        stdout(&out)
    );
    // Progress is stderr's, bounded (a line at the start and per tenth).
    let progress: Vec<_> = stderr(&out)
        .lines()
        .filter(|l| l.starts_with("deployments apply: "))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        progress.first().map(String::as_str),
        Some("deployments apply: 0/150 manifests read")
    );
    assert_eq!(
        progress.last().map(String::as_str),
        Some("deployments apply: 150/150 manifests read")
    );
    assert!(progress.len() <= 11, "{progress:?}");
    assert!(!stdout(&out).contains("manifests read"));

    // A batch with one bad manifest applies none of it and changes nothing.
    let before = image_of(&root).unwrap();
    let good = deployment(tmp.path(), "new.json", "fresh", &digest, 1);
    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, r#"{"id":"x"}"#).unwrap();
    let out = dep(&format!(
        "apply {at} --manifest {good} --manifest {}",
        bad.display()
    ));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(image_of(&root).unwrap(), before);
    // A precondition names one deployment: refused with two.
    let out = dep(&format!(
        "apply {at} --manifest {good} --manifest {good} --expected-generation 0"
    ));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--expected-generation"),
        "{}",
        stderr(&out)
    );
    assert_eq!(image_of(&root).unwrap(), before);
}
