//! The release descriptor and the metadata codec: `metadata.json` holds the
//! compact descriptor (the manifest summary the index retains and pages
//! return) and the full contract metadata.
//!
//! Encoding ([`ReleaseMetadata::encode_checked`]) checks the contract's type
//! structure before serializing, then decodes the exact serialized bytes
//! with the production decoder ([`ReleaseMetadata::decode`]) and requires
//! equality — so the catalog never stores metadata that fetch or reopen
//! cannot read back. Decoding checks the length first, parses the JSON
//! (whose reader keeps its recursion limit), checks the contract's type
//! structure on the parsed value before converting it, and accepts only the
//! canonical bytes.

use std::mem::size_of;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use super::bounds::{BoundError, EntryFootprint};
use super::contract::{shape_of_json, Contract};
use super::manifest::Manifest;
use super::Sha256;

/// The metadata format version.
pub const METADATA_FORMAT: u32 = 1;

/// The compact descriptor of a release: the manifest summary plus the
/// component's identity and size. Retained in the in-memory index and
/// returned by catalog pages; the contract stays on disk.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Descriptor {
    /// The release identity.
    pub component_digest: Sha256,
    /// The component's byte length.
    pub component_size_bytes: u64,
    /// SHA-256 of the canonical `manifest.json`.
    pub manifest_digest: Sha256,
    /// The manifest's name.
    pub name: String,
    /// The manifest's version.
    pub version: String,
    /// The manifest's tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The manifest's service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The manifest's declared exports (sorted).
    pub exports: Vec<String>,
}

impl Descriptor {
    /// The descriptor of a release with this manifest and component length.
    pub fn for_release(manifest: &Manifest, component_size_bytes: u64) -> Self {
        Descriptor {
            component_digest: manifest.component_digest,
            component_size_bytes,
            manifest_digest: Sha256::of(&manifest.canonical()),
            name: manifest.name.clone(),
            version: manifest.version.clone(),
            tenant: manifest.tenant.clone(),
            service: manifest.service.clone(),
            exports: manifest.exports.clone(),
        }
    }

    /// The release reference, `name@version`.
    pub fn reference(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }

    /// The key a reference is unique under: the reference within its
    /// tenant (`None`: the trusted-local releases). References are per
    /// tenant — two tenants may each publish `calc@1.0.0` — while the
    /// content digest is global.
    pub fn reference_key(&self) -> ReferenceKey {
        (self.tenant.clone(), self.reference())
    }

    /// The materialized bytes of the compact descriptor: its fixed size plus
    /// every string's bytes and every vector's element slots (what a page
    /// charges, and the descriptor part of the index charge).
    pub fn materialized_bytes(&self) -> u64 {
        let strings = [
            Some(&self.name),
            Some(&self.version),
            self.tenant.as_ref(),
            self.service.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(String::len)
        .chain(self.exports.iter().map(|e| e.len() + size_of::<String>()))
        .fold(0usize, usize::saturating_add);
        u64::try_from(size_of::<Descriptor>().saturating_add(strings)).unwrap_or(u64::MAX)
    }

    /// The index footprint: the descriptor bytes and each index key (digest,
    /// reference, tenant, service) charged separately.
    pub fn footprint(&self) -> EntryFootprint {
        let len = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        EntryFootprint {
            descriptor_bytes: self.materialized_bytes(),
            digest_key_bytes: len(size_of::<Sha256>()),
            reference_key_bytes: len(self.name.len()
                + 1
                + self.version.len()
                + size_of::<String>()
                + size_of::<Option<String>>()
                + self.tenant.as_ref().map_or(0, String::len)),
            tenant_key_bytes: self
                .tenant
                .as_ref()
                .map(|t| len(t.len() + size_of::<String>())),
            service_key_bytes: self
                .service
                .as_ref()
                .map(|s| len(s.len() + size_of::<String>())),
        }
    }
}

/// A release reference within its tenant: (tenant, `name@version`).
pub type ReferenceKey = (Option<String>, String);

/// What `metadata.json` holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReleaseMetadata {
    /// The compact descriptor.
    pub descriptor: Descriptor,
    /// The contract metadata.
    pub contract: Contract,
}

#[derive(Serialize)]
struct WireOut<'a> {
    format: u32,
    descriptor: &'a Descriptor,
    contract: &'a Contract,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireIn {
    format: u32,
    descriptor: Descriptor,
    contract: Contract,
}

/// Why metadata was refused.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
pub enum MetadataError {
    /// Longer than the bound it was read under.
    #[error("ResourceExhausted: metadata.json is {len} bytes, over the {limit}-byte bound")]
    TooLarge {
        /// The length.
        len: u64,
        /// The bound.
        limit: u64,
    },
    /// The contract's type structure exceeds a bound.
    #[error("{0}")]
    Contract(BoundError),
    /// Not JSON of the metadata's shape.
    #[error("CorruptArtifact: metadata.json is malformed: {0}")]
    Malformed(String),
    /// An unknown format.
    #[error("CorruptArtifact: metadata.json has unknown format {0}")]
    UnknownFormat(u32),
    /// Decodes, but is not the canonical bytes.
    #[error("CorruptArtifact: metadata.json is not canonically serialized")]
    NonCanonical,
    /// The production decoder read back something other than was encoded.
    #[error("InvalidContract: metadata does not survive its own codec: {0}")]
    RoundTrip(String),
}

