//! `custos schema <kind>` and the checked-in `docs/schemas/`: the files are
//! exactly what the binary prints (`CUSTOS_BLESS_SCHEMAS=1` rewrites them),
//! and each schema agrees with its decoder on real documents — every valid
//! sample is accepted by both, every invalid one refused by both. With the
//! `migrate` feature, the plan and receipt of a real migration (printed and
//! written) are validated too.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(feature = "migrate")]
#[path = "support/fixture.rs"]
#[allow(dead_code)]
mod fixture;

#[cfg(feature = "migrate")]
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;

use custos_core::deployment::manifest::DeploymentManifest;
use custos_core::migration::{
    Activation, ActivityDisposition, ArtifactPlan, ArtifactReceipt, Classification, ColdReceipt,
    ControlPlan, ControlReceipt, Digest, Name, NormalizedUri, ObjectFacts, Plan, Receipt, Resume,
    StorageIdentity, StoredReceipt, TableFacts, TablePlan, TableReceipt, WorldPlan,
};
use custos_core::release::contract::Contract;
use custos_core::release::manifest::Manifest;
use custos_core::release::Sha256;
use serde_json::{json, Value};

const KINDS: [&str; 5] = [
    "release-manifest",
    "contract",
    "deployment-manifest",
    "migration-plan",
    "receipt",
];

/// What `custos schema <kind>` prints.
fn printed(kind: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["schema", kind])
        .output()
        .expect("custos runs");
    assert!(
        out.status.success(),
        "custos schema {kind}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the schema is UTF-8")
}

fn checked_in(kind: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/schemas")
        .join(format!("{kind}.schema.json"))
}

#[test]
fn checked_in_schemas_are_what_the_binary_prints() {
    let bless = std::env::var("CUSTOS_BLESS_SCHEMAS").is_ok_and(|v| v == "1");
    let mut stale = Vec::new();
    for kind in KINDS {
        let text = printed(kind);
        assert!(
            text.ends_with("}\n"),
            "{kind}: one JSON document and a newline"
        );
        let path = checked_in(kind);
        if bless {
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(format!("docs/schemas/{kind}.schema.json"));
        }
    }
    assert!(
        stale.is_empty(),
        "these checked-in schemas differ from `custos schema <kind>`: {stale:?}; \
         re-run with CUSTOS_BLESS_SCHEMAS=1 (`CUSTOS_BLESS_SCHEMAS=1 cargo test -p custos \
         --test schema`) to rewrite them, and review the diff"
    );
}

#[test]
fn every_schema_is_a_valid_draft_2020_12_schema() {
    for kind in KINDS {
        let schema: Value = serde_json::from_str(&printed(kind)).unwrap();
        assert_eq!(
            schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{kind}"
        );
        if let Err(e) = jsonschema::meta::validate(&schema) {
            panic!("{kind}: not a valid schema: {e}");
        }
    }
}

/// Holds the schema of `kind` and `decode` (the real decoder, `Ok` when it
/// accepts) to one verdict on each sample: `valid` ones accepted by both,
/// the others refused by both.
fn agree(
    kind: &str,
    decode: impl Fn(&Value) -> Result<(), String>,
    samples: &[(&str, Value, bool)],
) {
    let schema: Value = serde_json::from_str(&printed(kind)).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for (what, doc, valid) in samples {
        let errors: Vec<String> = validator.iter_errors(doc).map(|e| e.to_string()).collect();
        assert_eq!(
            errors.is_empty(),
            *valid,
            "{kind} schema on {what}: {errors:?}\n{doc:#}"
        );
        let decoded = decode(doc);
        assert_eq!(
            decoded.is_ok(),
            *valid,
            "{kind} decoder on {what}: {decoded:?}\n{doc:#}"
        );
    }
}

/// A copy of `doc` with `f` applied.
fn with(doc: &Value, f: impl FnOnce(&mut Value)) -> Value {
    let mut d = doc.clone();
    f(&mut d);
    d
}

fn digest() -> String {
    Sha256::of(b"greeter").to_string()
}

