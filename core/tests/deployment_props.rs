//! Property tests of the deployment catalog: the logical
//! revision id is stable under any spelling of the input JSON and any
//! reweighting, and changes with every other field; weighted selection is
//! deterministic across reordered candidates, picks a candidate and follows
//! the documented byte construction; random request streams keep the desired
//! state's invariants.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};

use custos_core::deployment::manifest::{
    Availability, DeploymentManifest, Placement, ResourceBudgets, RevisionId, MAX_SAFE_INTEGER,
};
use custos_core::deployment::route::{self, SELECTION_DOMAIN};
use custos_core::deployment::state::{decide, Catalog, Mutation, Request};
use custos_core::release::Sha256;
use proptest::prelude::*;
use serde_json::Value;
use sha2::Digest as _;

// ------------------------------------------------------------ generators

fn ident() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9][a-zA-Z0-9._:-]{0,8}".prop_filter("reserved", |s| s != "default")
}

/// Free text, including what JSON must escape.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,12}",
        Just("quote \" backslash \\ slash / tab \t nl \n".to_owned()),
        Just("\u{0}\u{1f}\u{7f}\u{2028}é€😀".to_owned()),
        Just(String::new()),
    ]
}

fn budgets() -> impl Strategy<Value = ResourceBudgets> {
    let b = || proptest::option::of(1..=MAX_SAFE_INTEGER);
    (b(), b(), b(), b()).prop_map(
        |(memory_bytes, cpu_millis, max_concurrency, timeout_millis)| ResourceBudgets {
            memory_bytes,
            cpu_millis,
            max_concurrency,
            timeout_millis,
        },
    )
}

fn availability() -> impl Strategy<Value = Availability> {
    (1u32..=10_000)
        .prop_flat_map(|max| (0..=max, Just(max)))
        .prop_map(|(min_instances, max_instances)| Availability {
            min_instances,
            max_instances,
        })
}

fn manifest() -> impl Strategy<Value = DeploymentManifest> {
    let scope = (ident(), ident(), proptest::option::of(ident()), ident());
    let release = (any::<[u8; 32]>(), 1u32..=10_000);
    let sets = (
        proptest::collection::btree_set(ident(), 0..4),
        proptest::option::of(ident()),
        proptest::collection::btree_set(ident(), 0..3),
    );
    let maps = (
        proptest::collection::btree_map(ident(), text(), 0..3),
        proptest::collection::btree_map(ident(), text(), 0..3),
    );
    (scope, release, sets, budgets(), availability(), maps).prop_map(
        |(
            (id, tenant, namespace, service),
            (digest, route_weight),
            (grants, pool, zones),
            budgets,
            availability,
            (labels, annotations),
        )| {
            DeploymentManifest {
                id,
                tenant,
                namespace,
                service,
                release: Sha256(digest),
                route_weight,
                grants: grants.into_iter().collect(),
                budgets,
                placement: Placement {
                    pool,
                    zones: zones.into_iter().collect(),
                },
                availability,
                labels,
                annotations,
            }
            .validate()
            .unwrap()
        },
    )
}

// ------------------------------------------------- another JSON spelling

/// splitmix64: the spelling's choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn space(&mut self) -> &'static str {
        [" ", "", "\n  ", "\t", "", "\r\n"][self.below(6)]
    }
}

fn spell_string(s: &str, rng: &mut Rng) -> String {
    if rng.below(3) != 0 {
        return serde_json::to_string(s).unwrap();
    }
    // Every UTF-16 unit as a \u escape.
    let mut out = String::from("\"");
    for unit in s.encode_utf16() {
        out.push_str(&format!("\\u{unit:04X}"));
    }
    out.push('"');
    out
}

/// `v` as JSON text with keys in shuffled order, arrays reordered where
/// they are sets, and arbitrary whitespace.
fn spell(v: &Value, rng: &mut Rng, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            for i in (1..keys.len()).rev() {
                keys.swap(i, rng.below(i + 1));
            }
            out.push('{');
            for (n, k) in keys.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                out.push_str(rng.space());
                out.push_str(&spell_string(k, rng));
                out.push_str(rng.space());
                out.push(':');
                out.push_str(rng.space());
                spell(&map[*k], rng, out);
            }
            out.push_str(rng.space());
            out.push('}');
        }
        Value::Array(items) => {
            let mut items: Vec<&Value> = items.iter().collect();
            for i in (1..items.len()).rev() {
                items.swap(i, rng.below(i + 1));
            }
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                    out.push_str(rng.space());
                }
                spell(item, rng, out);
            }
            out.push(']');
        }
        Value::String(s) => out.push_str(&spell_string(s, rng)),
        other => out.push_str(&other.to_string()),
    }
}

