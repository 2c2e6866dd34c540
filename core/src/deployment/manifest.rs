//! The deployment manifest: what an operator declares about one
//! deployment, its validation, its bounded
//! JSON decoder, its canonical form and its logical revision id.
//!
//! The canonical form is RFC 8785 (the JSON Canonicalization Scheme) of the
//! manifest's JSON, produced by the maintained `serde_json_canonicalizer`
//! crate, so any JCS implementation reproduces it byte for byte. Every
//! integer in a manifest is at most 2^53 − 1, so JCS's IEEE-754 number
//! rule represents it exactly. Optional scalars are omitted when absent;
//! collections are always present (empty when none), sets are sorted.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::DeploymentError;
use crate::release::Sha256;

/// The longest identifier (deployment id, tenant, namespace, service,
/// route, contract, function, grant, label key, zone, pool), in bytes.
pub const MAX_IDENTIFIER_BYTES: usize = 1024;
/// The longest manifest document the decoder reads, in bytes (checked
/// before parsing).
pub const MAX_MANIFEST_BYTES: usize = 64 * 1024;
/// The most grants, labels, annotations or zones in one manifest (each
/// collection checked as it is read, before its next element is kept).
pub const MAX_COLLECTION: usize = 64;
/// The longest label value, in bytes.
pub const MAX_LABEL_VALUE_BYTES: usize = 1024;
/// The longest annotation value, in bytes.
pub const MAX_ANNOTATION_VALUE_BYTES: usize = 4096;
/// The smallest route weight.
pub const MIN_WEIGHT: u32 = 1;
/// The largest route weight.
pub const MAX_WEIGHT: u32 = 10_000;
/// The most instances an availability block may ask for.
pub const MAX_INSTANCES: u32 = 10_000;
/// The largest integer a manifest may carry: 2^53 − 1, exactly
/// representable under RFC 8785's number rule.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;
/// The id reserved for a service's default route.
pub const RESERVED_ID: &str = "default";

/// What a manifest's canonical form spends outside its strings, at most:
/// the 20 keys and their quotes, colons and commas (260 bytes), the braces
/// and brackets (16), the quoted release digest (73) and seven numbers of
/// at most 24 characters each (168) come to 517; the rest is margin.
pub const CANONICAL_FIXED_BOUND: usize = 1024;

/// The domain tag hashed before a deployment's canonical bytes.
pub const REVISION_DOMAIN: &[u8] = b"custos-deployment-revision-v1\0";
/// The text before a revision id's hex digest.
pub const REVISION_PREFIX: &str = "revision-v1:sha256:";

/// The one identifier grammar ([`check_identifier`]), as a JSON Schema
/// pattern; its length is 1..=[`MAX_IDENTIFIER_BYTES`].
#[cfg(feature = "schema")]
const IDENTIFIER_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._:-]*$";

/// Resource budgets of one deployment. An absent budget is unlimited by the
/// manifest (the node's own limit applies).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ResourceBudgets {
    /// Linear-memory ceiling, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = MAX_SAFE_INTEGER)))]
    pub memory_bytes: Option<u64>,
    /// CPU time per invocation, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = MAX_SAFE_INTEGER)))]
    pub cpu_millis: Option<u64>,
    /// Concurrent invocations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = MAX_SAFE_INTEGER)))]
    pub max_concurrency: Option<u64>,
    /// Wall-clock timeout per invocation, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = MAX_SAFE_INTEGER)))]
    pub timeout_millis: Option<u64>,
}

/// Where a deployment may be placed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// The node pool, if pinned to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(length(min = 1, max = MAX_IDENTIFIER_BYTES), regex(pattern = IDENTIFIER_PATTERN))
    )]
    pub pool: Option<String>,
    /// Allowed zones: a set, stored sorted; empty means any.
    #[serde(default, deserialize_with = "bounded_seq")]
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(max = MAX_COLLECTION),
            inner(length(min = 1, max = MAX_IDENTIFIER_BYTES), regex(pattern = IDENTIFIER_PATTERN)),
            extend("uniqueItems" = true)
        )
    )]
    pub zones: Vec<String>,
}