#[test]
fn release_manifests() {
    let good = json!({"name":"greeter","version":"1.2.1","tenant":"acme","service":"greeter",
        "component_digest": digest(),"exports":["add"]});
    let hex = Sha256::of(b"greeter").hex();
    let decode = |doc: &Value| {
        Manifest::parse(&serde_json::to_vec(doc).unwrap(), 4 << 20)
            .map(drop)
            .map_err(|e| e.to_string())
    };
    let local = json!({"name":"n","version":"1","component_digest": digest(),"exports":[]});
    agree(
        "release-manifest",
        decode,
        &[
            ("a tenant's release", good.clone(), true),
            ("a trusted-local release", local.clone(), true),
            (
                "a null tenant",
                with(&local, |d| d["tenant"] = Value::Null),
                true,
            ),
            (
                "a null service, no tenant",
                with(&local, |d| d["service"] = Value::Null),
                true,
            ),
            (
                "exports in any order",
                with(&good, |d| d["exports"] = json!(["b:x/y", "a@1"])),
                true,
            ),
            (
                "a reference where a digest goes",
                json!({"name":"greeter","version":"1.2.1",
                "tenant":"acme","service":"greeter","release":"x@1","exports":["add"]}),
                false,
            ),
            (
                "no exports",
                with(&good, |d| {
                    drop(d.as_object_mut().unwrap().remove("exports"))
                }),
                false,
            ),
            (
                "an upper-case digest",
                with(&good, |d| {
                    d["component_digest"] = json!(format!("sha256:{}", hex.to_uppercase()))
                }),
                false,
            ),
            (
                "a digest without its prefix",
                with(&good, |d| d["component_digest"] = json!(hex)),
                false,
            ),
            (
                "a short digest",
                with(&good, |d| d["component_digest"] = json!(&digest()[..70])),
                false,
            ),
            (
                "an upper-case name",
                with(&good, |d| d["name"] = json!("Greeter")),
                false,
            ),
            (
                "a name of 129",
                with(&good, |d| d["name"] = json!("g".repeat(129))),
                false,
            ),
            (
                "an empty name",
                with(&good, |d| d["name"] = json!("")),
                false,
            ),
            (
                "a version with a space",
                with(&good, |d| d["version"] = json!("1 0")),
                false,
            ),
            (
                "a version of 65",
                with(&good, |d| d["version"] = json!("1".repeat(65))),
                false,
            ),
            (
                "a service without a tenant",
                with(&local, |d| d["service"] = json!("s")),
                false,
            ),
            (
                "a service, a null tenant",
                with(&good, |d| d["tenant"] = Value::Null),
                false,
            ),
            (
                "an export named twice",
                with(&good, |d| d["exports"] = json!(["add", "add"])),
                false,
            ),
            (
                "an export with a space",
                with(&good, |d| d["exports"] = json!(["a b"])),
                false,
            ),
            (
                "an empty export",
                with(&good, |d| d["exports"] = json!([""])),
                false,
            ),
            (
                "1025 exports",
                with(&good, |d| {
                    d["exports"] = (0..1025).map(|i| json!(format!("e{i}"))).collect()
                }),
                false,
            ),
            (
                "an unknown field",
                with(&good, |d| d["x"] = json!(1)),
                false,
            ),
        ],
    );
}