/// Another spelling of `m`: shuffled keys and sets, whitespace, escapes,
/// the digest's hex in another case, defaulted fields omitted or written.
fn respell(m: &DeploymentManifest, seed: u64) -> String {
    let mut rng = Rng(seed);
    let mut v = serde_json::to_value(m).unwrap();
    let obj = v.as_object_mut().unwrap();
    if rng.below(2) == 0 {
        let hex = m.release.hex();
        let hex: String = hex
            .chars()
            .map(|c| {
                if rng.below(2) == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect();
        obj.insert("release".into(), Value::String(format!("sha256:{hex}")));
    }
    for key in [
        "grants",
        "labels",
        "annotations",
        "budgets",
        "placement",
        "availability",
    ] {
        let empty = match &obj[key] {
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
            _ => false,
        };
        let default_availability =
            key == "availability" && m.availability == Availability::default();
        if (empty || default_availability) && rng.below(2) == 0 {
            obj.remove(key);
        }
    }
    let mut out = String::new();
    out.push_str(rng.space());
    spell(&v, &mut rng, &mut out);
    out.push_str(rng.space());
    out
}

// ------------------------------------------------------- (a) stability

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn revision_is_stable_under_any_spelling(m in manifest(), seed in any::<u64>()) {
        let doc = respell(&m, seed);
        let decoded = DeploymentManifest::decode(doc.as_bytes())
            .unwrap_or_else(|e| panic!("{e}: {doc}"));
        prop_assert_eq!(&decoded, &m);
        prop_assert_eq!(decoded.revision_id(), m.revision_id());
        prop_assert_eq!(decoded.canonical(), m.canonical());
        // And from the canonical bytes themselves.
        prop_assert_eq!(DeploymentManifest::decode(&m.canonical()).unwrap(), m.clone());
        let text = m.revision_id().to_string();
        prop_assert_eq!(RevisionId::parse(&text), Some(m.revision_id()));
    }

    #[test]
    fn revision_is_stable_under_reweighting(m in manifest(), w in 1u32..=10_000) {
        let mut heavy = m.clone();
        heavy.route_weight = w;
        let heavy = heavy.validate().unwrap();
        prop_assert_eq!(heavy.revision_id(), m.revision_id());
        prop_assert_eq!(heavy.revision_preimage(), m.revision_preimage());
        // A reweighted document decodes to the same revision.
        let mut v = serde_json::to_value(&m).unwrap();
        v["route_weight"] = Value::from(w);
        let decoded = DeploymentManifest::decode(v.to_string().as_bytes()).unwrap();
        prop_assert_eq!(decoded.route_weight, w);
        prop_assert_eq!(decoded.revision_id(), m.revision_id());
    }
}

// ---------------------------------------------------- (b) sensitivity

fn toggle<T: Ord>(set: &mut BTreeSet<T>, v: T) {
    if !set.remove(&v) {
        set.insert(v);
    }
}

fn toggle_entry(map: &mut BTreeMap<String, String>, k: &str) {
    if map.remove(k).is_none() {
        map.insert(k.to_owned(), "new".to_owned());
    }
}

fn bump(v: Option<u64>) -> Option<u64> {
    match v {
        None => Some(1),
        Some(MAX_SAFE_INTEGER) => Some(MAX_SAFE_INTEGER - 1),
        Some(x) => Some(x + 1),
    }
}

/// `m` with field `field` changed (and still valid).
fn change(m: &DeploymentManifest, field: u8) -> DeploymentManifest {
    let mut c = m.clone();
    match field % 13 {
        0 => c.id.push('x'),
        1 => c.tenant.push('x'),
        2 => {
            c.namespace = if c.namespace.is_some() {
                None
            } else {
                Some("ns".into())
            }
        }
        3 => c.service.push('x'),
        4 => c.release = Sha256::of(&c.release.0),
        5 => {
            let mut g: BTreeSet<String> = c.grants.into_iter().collect();
            toggle(&mut g, "zz:new-grant".to_owned());
            c.grants = g.into_iter().collect();
        }
        6 => c.budgets.memory_bytes = bump(c.budgets.memory_bytes),
        7 => c.budgets.timeout_millis = bump(c.budgets.timeout_millis),
        8 => {
            c.placement.pool = if c.placement.pool.is_some() {
                None
            } else {
                Some("pool".into())
            }
        }
        9 => {
            let mut z: BTreeSet<String> = c.placement.zones.into_iter().collect();
            toggle(&mut z, "zz-new-zone".to_owned());
            c.placement.zones = z.into_iter().collect();
        }
        10 => {
            let a = &mut c.availability;
            if a.min_instances < a.max_instances {
                a.min_instances += 1;
            } else {
                a.min_instances -= 1;
            }
        }
        11 => toggle_entry(&mut c.labels, "zz-new-label"),
        _ => toggle_entry(&mut c.annotations, "zz-new-note"),
    }
    c.validate().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn any_other_field_changes_the_revision(m in manifest(), field in 0u8..13, w in 1u32..=10_000) {
        let mut changed = change(&m, field);
        changed.route_weight = w;
        prop_assert_ne!(changed.revision_id(), m.revision_id(), "field {}", field);
        prop_assert_ne!(changed.canonical(), m.identity().canonical());
    }
}

// ------------------------------------------------------- (c) selection

fn candidates() -> impl Strategy<Value = Vec<(RevisionId, u32)>> {
    proptest::collection::btree_map(any::<[u8; 32]>(), 1u32..=10_000, 1..8).prop_map(|m| {
        m.into_iter()
            .map(|(r, w)| (RevisionId(Sha256(r)), w))
            .collect()
    })
}

fn parts() -> impl Strategy<Value = [String; 6]> {
    (ident(), ident(), ident(), ident(), ident(), ".{0,16}")
        .prop_map(|(a, b, c, d, e, f)| [a, b, c, d, e, f])
}

/// Weighted selection, written independently from its description in
/// `custos_core::deployment::route`.
fn oracle(candidates: &[(RevisionId, u32)], parts: &[&str; 6]) -> RevisionId {
    let mut sorted = candidates.to_vec();
    sorted.sort_by_key(|(r, _)| *r);
    let mut h = sha2::Sha256::new();
    h.update(SELECTION_DOMAIN);
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    let digest = h.finalize();
    let hash = u64::from_be_bytes(digest[..8].try_into().unwrap());
    let total: u64 = sorted.iter().map(|(_, w)| u64::from(*w)).sum();
    let bucket = hash % total;
    let mut cumulative = 0u64;
    for (r, w) in &sorted {
        cumulative += u64::from(*w);
        if cumulative > bucket {
            return *r;
        }
    }
    unreachable!()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn selection_is_deterministic_across_reorderings(
        (c, shuffled) in candidates().prop_flat_map(|c| (Just(c.clone()), Just(c).prop_shuffle())),
        parts in parts(),
    ) {
        let p: [&str; 6] = std::array::from_fn(|i| parts[i].as_str());
        let a = route::select(&c, p).unwrap();
        let b = route::select(&shuffled, p).unwrap();
        prop_assert_eq!(a, b);
        prop_assert!(c.iter().any(|(r, _)| *r == a));
        prop_assert_eq!(a, oracle(&c, &p));
        let mut reversed = c.clone();
        reversed.reverse();
        prop_assert_eq!(route::select(&reversed, p), Some(a));
    }
}

#[test]
fn selection_edge_cases() {
    let p = ["t", "s", "default", "c", "f", ""];
    assert_eq!(route::select(&[], p), None);
    let one = [(RevisionId(Sha256([7; 32])), 1)];
    assert_eq!(route::select(&one, p), Some(RevisionId(Sha256([7; 32]))));
    assert_eq!(route::pick(&[], 5), None);
    assert_eq!(route::pick(&[0], 5), None);
    // Cumulative [3, 10]: buckets 0..3 pick the first, 3..10 the second.
    assert_eq!(route::pick(&[3, 10], 2), Some(0));
    assert_eq!(route::pick(&[3, 10], 3), Some(1));
    assert_eq!(route::pick(&[3, 10], 9), Some(1));
    assert_eq!(route::pick(&[3, 10], 12), Some(0));
}

// ----------------------------------------------- (d) desired-state streams

const IDS: [&str; 4] = ["blue", "green", "red", "white"];
const TENANTS: [&str; 2] = ["acme", "beta"];

/// A manifest of service `api` on release `sha256(id)`, every optional
/// field defaulted by the public decoder; `weight` is set afterwards, so it
/// may be one the decoder refuses.
fn sample(id: &str, tenant: &str, weight: u32) -> DeploymentManifest {
    let doc = format!(
        r#"{{"id":"{id}","tenant":"{tenant}","service":"api","release":"{}","route_weight":1}}"#,
        Sha256::of(id.as_bytes())
    );
    let mut m = DeploymentManifest::decode(doc.as_bytes()).unwrap();
    m.route_weight = weight;
    m
}

/// `c` through JSON and through CBOR, back unchanged.
fn written_forms(c: &Catalog) -> Result<(), String> {
    let text = serde_json::to_string(c).map_err(|e| format!("to JSON: {e}"))?;
    let back: Catalog = serde_json::from_str(&text).map_err(|e| format!("from JSON: {e}"))?;
    if &back != c {
        return Err(format!("JSON changed it: {text}"));
    }
    let mut bytes = Vec::new();
    ciborium::into_writer(c, &mut bytes).map_err(|e| format!("to CBOR: {e}"))?;
    let back: Catalog =
        ciborium::from_reader(bytes.as_slice()).map_err(|e| format!("from CBOR: {e}"))?;
    if &back != c {
        return Err("CBOR changed it".into());
    }
    Ok(())
}

/// (kind, id, tenant, scoped, expected selector, weight, stale)
type RawOp = (u8, usize, usize, bool, u8, u32, bool);

fn raw_op() -> impl Strategy<Value = RawOp> {
    (
        0u8..4,
        0..IDS.len(),
        0..TENANTS.len(),
        any::<bool>(),
        0u8..4,
        0u32..=10_001,
        proptest::bool::weighted(0.1),
    )
}

fn to_request(c: &Catalog, (kind, id, tenant, scoped, e, weight, stale): RawOp) -> Request {
    let live = c.objects.get(IDS[id]).map(|d| d.generation);
    let expected = match e {
        0 => None,
        1 => Some(0),
        2 => Some(live.unwrap_or(1)),
        _ => Some(live.unwrap_or(0) + 1),
    };
    let mutation = match kind {
        0 => Mutation::Apply {
            manifest: Box::new(sample(IDS[id], TENANTS[tenant], weight)),
            expected,
        },
        1 => Mutation::ApplyMany {
            manifests: (0..=id)
                .map(|i| sample(IDS[i], TENANTS[tenant], weight.max(1)))
                .collect(),
        },
        2 => Mutation::Delete {
            id: IDS[id].into(),
            expected,
        },
        _ => Mutation::PublishSnapshot,
    };
    Request {
        tenant: scoped.then(|| TENANTS[tenant].to_owned()),
        mutation,
        compiled_at: if stale {
            c.generation.wrapping_sub(1)
        } else {
            c.generation
        },
        operation: None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_streams_keep_the_desired_state_valid(ops in proptest::collection::vec(raw_op(), 0..80)) {
        let mut c = Catalog::default();
        for op in ops {
            let req = to_request(&c, op);
            let Ok(d) = decide(&c, &req) else { continue };
            let Some(next) = d.next else {
                prop_assert_eq!(d.receipt.catalog_generation(), c.generation);
                continue;
            };
            prop_assert_eq!(next.check(), Ok(()));
            prop_assert_eq!(next.generation, c.generation + 1);
            prop_assert_eq!(d.receipt.catalog_generation(), next.generation);
            for (id, old) in &c.objects {
                if let Some(new) = next.objects.get(id) {
                    prop_assert!(new.generation >= old.generation, "{} went backwards", id);
                }
            }
            for d in next.objects.values() {
                prop_assert!(d.generation >= 1 && d.generation <= next.generation);
            }
            // The desired state has a written form: JSON and a binary
            // format give it back unchanged. (The binary format is CBOR, a
            // self-describing one: a manifest omits its absent fields, as
            // its canonical JSON does, which postcard cannot carry.)
            prop_assert_eq!(written_forms(&next), Ok(()));
            c = next;
        }
    }
}
