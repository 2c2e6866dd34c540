//! The COMPLETE record: the versioned integrity record written last into a
//! release's staging directory, before the rename that publishes it.
//!
//! The record is canonical JSON, its fields in this order and nothing else:
//!
//! | field                  | meaning                                              |
//! |------------------------|------------------------------------------------------|
//! | `format_version`       | `1` (trusted-local) — `2` (enforced) is parsed and refused as unsupported |
//! | `component_digest`     | `sha256:` digest of the component bytes (the release identity) |
//! | `component_size_bytes` | the component's byte length                          |
//! | `metadata_digest`      | `sha256:` of the exact stored `metadata.json` bytes  |
//! | `manifest_digest`      | `sha256:` of the exact canonical `manifest.json` bytes |
//! | `admission_digest`     | version 2 only: `sha256:` of the retained `admission.json` |
//!
//! Canonical means: no whitespace, no trailing newline, fields in the order
//! above, digests in lower case, integers without sign, fraction or exponent,
//! no escapes. [`decode`] accepts exactly the bytes [`CompleteRecord::encode`]
//! produces and nothing else. It is total: any input yields a record or a
//! typed [`CompleteError`], never a panic, and it looks at no more than
//! [`MAX_COMPLETE_BYTES`] of input — the bound is checked on the length
//! before anything is parsed (and a reader checks the file length before it
//! allocates, with [`check_complete_len`]).
//!
//! A record that decodes is not yet a valid release: [`CompleteRecord::verify`]
//! checks it against the directory name, the descriptor's digest and size,
//! and the actual stored bytes. Valid JSON alone cannot make a changed
//! descriptor, contract or manifest acceptable.

use crate::class::Class;
use serde::Deserialize;
use thiserror::Error;

use super::Sha256;

/// The fixed upper bound on a COMPLETE record, in bytes, independent of every
/// configurable payload limit.
pub const MAX_COMPLETE_BYTES: u64 = 1024;

/// The completion marker earlier catalogs wrote, without fingerprints.
pub const LEGACY_MARKER: &[u8] = b"complete\n";

/// The format version this build writes and accepts (trusted-local).
pub const FORMAT_VERSION_TRUSTED_LOCAL: u64 = 1;

/// The enforced-mode format version: recognised, refused until enforced mode
/// exists in custos.
pub const FORMAT_VERSION_ENFORCED: u64 = 2;

/// The file name of the record inside a release directory.
pub const COMPLETE_FILE: &str = "COMPLETE";

/// A decoded, format-version-1 COMPLETE record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CompleteRecord {
    /// The release identity: SHA-256 of the component bytes.
    pub component_digest: Sha256,
    /// The component's length in bytes.
    pub component_size_bytes: u64,
    /// SHA-256 of the exact stored `metadata.json` bytes.
    pub metadata_digest: Sha256,
    /// SHA-256 of the exact canonical `manifest.json` bytes.
    pub manifest_digest: Sha256,
}

/// Why a COMPLETE record was refused. Every variant except
/// [`CompleteError::EnforcedUnsupported`] is a `CorruptArtifact`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
pub enum CompleteError {
    /// The record is longer than [`MAX_COMPLETE_BYTES`].
    #[error("CorruptArtifact: completion record is {len} bytes, over the fixed {max}-byte bound", max = MAX_COMPLETE_BYTES)]
    TooLarge {
        /// The record's length.
        len: u64,
    },
    /// The literal legacy marker `complete\n`.
    #[error("CorruptArtifact: legacy catalog completion marker is unsupported")]
    LegacyMarker,
    /// Not a JSON object of the record's fields: damage, an unknown or
    /// duplicate field, a missing field, a wrong type.
    #[error("CorruptArtifact: completion record is malformed: {detail}")]
    Malformed {
        /// What the parser reported.
        detail: String,
    },
    /// A `format_version` this build does not know.
    #[error("CorruptArtifact: completion record has unknown format_version {version}")]
    UnknownVersion {
        /// The stored version.
        version: u64,
    },
    /// A well-formed version-2 (enforced) record: refused until enforced mode
    /// exists; never downgraded or upgraded.
    #[error(
        "Unsupported: enforced completion record (format_version 2) requires an enforced catalog"
    )]
    EnforcedUnsupported,
    /// A field that is present where its version forbids it, or absent where
    /// its version requires it (`admission_digest`).
    #[error("CorruptArtifact: completion record field {field} is not allowed in format_version {version}")]
    FieldForVersion {
        /// The field.
        field: &'static str,
        /// The stored version.
        version: u64,
    },
    /// A digest that is not `sha256:` and 64 lowercase hex digits.
    #[error("CorruptArtifact: completion record field {field} is not a sha256 digest")]
    BadDigest {
        /// The field.
        field: &'static str,
    },
    /// Parses, but is not byte-for-byte the canonical encoding.
    #[error("CorruptArtifact: completion record is not canonically serialized")]
    NonCanonical,
    /// The record disagrees with the directory name, the descriptor or the
    /// stored bytes.
    #[error("CorruptArtifact: completion record {field} does not match the stored release")]
    Mismatch {
        /// What disagreed.
        field: &'static str,
    },
}

