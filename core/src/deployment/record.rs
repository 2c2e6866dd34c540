//! The catalog record `catalog.json`: one versioned document holding the desired deployments, their object
//! generations, the receipt ring and the compiled snapshot's records, with
//! a SHA-256 checksum over the canonical payload.
//!
//! The document is itself RFC 8785 canonical:
//! `{"checksum":"sha256:<hex>","format":1,"payload":<JCS payload>}`. The
//! encoder streams it into **one** buffer bounded by the caller's state-byte
//! limit (the payload is written by the canonicalizer straight into it, the
//! checksum placeholder filled in afterwards): no second payload-sized tree
//! or buffer. The decoder is total and strict: the envelope's bytes are
//! checked literally, the checksum over the payload bytes as stored, the
//! payload decoded and re-encoded to exactly those bytes, and the catalog's
//! invariants checked ([`Catalog::check`]).

use std::io::{self, Write};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256 as Hasher};
use thiserror::Error;

use super::manifest::{DeploymentManifest, RevisionId};
use super::route::Snapshot;
use super::state::{Catalog, ReceiptRing, VersionedDeployment};
use crate::release::Sha256;

/// The record format this build writes and reads.
pub const FORMAT: u32 = 1;
/// The default bound of a serialized catalog (64 MiB).
pub const MAX_STATE_BYTES: u64 = 64 * 1024 * 1024;

const HEAD: &[u8] = b"{\"checksum\":\"sha256:";
const MIDDLE: &[u8] = b"\",\"format\":1,\"payload\":";
const HEX_LEN: usize = 64;

/// Why a record could not be written or read.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RecordError {
    /// The encoding would pass the state-byte limit.
    #[error("ResourceExhausted: the catalog record exceeds its {limit}-byte bound")]
    TooLarge {
        /// The bound.
        limit: u64,
    },
    /// Stored bytes that are not a record of this format.
    #[error("CorruptArtifact: catalog.json is {0}")]
    Corrupt(&'static str),
}

/// One compiled record as persisted (what reopening rebuilds and compares).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StoredRecord {
    /// The deployment id.
    pub id: String,
    /// Its revision.
    pub revision: RevisionId,
    /// Its release.
    pub release: Sha256,
    /// Its object generation.
    pub generation: u64,
    /// Its weight.
    pub weight: u32,
    /// Its exports (canonical JSON).
    pub exports: String,
}

/// An object generation entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ObjectGeneration {
    /// The deployment id.
    pub id: String,
    /// Its stamp.
    pub generation: u64,
}

/// The checksummed payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload {
    generation: u64,
    deployments: Vec<DeploymentManifest>,
    object_generations: Vec<ObjectGeneration>,
    receipts: ReceiptRing,
    snapshot: Vec<StoredRecord>,
}

/// The persisted form of a snapshot's records.
pub fn stored_records(snapshot: &Snapshot) -> Vec<StoredRecord> {
    snapshot
        .records
        .iter()
        .map(|r| StoredRecord {
            id: r.id.clone(),
            revision: r.revision,
            release: r.release,
            generation: r.generation,
            weight: r.weight,
            exports: r.exports.clone(),
        })
        .collect()
}

struct Bounded {
    buf: Vec<u8>,
    limit: usize,
}