/// How many instances the deployment keeps available.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Availability {
    /// Instances kept warm (0 = dormant until invoked).
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(range(max = MAX_INSTANCES)))]
    pub min_instances: u32,
    /// The most instances (at least 1, at least `min_instances`).
    #[serde(default = "one")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = MAX_INSTANCES)))]
    pub max_instances: u32,
}

fn one() -> u32 {
    1
}

impl Default for Availability {
    fn default() -> Self {
        Availability {
            min_instances: 0,
            max_instances: 1,
        }
    }
}

/// One deployment's declarative manifest.
///
/// Construct one directly or decode it with [`DeploymentManifest::decode`];
/// either way [`DeploymentManifest::validate`] is what the catalog accepts
/// (it normalizes sets to sorted order).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(
        description = "One deployment's declarative manifest, as `custos deployments apply \
                            --manifest` and `custos deployments revision --manifest` read it \
                            (at most 64 KiB; its canonical form at most 64 KiB too). Identifiers \
                            are case-sensitive; grants and zones are sets, stored sorted."
    )
)]
#[serde(deny_unknown_fields)]
pub struct DeploymentManifest {
    /// The deployment id: globally unique in one catalog; also the name of
    /// its named route. `default` is reserved.
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(min = 1, max = MAX_IDENTIFIER_BYTES),
            regex(pattern = IDENTIFIER_PATTERN),
            extend("not" = {"const": RESERVED_ID})
        )
    )]
    pub id: String,
    /// The owning tenant.
    #[cfg_attr(
        feature = "schema",
        schemars(length(min = 1, max = MAX_IDENTIFIER_BYTES), regex(pattern = IDENTIFIER_PATTERN))
    )]
    pub tenant: String,
    /// The namespace, if any (one per tenant and service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(length(min = 1, max = MAX_IDENTIFIER_BYTES), regex(pattern = IDENTIFIER_PATTERN))
    )]
    pub namespace: Option<String>,
    /// The service the deployment serves.
    #[cfg_attr(
        feature = "schema",
        schemars(length(min = 1, max = MAX_IDENTIFIER_BYTES), regex(pattern = IDENTIFIER_PATTERN))
    )]
    pub service: String,
    /// The release: its component digest. The decoder accepts the hex in
    /// either case; it is stored lowercase.
    #[serde(deserialize_with = "any_case_digest")]
    #[cfg_attr(feature = "schema", schemars(schema_with = "any_case_digest_schema"))]
    pub release: Sha256,
    /// The weight in the service's default route, 1..=10,000. Not part of
    /// the revision id.
    #[cfg_attr(feature = "schema", schemars(range(min = MIN_WEIGHT, max = MAX_WEIGHT)))]
    pub route_weight: u32,
    /// Capabilities granted: a set, stored sorted.
    #[serde(default, deserialize_with = "bounded_seq")]
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(max = MAX_COLLECTION),
            inner(length(min = 1, max = MAX_IDENTIFIER_BYTES), regex(pattern = IDENTIFIER_PATTERN)),
            extend("uniqueItems" = true)
        )
    )]
    pub grants: Vec<String>,
    /// Resource budgets.
    #[serde(default)]
    pub budgets: ResourceBudgets,
    /// Placement constraints.
    #[serde(default)]
    pub placement: Placement,
    /// Availability.
    #[serde(default)]
    pub availability: Availability,
    /// Labels: identifier keys, values up to 1 KiB.
    #[serde(default, deserialize_with = "bounded_map")]
    #[cfg_attr(
        feature = "schema",
        schemars(extend(
            "maxProperties" = MAX_COLLECTION,
            "propertyNames" = {"minLength": 1, "maxLength": MAX_IDENTIFIER_BYTES, "pattern": IDENTIFIER_PATTERN},
            "additionalProperties" = {"type": "string", "maxLength": MAX_LABEL_VALUE_BYTES}
        ))
    )]
    pub labels: BTreeMap<String, String>,
    /// Annotations: identifier keys, values up to 4 KiB.
    #[serde(default, deserialize_with = "bounded_map")]
    #[cfg_attr(
        feature = "schema",
        schemars(extend(
            "maxProperties" = MAX_COLLECTION,
            "propertyNames" = {"minLength": 1, "maxLength": MAX_IDENTIFIER_BYTES, "pattern": IDENTIFIER_PATTERN},
            "additionalProperties" = {"type": "string", "maxLength": MAX_ANNOTATION_VALUE_BYTES}
        ))
    )]
    pub annotations: BTreeMap<String, String>,
}