impl CompleteError {
    /// The error class: `"CorruptArtifact"`, or `"Unsupported"` for a
    /// version-2 record.
    pub fn class(&self) -> Class {
        match self {
            CompleteError::EnforcedUnsupported => Class::Unsupported,
            _ => Class::CorruptArtifact,
        }
    }
}

/// Checks a record file's length against the fixed bound, before a reader
/// allocates for it.
pub fn check_complete_len(len: u64) -> Result<(), CompleteError> {
    if len > MAX_COMPLETE_BYTES {
        Err(CompleteError::TooLarge { len })
    } else {
        Ok(())
    }
}

/// The wire shape, parsed strictly: unknown and duplicate fields are errors.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    format_version: u64,
    component_digest: String,
    component_size_bytes: u64,
    metadata_digest: String,
    manifest_digest: String,
    admission_digest: Option<String>,
}

fn digest(field: &'static str, text: &str) -> Result<Sha256, CompleteError> {
    Sha256::parse(text).ok_or(CompleteError::BadDigest { field })
}

/// Decodes a COMPLETE record. Total: every input is a record or a typed
/// refusal. Accepts exactly the canonical encoding of a version-1 record.
pub fn decode(bytes: &[u8]) -> Result<CompleteRecord, CompleteError> {
    let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    check_complete_len(len)?;
    if bytes == LEGACY_MARKER {
        return Err(CompleteError::LegacyMarker);
    }
    let wire: Wire = serde_json::from_slice(bytes).map_err(|e| CompleteError::Malformed {
        detail: e.to_string(),
    })?;
    match wire.format_version {
        FORMAT_VERSION_TRUSTED_LOCAL => {
            if wire.admission_digest.is_some() {
                return Err(CompleteError::FieldForVersion {
                    field: "admission_digest",
                    version: wire.format_version,
                });
            }
        }
        FORMAT_VERSION_ENFORCED => {
            // Parse every field of the enforced shape before refusing it, so
            // a damaged version-2 record is reported as damage.
            let admission =
                wire.admission_digest
                    .as_deref()
                    .ok_or(CompleteError::FieldForVersion {
                        field: "admission_digest",
                        version: wire.format_version,
                    })?;
            digest("component_digest", &wire.component_digest)?;
            digest("metadata_digest", &wire.metadata_digest)?;
            digest("manifest_digest", &wire.manifest_digest)?;
            digest("admission_digest", admission)?;
            return Err(CompleteError::EnforcedUnsupported);
        }
        version => return Err(CompleteError::UnknownVersion { version }),
    }
    let record = CompleteRecord {
        component_digest: digest("component_digest", &wire.component_digest)?,
        component_size_bytes: wire.component_size_bytes,
        metadata_digest: digest("metadata_digest", &wire.metadata_digest)?,
        manifest_digest: digest("manifest_digest", &wire.manifest_digest)?,
    };
    if record.encode() != bytes {
        return Err(CompleteError::NonCanonical);
    }
    Ok(record)
}

impl CompleteRecord {
    /// The record for a release's exact stored bytes.
    pub fn for_release(component: &[u8], metadata: &[u8], manifest: &[u8]) -> Self {
        CompleteRecord {
            component_digest: Sha256::of(component),
            component_size_bytes: u64::try_from(component.len()).unwrap_or(u64::MAX),
            metadata_digest: Sha256::of(metadata),
            manifest_digest: Sha256::of(manifest),
        }
    }

    /// The canonical encoding: the only bytes [`decode`] accepts for this
    /// record. Always well under [`MAX_COMPLETE_BYTES`] (about 300 bytes).
    pub fn encode(&self) -> Vec<u8> {
        format!(
            "{{\"format_version\":{},\"component_digest\":\"{}\",\"component_size_bytes\":{},\"metadata_digest\":\"{}\",\"manifest_digest\":\"{}\"}}",
            FORMAT_VERSION_TRUSTED_LOCAL,
            self.component_digest,
            self.component_size_bytes,
            self.metadata_digest,
            self.manifest_digest,
        )
        .into_bytes()
    }