#[test]
fn contracts() {
    let good = json!({"interfaces":[{"name":"add","functions":[{"name":"add","params":[
        {"name":"a","ty":"u32"},{"name":"b","ty":"u32"}],"results":["u32"]}]}]});
    let every_type = json!({"interfaces":[{"name":"api","docs":"the api","functions":[{
        "name":"f","docs":null,"params":[{"name":"x","ty":{"record":[
            {"name":"a","ty":{"list":"string"}},
            {"name":"b","ty":{"option":{"tuple":["bool","s8","u8","s16","u16","s32","s64","u64","f32","f64","char"]}}},
            {"name":"c","ty":{"variant":[{"name":"none"},{"name":"nil","ty":null},{"name":"some","ty":{"enum":["x","y"]}}]}},
            {"name":"d","ty":{"flags":["r","w"]}},
            {"name":"e","ty":{"own":"file"}},
            {"name":"f","ty":{"borrow":"file"}}]}}],
        "results":[{"result":{}},{"result":{"ok":"u8"}},{"result":{"ok":null,"err":"string"}}]}]}]});
    let decode = |doc: &Value| {
        let c: Contract = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
        c.shape().check().map_err(|e| e.to_string())
    };
    let ty = |t: Value| {
        with(&good, |d| {
            d["interfaces"][0]["functions"][0]["results"] = json!([t])
        })
    };
    agree(
        "contract",
        decode,
        &[
            ("one function", good.clone(), true),
            ("every type", every_type.clone(), true),
            ("no interfaces", json!({"interfaces":[]}), true),
            ("no interfaces field", json!({}), false),
            ("an unknown type", ty(json!("u128")), false),
            ("a type spelt in upper case", ty(json!("U32")), false),
            (
                "a type with two tags",
                ty(json!({"list":"u8","option":"u8"})),
                false,
            ),
            ("a list of nothing", ty(json!({"list":null})), false),
            (
                "a result with a third branch",
                ty(json!({"result":{"ok":"u8","other":"u8"}})),
                false,
            ),
            (
                "a field without a type",
                ty(json!({"record":[{"name":"a"}]})),
                false,
            ),
            (
                "a function without results",
                with(&good, |d| {
                    drop(
                        d["interfaces"][0]["functions"][0]
                            .as_object_mut()
                            .unwrap()
                            .remove("results"),
                    )
                }),
                false,
            ),
            (
                "an unknown function field",
                with(&good, |d| {
                    d["interfaces"][0]["functions"][0]["doc"] = json!("x")
                }),
                false,
            ),
            (
                "a parameter type as a number",
                with(&good, |d| {
                    d["interfaces"][0]["functions"][0]["params"][0]["ty"] = json!(32)
                }),
                false,
            ),
        ],
    );
}

#[test]
fn deployment_manifests() {
    let d = digest();
    // As shells/cli/tests/deployments.rs applies them, and a full one.
    let blue = json!({"id":"blue","tenant":"acme","service":"calc","release": d,"route_weight":3});
    let canary = json!({"id":"canary","tenant":"acme","namespace":"prod","service":"api","release": d,
        "route_weight":1,"grants":["kv:write","kv:read"],
        "budgets":{"timeout_millis":30000,"memory_bytes":67108864,"cpu_millis":5,"max_concurrency":9007199254740991u64},
        "labels":{"team":"edge","stage":"canary"},"annotations":{"note":"dormant until invoked"},
        "availability":{"min_instances":1,"max_instances":4},
        "placement":{"zones":["eu-west-1b","eu-west-1a"],"pool":"edge"}});
    let set = |k: &'static str, v: Value| with(&blue, move |m| m[k] = v);
    let decode = |doc: &Value| {
        DeploymentManifest::decode(&serde_json::to_vec(doc).unwrap())
            .map(drop)
            .map_err(|e| e.to_string())
    };
    let hex = Sha256::of(b"greeter").hex();
    agree(
        "deployment-manifest",
        decode,
        &[
            ("the tests' blue", blue.clone(), true),
            ("every field", canary.clone(), true),
            (
                "an upper-case release digest",
                set("release", json!(format!("sha256:{}", hex.to_uppercase()))),
                true,
            ),
            ("an id of 1024", set("id", json!("i".repeat(1024))), true),
            ("the reserved id", set("id", json!("default")), false),
            ("an id of 1025", set("id", json!("i".repeat(1025))), false),
            ("an id starting with '-'", set("id", json!("-x")), false),
            ("a release reference", set("release", json!("x@1")), false),
            (
                "an upper-case prefix",
                set("release", json!(format!("SHA256:{hex}"))),
                false,
            ),
            (
                "no release",
                with(&blue, |m| {
                    drop(m.as_object_mut().unwrap().remove("release"))
                }),
                false,
            ),
            ("route weight 0", set("route_weight", json!(0)), false),
            (
                "route weight 10001",
                set("route_weight", json!(10_001)),
                false,
            ),
            (
                "a grant twice",
                set("grants", json!(["kv:read", "kv:read"])),
                false,
            ),
            (
                "65 grants",
                set("grants", (0..65).map(|i| json!(format!("g{i}"))).collect()),
                false,
            ),
            (
                "a budget of 0",
                set("budgets", json!({"memory_bytes":0})),
                false,
            ),
            (
                "a budget of 2^53",
                set("budgets", json!({"cpu_millis":9007199254740992u64})),
                false,
            ),
            (
                "an unknown budget",
                set("budgets", json!({"disk_bytes":1})),
                false,
            ),
            (
                "no instances at most",
                set("availability", json!({"max_instances":0})),
                false,
            ),
            (
                "10001 instances",
                set("availability", json!({"max_instances":10_001})),
                false,
            ),
            (
                "a label key with a space",
                set("labels", json!({"a b":"c"})),
                false,
            ),
            (
                "a label value of 1025",
                set("labels", json!({"a":"v".repeat(1025)})),
                false,
            ),
            (
                "an annotation value of 4097",
                set("annotations", json!({"a":"v".repeat(4097)})),
                false,
            ),
            (
                "65 labels",
                set(
                    "labels",
                    (0..65).map(|i| (format!("k{i}"), json!("v"))).collect(),
                ),
                false,
            ),
            ("an empty namespace", set("namespace", json!("")), false),
            ("an unknown field", set("extra", json!(1)), false),
        ],
    );
}

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn uri(s: &str) -> NormalizedUri {
    NormalizedUri::parse(s).unwrap()
}

