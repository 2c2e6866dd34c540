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

/// `doc` with the value at `pointer` set to `value` (its last token added
/// if absent), or removed for `None`.
fn edit(doc: &Value, pointer: &str, value: Option<Value>) -> Value {
    let mut d = doc.clone();
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    match (d.pointer_mut(parent).unwrap(), value) {
        (Value::Object(m), Some(v)) => drop(m.insert(key.to_owned(), v)),
        (Value::Object(m), None) => drop(m.remove(key)),
        (Value::Array(a), Some(v)) => a[key.parse::<usize>().unwrap()] = v,
        (other, _) => panic!("{pointer}: {other} is not an edited object or array"),
    }
    d
}

/// A sample of `base` edited at `pointer` (see [`edit`]) and whether it
/// is valid.
fn sample(base: &Value, what: &'static str, pointer: &str, v: Option<Value>, ok: bool) -> Sample {
    (what, edit(base, pointer, v), ok)
}

/// A named document and whether it is valid.
type Sample = (&'static str, Value, bool);

fn digest() -> String {
    Sha256::of(b"greeter").to_string()
}

#[test]
fn release_manifests() {
    let good = json!({"name":"greeter","version":"1.2.1","tenant":"acme","service":"greeter",
        "component_digest": digest(),"exports":["add"]});
    let local = json!({"name":"n","version":"1","component_digest": digest(),"exports":[]});
    let hex = Sha256::of(b"greeter").hex();
    let is = |what, pointer, v| sample(&good, what, pointer, Some(v), true);
    let no = |what, pointer, v| sample(&good, what, pointer, Some(v), false);
    let decode = |doc: &Value| {
        Manifest::parse(&serde_json::to_vec(doc).unwrap(), 4 << 20)
            .map(drop)
            .map_err(|e| e.to_string())
    };
    let reference = json!({"name":"greeter","version":"1.2.1","tenant":"acme","service":"greeter",
        "release":"x@1","exports":["add"]});
    let samples = [
        ("a tenant's release", good.clone(), true),
        ("a trusted-local release", local.clone(), true),
        sample(&local, "a null tenant", "/tenant", Some(Value::Null), true),
        sample(
            &local,
            "a null service, no tenant",
            "/service",
            Some(Value::Null),
            true,
        ),
        is("exports in any order", "/exports", json!(["b:x/y", "a@1"])),
        ("a reference where a digest goes", reference, false),
        sample(&good, "no exports", "/exports", None, false),
        no(
            "an upper-case digest",
            "/component_digest",
            json!(format!("sha256:{}", hex.to_uppercase())),
        ),
        no(
            "a digest without its prefix",
            "/component_digest",
            json!(hex),
        ),
        no(
            "a short digest",
            "/component_digest",
            json!(&digest()[..70]),
        ),
        no("an upper-case name", "/name", json!("Greeter")),
        no("a name of 129", "/name", json!("g".repeat(129))),
        no("an empty name", "/name", json!("")),
        no("a version with a space", "/version", json!("1 0")),
        no("a version of 65", "/version", json!("1".repeat(65))),
        sample(
            &local,
            "a service without a tenant",
            "/service",
            Some(json!("s")),
            false,
        ),
        no("a service, a null tenant", "/tenant", Value::Null),
        no("an export named twice", "/exports", json!(["add", "add"])),
        no("an export with a space", "/exports", json!(["a b"])),
        no("an empty export", "/exports", json!([""])),
        no(
            "1025 exports",
            "/exports",
            (0..1025).map(|i| json!(format!("e{i}"))).collect(),
        ),
        no("an unknown field", "/x", json!(1)),
    ];
    agree("release-manifest", decode, &samples);
}

#[test]
fn contracts() {
    let good = json!({"interfaces":[{"name":"add","functions":[{"name":"add","params":[
        {"name":"a","ty":"u32"},{"name":"b","ty":"u32"}],"results":["u32"]}]}]});
    let every_type = json!({"interfaces":[{"name":"api","docs":"the api","functions":[{
        "name":"f","docs":null,"params":[{"name":"x","ty":{"record":[
            {"name":"a","ty":{"list":"string"}},
            {"name":"b","ty":{"option":{"tuple":["bool","s8","u8","s16","u16","s32","s64","u64",
                "f32","f64","char"]}}},
            {"name":"c","ty":{"variant":[{"name":"none"},{"name":"nil","ty":null},
                {"name":"some","ty":{"enum":["x","y"]}}]}},
            {"name":"d","ty":{"flags":["r","w"]}},
            {"name":"e","ty":{"own":"file"}},
            {"name":"f","ty":{"borrow":"file"}}]}}],
        "results":[{"result":{}},{"result":{"ok":"u8"}},{"result":{"ok":null,"err":"string"}}]}]}]});
    let decode = |doc: &Value| {
        let c: Contract = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
        c.shape().check().map_err(|e| e.to_string())
    };
    let f = "/interfaces/0/functions/0";
    let result = |what, ty| sample(&good, what, &format!("{f}/results/0"), Some(ty), false);
    let samples = [
        ("one function", good.clone(), true),
        ("every type", every_type, true),
        ("no interfaces", json!({"interfaces":[]}), true),
        ("no interfaces field", json!({}), false),
        result("an unknown type", json!("u128")),
        result("a type spelt in upper case", json!("U32")),
        result("a type with two tags", json!({"list":"u8","option":"u8"})),
        result("a list of nothing", json!({"list":null})),
        result(
            "a result with a third branch",
            json!({"result":{"ok":"u8","other":"u8"}}),
        ),
        result("a field without a type", json!({"record":[{"name":"a"}]})),
        sample(
            &good,
            "a function without results",
            &format!("{f}/results"),
            None,
            false,
        ),
        sample(
            &good,
            "an unknown function field",
            &format!("{f}/doc"),
            Some(json!("x")),
            false,
        ),
        sample(
            &good,
            "a numeric type",
            &format!("{f}/params/0/ty"),
            Some(json!(32)),
            false,
        ),
    ];
    agree("contract", decode, &samples);
}

#[test]
fn deployment_manifests() {
    let d = digest();
    // As shells/cli/tests/deployments.rs applies them, and a full one.
    let blue = json!({"id":"blue","tenant":"acme","service":"calc","release": d,"route_weight":3});
    let canary = json!({"id":"canary","tenant":"acme","namespace":"prod","service":"api",
        "release": d,"route_weight":1,"grants":["kv:write","kv:read"],
        "budgets":{"timeout_millis":30000,"memory_bytes":67108864,"cpu_millis":5,
            "max_concurrency":9007199254740991u64},
        "labels":{"team":"edge","stage":"canary"},"annotations":{"note":"dormant until invoked"},
        "availability":{"min_instances":1,"max_instances":4},
        "placement":{"zones":["eu-west-1b","eu-west-1a"],"pool":"edge"}});
    let decode = |doc: &Value| {
        DeploymentManifest::decode(&serde_json::to_vec(doc).unwrap())
            .map(drop)
            .map_err(|e| e.to_string())
    };
    let hex = Sha256::of(b"greeter").hex();
    let is = |what, pointer, v| sample(&blue, what, pointer, Some(v), true);
    let no = |what, pointer, v| sample(&blue, what, pointer, Some(v), false);
    let many = |n: usize| (0..n).map(|i| format!("k{i}"));
    let samples = [
        ("the tests' blue", blue.clone(), true),
        ("every field", canary, true),
        is(
            "an upper-case digest",
            "/release",
            json!(format!("sha256:{}", hex.to_uppercase())),
        ),
        is("an id of 1024", "/id", json!("i".repeat(1024))),
        no("the reserved id", "/id", json!("default")),
        no("an id of 1025", "/id", json!("i".repeat(1025))),
        no("an id starting with '-'", "/id", json!("-x")),
        no("a release reference", "/release", json!("x@1")),
        no(
            "an upper-case prefix",
            "/release",
            json!(format!("SHA256:{hex}")),
        ),
        sample(&blue, "no release", "/release", None, false),
        no("route weight 0", "/route_weight", json!(0)),
        no("route weight 10001", "/route_weight", json!(10_001)),
        no("a grant twice", "/grants", json!(["kv:read", "kv:read"])),
        no("65 grants", "/grants", many(65).collect()),
        no("a budget of 0", "/budgets", json!({"memory_bytes":0})),
        no(
            "a budget of 2^53",
            "/budgets",
            json!({"cpu_millis":9007199254740992u64}),
        ),
        no("an unknown budget", "/budgets", json!({"disk_bytes":1})),
        no(
            "no instances at most",
            "/availability",
            json!({"max_instances":0}),
        ),
        no(
            "10001 instances",
            "/availability",
            json!({"max_instances":10_001}),
        ),
        no("a label key with a space", "/labels", json!({"a b":"c"})),
        no(
            "a label value of 1025",
            "/labels",
            json!({"a":"v".repeat(1025)}),
        ),
        no(
            "an annotation of 4097",
            "/annotations",
            json!({"a":"v".repeat(4097)}),
        ),
        no(
            "65 labels",
            "/labels",
            many(65).map(|k| (k, json!("v"))).collect(),
        ),
        no("an empty namespace", "/namespace", json!("")),
        no("an unknown field", "/extra", json!(1)),
    ];
    agree("deployment-manifest", decode, &samples);
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
    let identity = |u: &str| StorageIdentity::new(u, "default", "iceberg").unwrap();
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
    let is = |what, pointer, v| sample(&good, what, pointer, Some(v), true);
    let no = |what, pointer, v| sample(&good, what, pointer, Some(v), false);
    let (src, root) = ("/source/uri", "/source_artifact_root");
    let upper = Digest::of(b"c").hex().to_uppercase();
    let samples = [
        ("a plan", good.clone(), true),
        is("a second copy", "/second_copy", json!(true)),
        is("the root of a local disk", src, json!("file:///")),
        is("a bucket's root", src, json!("s3://bucket/")),
        sample(&good, "no format", "/format", None, false),
        no("format 2", "/format", json!(2)),
        no("a uri with userinfo", src, json!("file://user@host/src")),
        no("a uri with a query", src, json!("file:///src?x=1")),
        no("a uri with a fragment", src, json!("file:///src#x")),
        no("a percent-encoded uri", src, json!("file:///s%72c")),
        no("a '..' segment", root, json!("file:///src/../x")),
        no("a '.' segment", root, json!("file:///src/./x")),
        no("an empty segment", src, json!("file:///src//x")),
        no("a trailing slash", src, json!("file:///src/")),
        no("an upper-case scheme", src, json!("FILE:///src")),
        no(
            "an upper-case host",
            "/destination/uri",
            json!("s3://Bucket/w"),
        ),
        no(
            "a bucket without a path",
            "/destination/uri",
            json!("s3://bucket"),
        ),
        is(
            "a uri with a space in its path",
            src,
            json!("file:///my src"),
        ),
        no(
            "a uri with a no-break space",
            src,
            json!("file:///my\u{a0}src"),
        ),
        no("a host with a space", src, json!("s3://buck et/src")),
        is(
            "an older plan's upper-case backend",
            "/source/backend",
            json!("Iceberg"),
        ),
        no("a backend with a dot", "/source/backend", json!("ice.berg")),
        no(
            "a namespace of two segments",
            "/source/namespace",
            json!("a/b"),
        ),
        no("a namespace '..'", "/destination/namespace", json!("..")),
        is("a namespace '..x'", "/destination/namespace", json!("..x")),
        no("not a uri", src, json!("/data/src")),
        no(
            "an upper-case digest",
            "/control/snapshot_digest",
            json!(upper),
        ),
        no(
            "a prefixed digest",
            "/control/snapshot_digest",
            json!(format!("sha256:{upper}")),
        ),
        no("an empty migration id", "/migration_id", json!("")),
        no(
            "a control character in a name",
            "/migration_id",
            json!("m\u{7}1"),
        ),
        no(
            "a name of 257 bytes",
            "/worlds/0/world",
            json!("w".repeat(257)),
        ),
        no("source epoch 0", "/worlds/0/source_epoch", json!(0)),
        no(
            "Rust's spelling of a class",
            "/tables/1/classification",
            json!("Storage"),
        ),
        no("a negative row count", "/tables/1/source/rows", json!(-1)),
        no("an unknown field", "/extra", json!(1)),
    ];
    agree("migration-plan", decode, &samples);
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
    let is = |what, pointer, v| sample(&good, what, pointer, Some(v), true);
    let no = |what, pointer, v| sample(&good, what, pointer, Some(v), false);
    let resume = "/receipt/cold_verification/resume";
    let prefixed = format!("sha256:{}", stored.digest.hex());
    let samples = [
        ("a receipt", good.clone(), true),
        is("no resumable World", resume, json!("not-applicable")),
        is("a second copy", "/receipt/second_copy", json!(true)),
        ("a bare receipt", good["receipt"].clone(), false),
        sample(&good, "no digest", "/digest", None, false),
        no("a prefixed digest", "/digest", json!(prefixed)),
        no("format 2", "/receipt/format", json!(2)),
        no(
            "another disposition",
            "/receipt/activity_disposition",
            json!("empty"),
        ),
        no(
            "another activation",
            "/receipt/control/activation",
            json!("active"),
        ),
        no("a resume without its World", resume, json!("resumed")),
        no(
            "an unnamed World",
            &format!("{resume}/resumed/world"),
            json!(""),
        ),
        no("a negative start", "/receipt/started_at", json!(-1)),
        no(
            "a fractional row count",
            "/receipt/tables/0/rows",
            json!(1.5),
        ),
        no(
            "an unknown table field",
            "/receipt/tables/0/extra",
            json!(1),
        ),
        no("an unknown field", "/extra", json!(1)),
    ];
    agree("receipt", decode, &samples);
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