    /// Verifies the record against everything it binds: the release
    /// directory's name, the descriptor's digest and size, and the actual
    /// stored component, metadata and manifest bytes. The first disagreement
    /// is a [`CompleteError::Mismatch`] naming it.
    pub fn verify(&self, stored: &StoredRelease<'_>) -> Result<(), CompleteError> {
        let mismatch = |field| Err(CompleteError::Mismatch { field });
        if Sha256::parse_hex(stored.directory_name) != Some(self.component_digest) {
            return mismatch("directory_name");
        }
        if stored.descriptor_digest != self.component_digest {
            return mismatch("descriptor component_digest");
        }
        if stored.descriptor_size_bytes != self.component_size_bytes {
            return mismatch("descriptor component_size_bytes");
        }
        if u64::try_from(stored.component.len()).ok() != Some(self.component_size_bytes) {
            return mismatch("component_size_bytes");
        }
        if Sha256::of(stored.component) != self.component_digest {
            return mismatch("component_digest");
        }
        if Sha256::of(stored.metadata) != self.metadata_digest {
            return mismatch("metadata_digest");
        }
        if Sha256::of(stored.manifest) != self.manifest_digest {
            return mismatch("manifest_digest");
        }
        Ok(())
    }
}

/// What a COMPLETE record is verified against: a release directory as read
/// back from disk, and the digest and size its decoded descriptor claims.
#[derive(Clone, Copy, Debug)]
pub struct StoredRelease<'a> {
    /// The release directory's name under `releases/` (64 hex digits).
    pub directory_name: &'a str,
    /// The component digest the descriptor (and manifest) claims.
    pub descriptor_digest: Sha256,
    /// The component size the descriptor claims.
    pub descriptor_size_bytes: u64,
    /// The stored `component.wasm` bytes.
    pub component: &'a [u8],
    /// The stored `metadata.json` bytes.
    pub metadata: &'a [u8],
    /// The stored `manifest.json` bytes.
    pub manifest: &'a [u8],
}

/// A violation of the decoder's contract, found by [`check_decoder`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("complete decoder violation: {0}")]
pub struct DecoderViolation(pub String);