/// A plan that passes `Plan::check`: two tables (one relocated), one
/// World, one object.
fn sample_plan() -> Plan {
    let identity = |u: &str| StorageIdentity {
        uri: uri(u),
        namespace: name("default"),
        backend: name("iceberg"),
    };
    let facts = |seed: &[u8]| TableFacts {
        snapshot: 7,
        schema_fingerprint: Digest::of(b"schema"),
        metadata_fingerprint: Digest::of(b"metadata"),
        rows: 300,
        content_digest: Digest::of(seed),
    };
    let plan = Plan {
        format: 1,
        migration_id: name("m1"),
        source: identity("file:///data/src"),
        destination: identity("s3://bucket.example:9000/warehouse/a.b/..c"),
        source_artifact_root: uri("file:///data/src/default/.custos-artifacts"),
        destination_artifact_root: uri("file:///data/dst/default/.custos-artifacts"),
        control: ControlPlan {
            snapshot_digest: Digest::of(b"control"),
            records: 3,
        },
        worlds: vec![WorldPlan {
            world: name("w-live"),
            source_epoch: 3,
            manifest_writer_epochs: vec![1, 2],
            resumable: true,
        }],
        tables: vec![
            TablePlan {
                name: name("artifact_files"),
                classification: Classification::ArtifactFiles,
                source: facts(b"files"),
                destination_content_digest: Digest::of(b"relocated"),
            },
            TablePlan {
                name: name("signatures"),
                classification: Classification::Storage,
                source: facts(b"rows"),
                destination_content_digest: Digest::of(b"rows"),
            },
        ],
        artifacts: ArtifactPlan {
            occurrences: 2,
            objects: vec![ObjectFacts {
                sha256: Digest::of(b"object"),
                xxh3_64: 42,
                size: 3000,
            }],
        },
        second_copy: false,
    };
    plan.check().unwrap();
    plan
}