/// A deployment's logical revision: `revision-v1:sha256:<hex>`. Ordered by
/// its digest bytes, which is the order of its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RevisionId(pub Sha256);

impl fmt::Display for RevisionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{REVISION_PREFIX}{}", self.0.hex())
    }
}

impl Serialize for RevisionId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RevisionId {
    /// Accepts exactly the form [`RevisionId::parse`] accepts.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        RevisionId::parse(&text).ok_or_else(|| de::Error::custom("not a revision-v1:sha256: id"))
    }
}

impl RevisionId {
    /// Parses exactly the text [`Display`](fmt::Display) writes.
    pub fn parse(text: &str) -> Option<Self> {
        let hex = text.strip_prefix(REVISION_PREFIX)?;
        Sha256::parse_hex(hex).map(RevisionId)
    }
}

/// Checks one identifier against the one grammar: 1..=1,024 bytes, an ASCII
/// letter or digit, then ASCII letters, digits, `-`, `_`, `.` or `:`.
/// Case is significant.
pub fn check_identifier(field: &'static str, value: &str) -> Result<(), DeploymentError> {
    let bytes = value.as_bytes();
    let rule = if bytes.is_empty() {
        "is empty"
    } else if bytes.len() > MAX_IDENTIFIER_BYTES {
        "is longer than 1024 bytes"
    } else if !bytes.first().is_some_and(u8::is_ascii_alphanumeric) {
        "must start with an ASCII letter or digit"
    } else if !bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
    {
        "may hold only ASCII letters, digits, '-', '_', '.' and ':'"
    } else {
        return Ok(());
    };
    Err(DeploymentError::InvalidManifest { field, rule })
}

fn invalid(field: &'static str, rule: &'static str) -> DeploymentError {
    DeploymentError::InvalidManifest { field, rule }
}

fn check_set(field: &'static str, set: &mut [String]) -> Result<(), DeploymentError> {
    if set.len() > MAX_COLLECTION {
        return Err(invalid(field, "has more than 64 entries"));
    }
    for v in set.iter() {
        check_identifier(field, v)?;
    }
    set.sort_unstable();
    if set.windows(2).any(|w| w.first() == w.get(1)) {
        return Err(invalid(field, "names an entry twice"));
    }
    Ok(())
}

fn check_map(
    field: &'static str,
    map: &BTreeMap<String, String>,
    max_value: usize,
    rule: &'static str,
) -> Result<(), DeploymentError> {
    if map.len() > MAX_COLLECTION {
        return Err(invalid(field, "has more than 64 entries"));
    }
    for (k, v) in map {
        check_identifier(field, k)?;
        if v.len() > max_value {
            return Err(invalid(field, rule));
        }
    }
    Ok(())
}

impl DeploymentManifest {
    /// Validates every field and returns the normalized manifest (sets
    /// sorted). The catalog accepts only what this returns; its canonical
    /// form is at most [`MAX_MANIFEST_BYTES`], so it always decodes again.
    pub fn validate(mut self) -> Result<Self, DeploymentError> {
        check_identifier("id", &self.id)?;
        if self.id == RESERVED_ID {
            return Err(DeploymentError::ReservedId);
        }
        check_identifier("tenant", &self.tenant)?;
        if let Some(ns) = &self.namespace {
            check_identifier("namespace", ns)?;
        }
        check_identifier("service", &self.service)?;
        if !(MIN_WEIGHT..=MAX_WEIGHT).contains(&self.route_weight) {
            return Err(DeploymentError::InvalidWeight(self.route_weight));
        }
        check_set("grants", &mut self.grants)?;
        let b = &self.budgets;
        for v in [
            b.memory_bytes,
            b.cpu_millis,
            b.max_concurrency,
            b.timeout_millis,
        ]
        .into_iter()
        .flatten()
        {
            if v == 0 || v > MAX_SAFE_INTEGER {
                return Err(invalid("budgets", "must be in 1..=2^53-1"));
            }
        }
        if let Some(pool) = &self.placement.pool {
            check_identifier("placement.pool", pool)?;
        }
        check_set("placement.zones", &mut self.placement.zones)?;
        let a = &self.availability;
        if a.max_instances == 0
            || a.max_instances > MAX_INSTANCES
            || a.min_instances > a.max_instances
        {
            return Err(invalid(
                "availability",
                "needs 0 <= min_instances <= max_instances, 1 <= max_instances <= 10000",
            ));
        }
        check_map(
            "labels",
            &self.labels,
            MAX_LABEL_VALUE_BYTES,
            "value is longer than 1024 bytes",
        )?;
        check_map(
            "annotations",
            &self.annotations,
            MAX_ANNOTATION_VALUE_BYTES,
            "value is longer than 4096 bytes",
        )?;
        // Most manifests are far below the bound: only one whose
        // over-estimate passes it pays for an exact canonical encoding.
        if self.canonical_len_bound() <= MAX_MANIFEST_BYTES {
            return Ok(self);
        }
        let len = self.canonical().len();
        if len > MAX_MANIFEST_BYTES {
            return Err(DeploymentError::ManifestTooLarge {
                len: len as u64,
                limit: MAX_MANIFEST_BYTES as u64,
            });
        }
        Ok(self)
    }