/// The decoder's contract on arbitrary input, run by the fuzz target, the
/// corpus replay and the property tests: an accepted input is within the
/// bound, is exactly the canonical encoding of what it decoded to, and
/// re-decodes to the same record; the legacy marker and oversize inputs are
/// refused with their own errors.
pub fn check_decoder(bytes: &[u8]) -> Result<(), DecoderViolation> {
    let result = decode(bytes);
    if bytes.len() as u64 > MAX_COMPLETE_BYTES
        && !matches!(result, Err(CompleteError::TooLarge { .. }))
    {
        return Err(DecoderViolation(format!(
            "{} bytes not refused as too large: {result:?}",
            bytes.len()
        )));
    }
    if bytes == LEGACY_MARKER && result != Err(CompleteError::LegacyMarker) {
        return Err(DecoderViolation(format!("legacy marker gave {result:?}")));
    }
    if let Ok(record) = result {
        let encoded = record.encode();
        if encoded != bytes {
            return Err(DecoderViolation("accepted a non-canonical input".into()));
        }
        if decode(&encoded) != Ok(record) {
            return Err(DecoderViolation("re-decode differs".into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        (
            b"\0asm component".to_vec(),
            br#"{"descriptor":{}}"#.to_vec(),
            br#"{"name":"m"}"#.to_vec(),
        )
    }

    fn stored<'a>(c: &'a [u8], m: &'a [u8], n: &'a [u8], dir: &'a str) -> StoredRelease<'a> {
        StoredRelease {
            directory_name: dir,
            descriptor_digest: Sha256::of(c),
            descriptor_size_bytes: c.len() as u64,
            component: c,
            metadata: m,
            manifest: n,
        }
    }

    #[test]
    fn encodes_fields_in_spec_order_and_round_trips() {
        let (c, m, n) = sample();
        let r = CompleteRecord::for_release(&c, &m, &n);
        let bytes = r.encode();
        let text = String::from_utf8(bytes.clone()).unwrap_or_default();
        let order = [
            "format_version",
            "component_digest",
            "component_size_bytes",
            "metadata_digest",
            "manifest_digest",
        ];
        let positions: Vec<usize> = order.iter().filter_map(|f| text.find(f)).collect();
        assert_eq!(positions.len(), order.len());
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert!(bytes.len() as u64 <= MAX_COMPLETE_BYTES);
        assert_eq!(decode(&bytes), Ok(r));
        let dir = r.component_digest.hex();
        assert_eq!(r.verify(&stored(&c, &m, &n, &dir)), Ok(()));
    }

    #[test]
    fn legacy_marker_has_the_spec_message() {
        let e = decode(b"complete\n").err();
        assert_eq!(e, Some(CompleteError::LegacyMarker));
        assert_eq!(
            e.map(|e| e.to_string()),
            Some("CorruptArtifact: legacy catalog completion marker is unsupported".into())
        );
    }

    #[test]
    fn oversize_is_refused_before_parsing() {
        let mut big = vec![b' '; 1025];
        big[0] = b'{';
        assert_eq!(decode(&big), Err(CompleteError::TooLarge { len: 1025 }));
        assert!(check_complete_len(1024).is_ok());
        assert!(check_complete_len(u64::MAX).is_err());
    }

    fn text(r: &CompleteRecord) -> String {
        String::from_utf8(r.encode()).unwrap_or_default()
    }

    #[test]
    fn non_canonical_unknown_duplicate_and_versions_are_refused() {
        let (c, m, n) = sample();
        let r = CompleteRecord::for_release(&c, &m, &n);
        let t = text(&r);
        let spaced = t.replacen(':', ": ", 1);
        assert_eq!(decode(spaced.as_bytes()), Err(CompleteError::NonCanonical));
        let newline = format!("{t}\n");
        assert_eq!(decode(newline.as_bytes()), Err(CompleteError::NonCanonical));
        let escaped = t.replacen("sha256", "\\u0073ha256", 1);
        assert_eq!(decode(escaped.as_bytes()), Err(CompleteError::NonCanonical));
        let unknown = t.replacen('}', ",\"extra\":1}", 1);
        assert!(matches!(
            decode(unknown.as_bytes()),
            Err(CompleteError::Malformed { .. })
        ));
        let dup = t.replacen('}', ",\"component_size_bytes\":14}", 1);
        assert!(matches!(
            decode(dup.as_bytes()),
            Err(CompleteError::Malformed { .. })
        ));
        let upper = t.replacen(
            &r.metadata_digest.hex(),
            &r.metadata_digest.hex().to_uppercase(),
            1,
        );
        assert_eq!(
            decode(upper.as_bytes()),
            Err(CompleteError::BadDigest {
                field: "metadata_digest"
            })
        );
        let v3 = t.replacen("\"format_version\":1", "\"format_version\":3", 1);
        assert_eq!(
            decode(v3.as_bytes()),
            Err(CompleteError::UnknownVersion { version: 3 })
        );
        let v1_adm = t.replacen(
            '}',
            &format!(",\"admission_digest\":\"{}\"}}", r.manifest_digest),
            1,
        );
        assert!(matches!(
            decode(v1_adm.as_bytes()),
            Err(CompleteError::FieldForVersion { .. })
        ));
        let v2 = v1_adm.replacen("\"format_version\":1", "\"format_version\":2", 1);
        let e = decode(v2.as_bytes());
        assert_eq!(e, Err(CompleteError::EnforcedUnsupported));
        assert_eq!(e.err().map(|e| e.class()), Some(Class::Unsupported));
        let v2_missing = t.replacen("\"format_version\":1", "\"format_version\":2", 1);
        assert!(matches!(
            decode(v2_missing.as_bytes()),
            Err(CompleteError::FieldForVersion { .. })
        ));
        let float = t.replacen("\"format_version\":1", "\"format_version\":1.0", 1);
        assert!(matches!(
            decode(float.as_bytes()),
            Err(CompleteError::Malformed { .. })
        ));
        assert!(matches!(decode(b""), Err(CompleteError::Malformed { .. })));
        assert!(matches!(
            decode(b"[]"),
            Err(CompleteError::Malformed { .. })
        ));
    }

    #[test]
    fn verify_names_each_mismatch() {
        let (c, m, n) = sample();
        let r = CompleteRecord::for_release(&c, &m, &n);
        let dir = r.component_digest.hex();
        let other = Sha256::of(b"other").hex();
        let mismatch = |s: StoredRelease<'_>| match r.verify(&s) {
            Err(CompleteError::Mismatch { field }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(mismatch(stored(&c, &m, &n, &other)), "directory_name");
        assert_eq!(mismatch(stored(&c, b"{}", &n, &dir)), "metadata_digest");
        assert_eq!(mismatch(stored(&c, &m, b"{}", &dir)), "manifest_digest");
        let mut s = stored(&c, &m, &n, &dir);
        s.descriptor_size_bytes += 1;
        assert_eq!(mismatch(s), "descriptor component_size_bytes");
        let flipped = {
            let mut x = c.clone();
            x[0] ^= 1;
            x
        };
        let mut s = stored(&flipped, &m, &n, &dir);
        s.descriptor_digest = r.component_digest;
        assert_eq!(mismatch(s), "component_digest");
    }
}