#[test]
fn migration_plans() {
    let plan = sample_plan();
    assert!(Plan::decode(&plan.canonical()).is_ok());
    let good = serde_json::to_value(&plan).unwrap();
    // The canonical bytes aside (a plan file must be compact, in field
    // order): what decodes and passes the plan's structural check.
    let decode = |doc: &Value| {
        let p: Plan = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
        p.check().map_err(|e| e.to_string())
    };
    let set =
        |path: &'static str, v: Value| with(&good, move |d| *d.pointer_mut(path).unwrap() = v);
    agree(
        "migration-plan",
        decode,
        &[
            ("a plan", good.clone(), true),
            (
                "a second copy",
                with(&good, |d| d["second_copy"] = json!(true)),
                true,
            ),
            (
                "the root of a local disk",
                set("/source/uri", json!("file:///")),
                true,
            ),
            (
                "a bucket's root",
                set("/source/uri", json!("s3://bucket/")),
                true,
            ),
            (
                "no format",
                with(&good, |d| drop(d.as_object_mut().unwrap().remove("format"))),
                false,
            ),
            ("format 2", set("/format", json!(2)), false),
            (
                "a uri with userinfo",
                set("/source/uri", json!("file://user@host/src")),
                false,
            ),
            (
                "a uri with a query",
                set("/source/uri", json!("file:///src?x=1")),
                false,
            ),
            (
                "a uri with a fragment",
                set("/source/uri", json!("file:///src#x")),
                false,
            ),
            (
                "a percent-encoded uri",
                set("/source/uri", json!("file:///s%72c")),
                false,
            ),
            (
                "a '..' segment",
                set("/source_artifact_root", json!("file:///src/../x")),
                false,
            ),
            (
                "a '.' segment",
                set("/source_artifact_root", json!("file:///src/./x")),
                false,
            ),
            (
                "an empty segment",
                set("/source/uri", json!("file:///src//x")),
                false,
            ),
            (
                "a trailing slash",
                set("/source/uri", json!("file:///src/")),
                false,
            ),
            (
                "an upper-case scheme",
                set("/source/uri", json!("FILE:///src")),
                false,
            ),
            (
                "an upper-case host",
                set("/destination/uri", json!("s3://Bucket/w")),
                false,
            ),
            (
                "a bucket without a path",
                set("/destination/uri", json!("s3://bucket")),
                false,
            ),
            (
                "a uri with a space",
                set("/source/uri", json!("file:///my src")),
                false,
            ),
            ("not a uri", set("/source/uri", json!("/data/src")), false),
            (
                "an upper-case digest",
                set(
                    "/control/snapshot_digest",
                    json!(Digest::of(b"c").to_string().to_uppercase()),
                ),
                false,
            ),
            (
                "a prefixed digest",
                set(
                    "/control/snapshot_digest",
                    json!(format!("sha256:{}", Digest::of(b"c"))),
                ),
                false,
            ),
            (
                "an empty migration id",
                set("/migration_id", json!("")),
                false,
            ),
            (
                "a control character in a name",
                set("/migration_id", json!("m\u{7}1")),
                false,
            ),
            (
                "a name of 257 bytes",
                set("/worlds/0/world", json!("w".repeat(257))),
                false,
            ),
            (
                "source epoch 0",
                set("/worlds/0/source_epoch", json!(0)),
                false,
            ),
            (
                "a classification in Rust's spelling",
                set("/tables/1/classification", json!("Storage")),
                false,
            ),
            (
                "a negative row count",
                set("/tables/1/source/rows", json!(-1)),
                false,
            ),
            (
                "an unknown field",
                with(&good, |d| d["extra"] = json!(1)),
                false,
            ),
        ],
    );
}

/// A sealed receipt of [`sample_plan`].
fn sample_receipt() -> StoredReceipt {
    let plan = sample_plan();
    let table = |t: &TablePlan| TableReceipt {
        name: t.name.clone(),
        classification: t.classification,
        source_snapshot: t.source.snapshot,
        destination_snapshot: 1,
        schema_fingerprint: t.source.schema_fingerprint,
        metadata_fingerprint: t.source.metadata_fingerprint,
        rows: t.source.rows,
        source_content_digest: t.source.content_digest,
        destination_content_digest: t.destination_content_digest,
    };
    StoredReceipt::seal(Receipt {
        format: 1,
        migration_id: plan.migration_id.clone(),
        version: name("0.1.0"),
        started_at: 1_700_000_000_000,
        completed_at: 1_700_000_005_000,
        source_fingerprint: plan.source.fingerprint(),
        destination_fingerprint: plan.destination.fingerprint(),
        plan_digest: plan.digest(),
        source_stability_digest: Digest::of(b"stable"),
        tables: plan.tables.iter().map(table).collect(),
        artifacts: ArtifactReceipt {
            occurrences: plan.artifacts.occurrences,
            objects: 1,
            verified_bytes: plan.artifacts.total_bytes(),
            inventory_digest: plan.artifacts.inventory_digest(),
        },
        control: ControlReceipt {
            records: 3,
            worlds: 1,
            fence_floors: 1,
            snapshot_digest: plan.control.snapshot_digest,
            activation: Activation::Activated,
        },
        activity_disposition: ActivityDisposition::EmptyV1,
        cold_verification: ColdReceipt {
            evidence_digest: Digest::of(b"evidence"),
            resume: Resume::Resumed {
                world: name("w-live"),
                epoch: 4,
                tick: 6,
            },
        },
        second_copy: false,
    })
}