    /// Decodes and validates a manifest from any JSON spelling (key order,
    /// whitespace, digest hex case). The document bound is checked on the
    /// slice's length before parsing; each collection's bound as it is read.
    /// Total: every input is a manifest or a typed error.
    pub fn decode(bytes: &[u8]) -> Result<Self, DeploymentError> {
        if bytes.len() > MAX_MANIFEST_BYTES {
            return Err(DeploymentError::ManifestTooLarge {
                len: bytes.len() as u64,
                limit: MAX_MANIFEST_BYTES as u64,
            });
        }
        let m: DeploymentManifest = serde_json::from_slice(bytes)
            .map_err(|e| DeploymentError::MalformedManifest(e.to_string()))?;
        m.validate()
    }

    /// An upper bound on `self.canonical().len()`, computed without
    /// encoding: every key, brace, the digest and seven numbers of up to 24
    /// characters fit in [`CANONICAL_FIXED_BOUND`]; each string costs at most
    /// six bytes per byte (RFC 8785 escapes a control character as
    /// `\u00XX`, anything else as itself or two bytes) plus its quotes and
    /// separator. `canonical_len_bound_covers_the_encoding` checks it.
    pub fn canonical_len_bound(&self) -> usize {
        let string = |s: &str| s.len().saturating_mul(6).saturating_add(3);
        let entries = |m: &BTreeMap<String, String>| {
            m.iter().fold(0usize, |n, (k, v)| {
                n.saturating_add(string(k)).saturating_add(string(v))
            })
        };
        [
            self.id.as_str(),
            self.tenant.as_str(),
            self.namespace.as_deref().unwrap_or(""),
            self.service.as_str(),
            self.placement.pool.as_deref().unwrap_or(""),
        ]
        .into_iter()
        .chain(self.grants.iter().map(String::as_str))
        .chain(self.placement.zones.iter().map(String::as_str))
        .fold(CANONICAL_FIXED_BOUND, |n, s| n.saturating_add(string(s)))
        .saturating_add(entries(&self.labels))
        .saturating_add(entries(&self.annotations))
    }

    /// The canonical bytes: RFC 8785 of this manifest's JSON.
    pub fn canonical(&self) -> Vec<u8> {
        // Serializing this struct cannot fail (string keys, integers within
        // 2^53); an impossible failure yields an empty encoding, which no
        // decoder accepts.
        serde_json_canonicalizer::to_vec(self).unwrap_or_default()
    }

    /// The identity-only copy: the same manifest with `route_weight` = 1.
    pub fn identity(&self) -> Self {
        DeploymentManifest {
            route_weight: 1,
            ..self.clone()
        }
    }

    /// The bytes the revision hash covers: the domain tag, the canonical
    /// identity-only encoding's length as a big-endian `u64`, then that
    /// encoding.
    pub fn revision_preimage(&self) -> Vec<u8> {
        let encoded = self.identity().canonical();
        let mut pre = Vec::with_capacity(REVISION_DOMAIN.len() + 8 + encoded.len());
        pre.extend_from_slice(REVISION_DOMAIN);
        pre.extend_from_slice(&(encoded.len() as u64).to_be_bytes());
        pre.extend_from_slice(&encoded);
        pre
    }