impl ReleaseMetadata {
    /// Serializes, after checking the contract's type structure (explicit
    /// stack, before any recursive serialization).
    pub fn encode(&self) -> Result<Vec<u8>, MetadataError> {
        self.contract
            .shape()
            .check()
            .map_err(MetadataError::Contract)?;
        serde_json::to_vec(&WireOut {
            format: METADATA_FORMAT,
            descriptor: &self.descriptor,
            contract: &self.contract,
        })
        .map_err(|e| MetadataError::RoundTrip(e.to_string()))
    }

    /// Serializes, then decodes the exact bytes with [`ReleaseMetadata::decode`]
    /// under `limit` and checks equality: what publication writes.
    pub fn encode_checked(&self, limit: u64) -> Result<Vec<u8>, MetadataError> {
        let bytes = self.encode()?;
        let back = ReleaseMetadata::decode(&bytes, limit)?;
        if back != *self {
            return Err(MetadataError::RoundTrip("decoded metadata differs".into()));
        }
        Ok(bytes)
    }

    /// Decodes stored `metadata.json`: length checked against `limit` first,
    /// the contract's type structure checked on the parsed JSON before
    /// conversion, canonical bytes only. Total.
    pub fn decode(bytes: &[u8], limit: u64) -> Result<Self, MetadataError> {
        let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if len > limit {
            return Err(MetadataError::TooLarge { len, limit });
        }
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| MetadataError::Malformed(e.to_string()))?;
        if let Some(contract) = value.get("contract") {
            shape_of_json(contract)
                .check()
                .map_err(MetadataError::Contract)?;
        }
        let wire: WireIn =
            serde_json::from_value(value).map_err(|e| MetadataError::Malformed(e.to_string()))?;
        if wire.format != METADATA_FORMAT {
            return Err(MetadataError::UnknownFormat(wire.format));
        }
        let meta = ReleaseMetadata {
            descriptor: wire.descriptor,
            contract: wire.contract,
        };
        if meta.encode()? != bytes {
            return Err(MetadataError::NonCanonical);
        }
        Ok(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::contract::tests::api_contract;
    use crate::release::contract::{Field, Param, ValType};

    fn manifest() -> Manifest {
        Manifest {
            name: "hello".into(),
            version: "1".into(),
            tenant: Some("acme".into()),
            service: None,
            component_digest: Sha256::of(b"c"),
            exports: vec!["api".into()],
        }
    }

    fn contract(ty: ValType) -> Contract {
        let x = Param {
            name: "x".into(),
            ty,
        };
        api_contract("f", vec![x], vec![ValType::String])
    }

    fn deep(n: u32) -> ValType {
        let mut t = ValType::U8;
        for _ in 1..n {
            t = ValType::Record(vec![Field {
                name: "f".into(),
                ty: t,
            }]);
        }
        t
    }

    #[test]
    fn round_trip_is_exact_and_canonical() {
        let m = ReleaseMetadata {
            descriptor: Descriptor::for_release(&manifest(), 1),
            contract: contract(deep(32)),
        };
        let bytes = m.encode_checked(1 << 20).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ReleaseMetadata::decode(&bytes, 1 << 20), Ok(m));
        let mut spaced = bytes.clone();
        spaced.push(b' ');
        assert_eq!(
            ReleaseMetadata::decode(&spaced, 1 << 20),
            Err(MetadataError::NonCanonical)
        );
        assert!(matches!(
            ReleaseMetadata::decode(&bytes, 10),
            Err(MetadataError::TooLarge { .. })
        ));
    }

    #[test]
    fn too_deep_is_refused_on_encode_and_on_read() {
        let m = ReleaseMetadata {
            descriptor: Descriptor::for_release(&manifest(), 1),
            contract: contract(deep(33)),
        };
        assert!(matches!(m.encode(), Err(MetadataError::Contract(_))));
        // Stored bytes of a too-deep contract (written by hand) are refused
        // before conversion.
        let raw = serde_json::to_vec(&WireOut {
            format: METADATA_FORMAT,
            descriptor: &m.descriptor,
            contract: &m.contract,
        })
        .unwrap_or_default();
        assert!(matches!(
            ReleaseMetadata::decode(&raw, 1 << 20),
            Err(MetadataError::Contract(_))
        ));
        // Far deeper nesting hits the JSON reader's own recursion limit.
        let bomb = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(
            ReleaseMetadata::decode(bomb.as_bytes(), 1 << 20),
            Err(MetadataError::Malformed(_))
        ));
    }

    #[test]
    fn footprint_charges_each_key() {
        let d = Descriptor::for_release(&manifest(), 1);
        let f = d.footprint();
        assert!(f.descriptor_bytes >= size_of::<Descriptor>() as u64);
        assert!(f.tenant_key_bytes.is_some() && f.service_key_bytes.is_none());
        assert_eq!(d.reference(), "hello@1");
    }
}