#[test]
fn receipts() {
    let stored = sample_receipt();
    assert!(StoredReceipt::decode(&stored.encode()).is_ok());
    let good = serde_json::to_value(&stored).unwrap();
    // The canonical bytes and the digest's binding aside (an edited sample
    // no longer binds): what decodes and passes the structural check.
    let decode = |doc: &Value| {
        let r: StoredReceipt = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
        r.receipt.check().map_err(|e| e.to_string())
    };
    let set =
        |path: &'static str, v: Value| with(&good, move |d| *d.pointer_mut(path).unwrap() = v);
    let resume = "/receipt/cold_verification/resume";
    agree(
        "receipt",
        decode,
        &[
            ("a receipt", good.clone(), true),
            (
                "no resumable World",
                set(resume, json!("not-applicable")),
                true,
            ),
            (
                "a second copy",
                with(&good, |d| d["receipt"]["second_copy"] = json!(true)),
                true,
            ),
            ("a bare receipt", good["receipt"].clone(), false),
            (
                "no digest",
                with(&good, |d| drop(d.as_object_mut().unwrap().remove("digest"))),
                false,
            ),
            (
                "a prefixed digest",
                set("/digest", json!(format!("sha256:{}", stored.digest))),
                false,
            ),
            ("format 2", set("/receipt/format", json!(2)), false),
            (
                "another activity disposition",
                set("/receipt/activity_disposition", json!("empty")),
                false,
            ),
            (
                "another activation",
                set("/receipt/control/activation", json!("active")),
                false,
            ),
            (
                "a resume without its World",
                set(resume, json!("resumed")),
                false,
            ),
            (
                "a resume of an unnamed World",
                set("/receipt/cold_verification/resume/resumed/world", json!("")),
                false,
            ),
            (
                "a negative start",
                set("/receipt/started_at", json!(-1)),
                false,
            ),
            (
                "a fractional row count",
                set("/receipt/tables/0/rows", json!(1.5)),
                false,
            ),
            (
                "an unknown table field",
                with(&good, |d| d["receipt"]["tables"][0]["extra"] = json!(1)),
                false,
            ),
            (
                "an unknown field",
                with(&good, |d| d["extra"] = json!(1)),
                false,
            ),
        ],
    );
}

/// `custos migrate <verb> --json` of migration `s1` from `src` to `dst`
/// with `extra` flags and their paths: what it printed, parsed.
#[cfg(feature = "migrate")]
fn migrate_json(verb: &str, src: &Path, dst: &Path, extra: &[(&str, &Path)]) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_custos"));
    cmd.args([
        "migrate",
        verb,
        "--migration-id",
        "s1",
        "--json",
        "--source",
    ])
    .arg(src)
    .arg("--dest")
    .arg(dst);
    for (flag, path) in extra {
        cmd.arg(flag).arg(path);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "migrate {verb}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The plan `custos migrate plan` prints and writes, and the receipt
/// `custos migrate run` prints and writes, of a real migration: each valid
/// under its schema (and not under the other's).
#[cfg(feature = "migrate")]
#[test]
fn a_real_migration_prints_and_writes_what_the_schemas_describe() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    fixture::build(&src, fixture::Size::SMALL);
    let plan_file = dir.path().join("plan.json");
    let receipt_file = dir.path().join("receipt.json");
    let read =
        |path: &Path| serde_json::from_slice::<Value>(&std::fs::read(path).unwrap()).unwrap();
    let validator = |kind: &str| {
        jsonschema::validator_for(&serde_json::from_str(&printed(kind)).unwrap()).unwrap()
    };
    let (plans, receipts) = (validator("migration-plan"), validator("receipt"));

    let printed_plan = migrate_json("plan", &src, &dst, &[("--out", &plan_file)]);
    assert!(Plan::decode(&std::fs::read(&plan_file).unwrap()).is_ok());
    let printed_receipt = migrate_json(
        "run",
        &src,
        &dst,
        &[("--plan", &plan_file), ("--receipt", &receipt_file)],
    );
    assert!(StoredReceipt::decode(&std::fs::read(&receipt_file).unwrap()).is_ok());
    let documents = [
        ("the printed plan", printed_plan, &plans, &receipts),
        ("the written plan", read(&plan_file), &plans, &receipts),
        ("the printed receipt", printed_receipt, &receipts, &plans),
        (
            "the written receipt",
            read(&receipt_file),
            &receipts,
            &plans,
        ),
    ];
    for (what, doc, own, other) in &documents {
        let errors: Vec<String> = own.iter_errors(doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{what}: {errors:?}\n{doc:#}");
        assert!(
            !other.is_valid(doc),
            "{what} is valid under the other schema"
        );
    }
}