impl Write for Bounded {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.limit {
            return Err(io::Error::other("over the state-byte bound"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Encodes `catalog` with its compiled `snapshot` into one buffer of at
/// most `limit` bytes.
pub fn encode(catalog: &Catalog, snapshot: &Snapshot, limit: u64) -> Result<Vec<u8>, RecordError> {
    let limit_usize = usize::try_from(limit).unwrap_or(usize::MAX);
    let too_large = RecordError::TooLarge { limit };
    let payload = Payload {
        generation: catalog.generation,
        deployments: catalog
            .objects
            .values()
            .map(|d| d.manifest.clone())
            .collect(),
        object_generations: catalog
            .objects
            .values()
            .map(|d| ObjectGeneration {
                id: d.manifest.id.clone(),
                generation: d.generation,
            })
            .collect(),
        receipts: catalog.receipts.clone(),
        snapshot: stored_records(snapshot),
    };
    let mut out = Bounded {
        buf: Vec::new(),
        limit: limit_usize,
    };
    out.write_all(HEAD).map_err(|_| too_large.clone())?;
    let hex_at = out.buf.len();
    out.write_all(&[b'0'; HEX_LEN])
        .map_err(|_| too_large.clone())?;
    out.write_all(MIDDLE).map_err(|_| too_large.clone())?;
    let payload_at = out.buf.len();
    serde_json_canonicalizer::to_writer(&payload, &mut out).map_err(|_| too_large.clone())?;
    let payload_end = out.buf.len();
    out.write_all(b"}").map_err(|_| too_large)?;
    let digest = Sha256(Hasher::digest(out.buf.get(payload_at..payload_end).unwrap_or(&[])).into());
    if let Some(slot) = out.buf.get_mut(hex_at..hex_at + HEX_LEN) {
        slot.copy_from_slice(digest.hex().as_bytes());
    }
    Ok(out.buf)
}

/// A decoded record: the catalog and the persisted snapshot records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The desired state.
    pub catalog: Catalog,
    /// The compiled records as persisted.
    pub snapshot: Vec<StoredRecord>,
}

/// Decodes a record read under the bound `limit`. Total.
pub fn decode(bytes: &[u8], limit: u64) -> Result<Decoded, RecordError> {
    if bytes.len() as u64 > limit {
        return Err(RecordError::TooLarge { limit });
    }
    let corrupt = RecordError::Corrupt;
    let rest = bytes
        .strip_prefix(HEAD)
        .ok_or(corrupt("not a catalog record of format 1"))?;
    let hex = rest.get(..HEX_LEN).ok_or(corrupt("truncated"))?;
    let rest = rest
        .get(HEX_LEN..)
        .and_then(|r| r.strip_prefix(MIDDLE))
        .ok_or(corrupt("not a catalog record of format 1"))?;
    let payload = rest.strip_suffix(b"}").ok_or(corrupt("truncated"))?;
    let stored = std::str::from_utf8(hex)
        .ok()
        .and_then(Sha256::parse_hex)
        .ok_or(corrupt("damaged (checksum field)"))?;
    if Sha256(Hasher::digest(payload).into()) != stored {
        return Err(corrupt("damaged (checksum mismatch)"));
    }
    let p: Payload = serde_json::from_slice(payload).map_err(|_| corrupt("damaged (payload)"))?;
    let again = serde_json_canonicalizer::to_vec(&p).map_err(|_| corrupt("damaged (payload)"))?;
    if again != payload {
        return Err(corrupt("not canonically encoded"));
    }
    if p.deployments.len() != p.object_generations.len() {
        return Err(corrupt("inconsistent (object generations)"));
    }
    let mut catalog = Catalog {
        generation: p.generation,
        objects: Default::default(),
        receipts: p.receipts,
    };
    for (m, g) in p.deployments.into_iter().zip(p.object_generations) {
        if m.id != g.id || catalog.objects.contains_key(&m.id) {
            return Err(corrupt("inconsistent (object generations)"));
        }
        catalog.objects.insert(
            m.id.clone(),
            VersionedDeployment {
                manifest: m,
                generation: g.generation,
            },
        );
    }
    catalog
        .check()
        .map_err(|_| corrupt("inconsistent (catalog invariants)"))?;
    Ok(Decoded {
        catalog,
        snapshot: p.snapshot,
    })
}

/// The reopening rule: the snapshot rebuilt from the stored desired state
/// and the releases as they are now must equal the persisted one, record by
/// record — a valid checksum never bypasses it. One difference is allowed:
/// a release revoked or retired since contributes no endpoints now
/// (`exports` rebuilt as `[]`), and its row stays as a non-authorizing one.
/// Returns the first difference.
pub fn check_rebuilt(rebuilt: &[StoredRecord], stored: &[StoredRecord]) -> Result<(), String> {
    if rebuilt.len() != stored.len() {
        return Err(format!(
            "{} records rebuilt, {} stored",
            rebuilt.len(),
            stored.len()
        ));
    }
    for (r, s) in rebuilt.iter().zip(stored) {
        let revoked_since = r.exports == "[]" && s.exports != "[]";
        let same = r.id == s.id
            && r.revision == s.revision
            && r.release == s.release
            && r.generation == s.generation
            && r.weight == s.weight
            && (r.exports == s.exports || revoked_since);
        if !same {
            return Err(format!("deployment {:?} (release {})", s.id, s.release));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deployment::route::{compile, ReleaseFacts};
    use crate::deployment::state::{decide, Mutation, Request};
    use crate::release::contract::tests::api_contract;

    fn source(_: &Sha256) -> Result<Option<ReleaseFacts>, String> {
        let contract = api_contract("run", vec![], vec![]);
        Ok(Some(ReleaseFacts::eligible("acme", contract)))
    }

    fn sample() -> (Catalog, Snapshot) {
        let m = DeploymentManifest::decode(
            format!(
                r#"{{"id":"blue","tenant":"acme","service":"api","release":"{}","route_weight":3}}"#,
                Sha256::of(b"c")
            )
            .as_bytes(),
        )
        .unwrap();
        let req = Request {
            tenant: Some("acme".into()),
            mutation: Mutation::Apply {
                manifest: Box::new(m),
                expected: Some(0),
            },
            compiled_at: 0,
            operation: None,
        };
        let next = decide(&Catalog::default(), &req).unwrap().next.unwrap();
        let snap = compile(&next, &source).unwrap();
        (next, snap)
    }

    #[test]
    fn a_record_round_trips_and_every_damage_is_refused() {
        let (c, s) = sample();
        let bytes = encode(&c, &s, MAX_STATE_BYTES).unwrap();
        let d = decode(&bytes, MAX_STATE_BYTES).unwrap();
        assert_eq!(d.catalog, c);
        assert_eq!(d.snapshot, stored_records(&s));
        // The document is canonical JSON itself.
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(serde_json_canonicalizer::to_vec(&v).unwrap(), bytes);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(
                decode(&bad, MAX_STATE_BYTES).is_err(),
                "flip at {i} accepted"
            );
        }
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n], MAX_STATE_BYTES).is_err());
        }
        assert_eq!(
            encode(&c, &s, 100),
            Err(RecordError::TooLarge { limit: 100 })
        );
        assert!(decode(&bytes, 100).is_err());
    }

    #[test]
    fn a_rebuilt_snapshot_must_equal_the_stored_one_but_for_a_revocation() {
        let (_, s) = sample();
        let stored = stored_records(&s);
        assert_eq!(check_rebuilt(&stored, &stored), Ok(()));
        let mut changed = stored.clone();
        changed[0].exports = r#"[{"contract":"api","fingerprint":"x","functions":[]}]"#.into();
        assert!(check_rebuilt(&changed, &stored).is_err());
        let mut revoked = stored.clone();
        revoked[0].exports = "[]".into();
        assert_eq!(check_rebuilt(&revoked, &stored), Ok(()));
        let mut weight = stored.clone();
        weight[0].weight += 1;
        assert!(check_rebuilt(&weight, &stored).is_err());
        assert!(check_rebuilt(&[], &stored).is_err());
    }
}