    /// The deployment's logical revision. Depends on every field but the
    /// route weight; no clock, randomness, generation or iteration order.
    pub fn revision_id(&self) -> RevisionId {
        RevisionId(Sha256::of(&self.revision_preimage()))
    }
}

/// What [`any_case_digest`] accepts: `sha256:` (lowercase) and 64 hex
/// digits of either case.
#[cfg(feature = "schema")]
fn any_case_digest_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "The release: its component digest, `sha256:` followed by 64 hex digits \
                        (either case accepted; stored lowercase).",
        "type": "string",
        "pattern": "^sha256:[0-9a-fA-F]{64}$"
    })
}

fn any_case_digest<'de, D: Deserializer<'de>>(d: D) -> Result<Sha256, D::Error> {
    let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
    let bad = || de::Error::custom("release must be sha256: and 64 hex digits");
    let hex = text
        .strip_prefix(crate::release::SHA256_PREFIX)
        .ok_or_else(bad)?;
    if hex.len() != 64 {
        return Err(bad());
    }
    Sha256::parse_hex(&hex.to_ascii_lowercase()).ok_or_else(bad)
}

struct SeqVisitor;

impl<'de> Visitor<'de> for SeqVisitor {
    type Value = Vec<String>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an array of at most {MAX_COLLECTION} strings")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element::<String>()? {
            if out.len() == MAX_COLLECTION {
                return Err(de::Error::custom("more than 64 entries"));
            }
            out.push(v);
        }
        Ok(out)
    }
}

fn bounded_seq<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_seq(SeqVisitor)
}

struct MapVisitor;

impl<'de> Visitor<'de> for MapVisitor {
    type Value = BTreeMap<String, String>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an object of at most {MAX_COLLECTION} string values")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        while let Some((k, v)) = map.next_entry::<String, String>()? {
            if out.len() == MAX_COLLECTION {
                return Err(de::Error::custom("more than 64 entries"));
            }
            if out.insert(k, v).is_some() {
                return Err(de::Error::custom("a key appears twice"));
            }
        }
        Ok(out)
    }
}

fn bounded_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    d.deserialize_map(MapVisitor)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A valid manifest of tenant `acme`, service `api`; also the base of
    /// the deployment catalog's own fixtures.
    pub(crate) fn sample(id: &str) -> DeploymentManifest {
        DeploymentManifest {
            id: id.into(),
            tenant: "acme".into(),
            namespace: None,
            service: "api".into(),
            release: Sha256::of(b"component"),
            route_weight: 1,
            grants: vec![],
            budgets: ResourceBudgets::default(),
            placement: Placement::default(),
            availability: Availability::default(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn decode_normalizes_case_and_sets_and_is_order_free() {
        let hex = Sha256::of(b"component").hex().to_uppercase();
        let a = format!(
            r#"{{"id":"blue","tenant":"acme","service":"api","release":"sha256:{hex}","route_weight":5,"grants":["kv:write","kv:read"]}}"#
        );
        let b = format!(
            r#"{{ "grants":["kv:read","kv:write"], "route_weight":5, "release":"SHA256:{hex}", "service":"api","tenant":"acme","id":"blue" }}"#
        );
        let ma = DeploymentManifest::decode(a.as_bytes()).unwrap();
        let mb = DeploymentManifest::decode(b.as_bytes());
        assert!(mb.is_err(), "the prefix is not hex: it stays lowercase");
        let b = b.replace("SHA256", "sha256");
        let mb = DeploymentManifest::decode(b.as_bytes()).unwrap();
        assert_eq!(ma, mb);
        assert_eq!(ma.grants, vec!["kv:read", "kv:write"]);
        assert_eq!(ma.canonical(), mb.canonical());
        assert_eq!(ma.release, Sha256::of(b"component"));
    }

    #[test]
    fn weight_is_not_identity_but_every_other_field_is() {
        let m = sample("blue");
        let mut heavy = m.clone();
        heavy.route_weight = 10_000;
        assert_eq!(m.revision_id(), heavy.revision_id());
        let mut budget = m.clone();
        budget.budgets.memory_bytes = Some(1 << 20);
        assert_ne!(m.revision_id(), budget.revision_id());
        let mut grant = m.clone();
        grant.grants = vec!["kv:read".into()];
        assert_ne!(m.revision_id(), grant.revision_id());
        let mut ns = m.clone();
        ns.namespace = Some("prod".into());
        assert_ne!(m.revision_id(), ns.revision_id());
        let text = m.revision_id().to_string();
        assert!(text.starts_with(REVISION_PREFIX));
        assert_eq!(RevisionId::parse(&text), Some(m.revision_id()));
    }

    #[test]
    fn revision_preimage_is_the_documented_construction() {
        let m = sample("blue");
        let pre = m.revision_preimage();
        let canon = m.canonical();
        assert_eq!(&pre[..REVISION_DOMAIN.len()], REVISION_DOMAIN);
        let len = u64::from_be_bytes(
            pre[REVISION_DOMAIN.len()..REVISION_DOMAIN.len() + 8]
                .try_into()
                .unwrap(),
        );
        assert_eq!(len as usize, canon.len());
        assert_eq!(&pre[REVISION_DOMAIN.len() + 8..], &canon[..]);
        let expected = format!(
            r#"{{"annotations":{{}},"availability":{{"max_instances":1,"min_instances":0}},"budgets":{{}},"grants":[],"id":"blue","labels":{{}},"placement":{{"zones":[]}},"release":"{}","route_weight":1,"service":"api","tenant":"acme"}}"#,
            Sha256::of(b"component")
        );
        assert_eq!(String::from_utf8(canon).unwrap(), expected);
    }

    #[test]
    fn bad_manifests_get_typed_errors() {
        let mut m = sample("default");
        assert_eq!(m.clone().validate(), Err(DeploymentError::ReservedId));
        m.id = "blue".into();
        m.route_weight = 0;
        assert_eq!(m.clone().validate(), Err(DeploymentError::InvalidWeight(0)));
        m.route_weight = 10_001;
        assert_eq!(
            m.clone().validate(),
            Err(DeploymentError::InvalidWeight(10_001))
        );
        m.route_weight = 1;
        m.tenant = "a".repeat(1025);
        assert!(matches!(
            m.clone().validate(),
            Err(DeploymentError::InvalidManifest {
                field: "tenant",
                ..
            })
        ));
        m.tenant = "a".repeat(1024);
        assert!(m.clone().validate().is_ok());
        m.tenant = "-x".into();
        assert!(m.clone().validate().is_err());
        m.tenant = "acme".into();
        m.grants = vec!["a".into(), "a".into()];
        assert!(m.clone().validate().is_err());
        m.grants = vec![];
        m.budgets.memory_bytes = Some(MAX_SAFE_INTEGER + 1);
        assert!(m.clone().validate().is_err());
        m.budgets.memory_bytes = Some(MAX_SAFE_INTEGER);
        assert!(m.clone().validate().is_ok());
        let big = vec![b' '; MAX_MANIFEST_BYTES + 1];
        assert!(matches!(
            DeploymentManifest::decode(&big),
            Err(DeploymentError::ManifestTooLarge { .. })
        ));
        let many: Vec<String> = (0..65).map(|i| format!("\"g{i}\"")).collect();
        let doc = format!(
            r#"{{"id":"b","tenant":"t","service":"s","release":"{}","route_weight":1,"grants":[{}]}}"#,
            Sha256::of(b"c"),
            many.join(",")
        );
        assert!(matches!(
            DeploymentManifest::decode(doc.as_bytes()),
            Err(DeploymentError::MalformedManifest(_))
        ));
        let dup = format!(
            r#"{{"id":"b","tenant":"t","service":"s","release":"{}","route_weight":1,"labels":{{"a":"1","a":"2"}}}}"#,
            Sha256::of(b"c")
        );
        assert!(DeploymentManifest::decode(dup.as_bytes()).is_err());
        let unknown = format!(
            r#"{{"id":"b","tenant":"t","service":"s","release":"{}","route_weight":1,"extra":1}}"#,
            Sha256::of(b"c")
        );
        assert!(DeploymentManifest::decode(unknown.as_bytes()).is_err());
        for junk in [&b""[..], b"[]", b"null", b"{", b"\xff"] {
            assert!(DeploymentManifest::decode(junk).is_err());
        }
    }

    /// Three revision ids computed by an independent implementation
    /// (Python: `json.dumps(sort_keys=True, separators=(',', ':'))`, which
    /// is RFC 8785 for ASCII strings and integers, then SHA-256 of the
    /// domain tag, the big-endian length and the bytes). The inputs are
    /// spelled in another key order, with whitespace and a route weight
    /// other than 1.
    #[test]
    fn revision_ids_match_an_independent_implementation() {
        let rel = Sha256::of(b"component");
        let cases = [
            (
                format!(
                    r#"{{"tenant":"acme", "service":"api", "route_weight":7, "release":"{rel}", "id":"blue"}}"#
                ),
                "c17148ba35e1b98a48aa81710c28d3ad5c57e7c1a25e5127a38f2624300da9b9",
                278,
            ),
            (
                format!(
                    r#"{{"id":"green","tenant":"acme","namespace":"prod","service":"api","release":"{rel}","route_weight":9000,
                    "grants":["kv:write","kv:read"],"budgets":{{"timeout_millis":30000,"memory_bytes":67108864}}}}"#
                ),
                "c4bb01395cbdc61930bcae19da057d3c982bfa15d6d4f732398b89ae0f59ec26",
                364,
            ),
            (
                format!(
                    r#"{{"id":"canary","tenant":"acme","service":"api","release":"{rel}","route_weight":1,
                    "labels":{{"team":"edge","stage":"canary"}},"annotations":{{"note":"dormant until invoked"}},
                    "availability":{{"min_instances":1,"max_instances":4}},
                    "placement":{{"zones":["eu-west-1b","eu-west-1a"],"pool":"edge"}}}}"#
                ),
                "0898e79962fdf5b07f3bb7d6e25036175017c185b0d7c733dc1e45e54c242747",
                379,
            ),
        ];
        for (json, hex, len) in cases {
            let m = DeploymentManifest::decode(json.as_bytes()).unwrap();
            assert_eq!(m.identity().canonical().len(), len, "{json}");
            assert_eq!(
                m.revision_id().to_string(),
                format!("{REVISION_PREFIX}{hex}")
            );
        }
    }

    fn text() -> impl proptest::strategy::Strategy<Value = String> {
        // Control characters (six bytes each), quotes and backslashes (two),
        // multi-byte characters (as themselves) and plain letters.
        // Control characters (six bytes each), quotes and backslashes (two),
        // multi-byte characters (as themselves) and plain letters.
        proptest::string::string_regex("[\\x00-\\x1f\"\\\\a-z\u{e9}\u{1f600}]{0,300}")
            .unwrap_or_else(|e| panic!("the pattern is a constant: {e}"))
    }

    /// The worst case for the over-estimate: every string of control
    /// characters (each `\u00XX`, six bytes), every optional field present,
    /// every number at `u64::MAX`. The estimate covers it, and by less than
    /// the fixed allowance: a smaller factor or allowance would not.
    #[test]
    fn canonical_len_bound_covers_the_worst_case() {
        let ctl = |n: usize| "\u{1}".repeat(n);
        // Distinct entries, still all control characters.
        let entry = |i: u8, n: usize| format!("{}{}", char::from(i + 2), ctl(n - 1));
        let mut m = sample(&ctl(1024));
        m.tenant = ctl(1024);
        m.namespace = Some(ctl(1024));
        m.service = ctl(1024);
        m.route_weight = u32::MAX;
        m.grants = (0..8).map(|i| entry(i, 1024)).collect();
        m.placement = Placement {
            pool: Some(ctl(1024)),
            zones: (0..8).map(|i| entry(i, 1024)).collect(),
        };
        m.budgets = ResourceBudgets {
            memory_bytes: Some(u64::MAX),
            cpu_millis: Some(u64::MAX),
            max_concurrency: Some(u64::MAX),
            timeout_millis: Some(u64::MAX),
        };
        m.availability = Availability {
            min_instances: u32::MAX,
            max_instances: u32::MAX,
        };
        m.labels = (0..8).map(|i| (entry(i, 1024), ctl(1024))).collect();
        m.annotations = (0..8).map(|i| (entry(i, 1024), ctl(4096))).collect();
        let len = m.canonical().len();
        let bound = m.canonical_len_bound();
        assert!(len <= bound, "{len} > {bound}");
        assert!(bound - len < CANONICAL_FIXED_BOUND, "{bound} - {len}");
        // What the strings cost exactly, and what is left for the rest.
        let strings = 5 + 8 + 8 + 2 * 8 + 2 * 8;
        let rest = len - (bound - CANONICAL_FIXED_BOUND - 3 * strings);
        assert!(rest > 400 && rest < CANONICAL_FIXED_BOUND, "{rest}");
    }

    proptest::proptest! {
        /// The over-estimate `validate` uses to skip the exact encoding is
        /// never below the encoding, for any field values (valid or not,
        /// numbers up to `u64::MAX` included).
        #[test]
        fn canonical_len_bound_covers_the_encoding(
            strings in proptest::collection::vec(text(), 7),
            grants in proptest::collection::vec(text(), 0..16),
            zones in proptest::collection::vec(text(), 0..16),
            labels in proptest::collection::btree_map(text(), text(), 0..16),
            annotations in proptest::collection::btree_map(text(), text(), 0..16),
            numbers in proptest::collection::vec(proptest::prelude::any::<u64>(), 7),
            some in proptest::collection::vec(proptest::prelude::any::<bool>(), 6),
        ) {
            let n = |i: usize| numbers.get(i).copied().unwrap_or(u64::MAX);
            let opt = |i: usize, v: u64| some.get(i).copied().unwrap_or(true).then_some(v);
            let st = |i: usize| strings.get(i).cloned().unwrap_or_default();
            let m = DeploymentManifest {
                id: st(0),
                tenant: st(1),
                namespace: some.first().copied().unwrap_or(true).then(|| st(2)),
                service: st(3),
                release: Sha256::of(st(4).as_bytes()),
                route_weight: u32::try_from(n(0) >> 32).unwrap_or(u32::MAX),
                grants,
                budgets: ResourceBudgets {
                    memory_bytes: opt(1, n(1)),
                    cpu_millis: opt(2, n(2)),
                    max_concurrency: opt(3, n(3)),
                    timeout_millis: opt(4, n(4)),
                },
                placement: Placement {
                    pool: some.get(5).copied().unwrap_or(true).then(|| st(5)),
                    zones,
                },
                availability: Availability {
                    min_instances: u32::try_from(n(5) >> 32).unwrap_or(u32::MAX),
                    max_instances: u32::try_from(n(6) >> 32).unwrap_or(u32::MAX),
                },
                labels,
                annotations,
            };
            let len = m.canonical().len();
            proptest::prop_assert!(len > 0 && len <= m.canonical_len_bound(), "{len} > {}", m.canonical_len_bound());
        }
    }

    /// Where the over-estimate passes the bound, `validate` decides on the
    /// exact length: a manifest of exactly `MAX_MANIFEST_BYTES` canonical
    /// bytes is accepted, one byte more is refused, typed.
    #[test]
    fn the_exact_length_decides_above_the_estimate() {
        // Annotations of plain letters fill the room below the bound.
        let mut m = sample("b");
        let mut i = 0;
        while m.canonical().len() < MAX_MANIFEST_BYTES {
            let key = format!("k{i:03}");
            m.annotations.insert(key.clone(), String::new());
            let room = MAX_MANIFEST_BYTES.saturating_sub(m.canonical().len());
            m.annotations
                .insert(key, "v".repeat(room.min(MAX_ANNOTATION_VALUE_BYTES)));
            i += 1;
            assert!(i <= MAX_COLLECTION, "the room did not fit");
        }
        assert_eq!(m.canonical().len(), MAX_MANIFEST_BYTES);
        assert!(m.canonical_len_bound() > MAX_MANIFEST_BYTES);
        assert!(m.clone().validate().is_ok());
        let last = m.annotations.keys().last().cloned().unwrap_or_default();
        if let Some(v) = m.annotations.get_mut(&last) {
            v.pop();
            v.push_str("vv");
        }
        assert_eq!(m.canonical().len(), MAX_MANIFEST_BYTES + 1);
        assert_eq!(
            m.validate(),
            Err(DeploymentError::ManifestTooLarge {
                len: MAX_MANIFEST_BYTES as u64 + 1,
                limit: MAX_MANIFEST_BYTES as u64,
            })
        );
    }
}
