//! The release catalog's rules: the COMPLETE integrity record and
//! the catalog's bounds with their conservative index accounting.
//!
//! Everything here is pure: the filesystem shell (`custos-fs`) reads bytes,
//! asks these functions, and writes what they allow. Nothing here touches a
//! file, reads a clock or draws randomness.
//!
//! - [`complete`] — the versioned COMPLETE record: canonical JSON, a fixed
//!   1 KiB bound, a total decoder and the integrity check.
//! - [`bounds`] — the configurable limits with their defaults, the index
//!   accounting, and the checks that run before staging.
//! - [`lifecycle`] — authoritative lifecycle membership (member, revoked,
//!   retired) with a bounded operation-outcome record.
//! - [`manifest`] — the release manifest, its validation and canonical form.
//! - [`contract`] — contract metadata (exported interfaces, functions and a
//!   recursive value type), its bounded type structure, and the
//!   component-inspection port.
//! - [`metadata`] — the compact descriptor and the `metadata.json` codec
//!   (round-trip checked before anything is written).
//! - [`page`] — fixed-size page tokens bound to scope, generation and epoch.
//! - [`protocol`] — the publication step order, the pending gate, planning
//!   and recovery classification: the protocol the filesystem shell follows
//!   and the model drives.
//!
//! # Which identities are global, which are per tenant
//!
//! - **The content digest is global.** A release is the SHA-256 of its
//!   component bytes, unique across the whole catalog: no tenant can
//!   replace another's metadata under a digest, or acquire an alias for the
//!   same bytes. So a tenant that publishes bytes another tenant (or the
//!   operator, trusted-local) already published is refused
//!   (`AlreadyExists: release <digest> exists with different content`):
//!   it learns that *those exact bytes* are in the catalog — which it can
//!   only ask about by holding the bytes — and nothing else: not who
//!   published them, nor their name, version, service or lifecycle.
//! - **References are per tenant.** A reference (`name@version`) is unique
//!   within its tenant ([`metadata::Descriptor::reference_key`]); the
//!   trusted-local releases (no tenant) are one more scope of their own.
//!   Two tenants may each publish `calc@1.0.0`; a refusal for a held
//!   reference names only a release of the caller's own scope.
//! - **Reads are per tenant.** A tenant's scoped reads (get, list, resolve
//!   by reference) show only its own releases; another tenant's and the
//!   trusted-local ones answer exactly as absent ones do.
//! - **Deployments are per tenant too** (`crate::deployment::route::admit`):
//!   a deployment may use only its own tenant's eligible release, and
//!   another tenant's digest is refused exactly as one that does not
//!   exist.

pub mod bounds;
pub mod complete;
pub mod contract;
pub mod lifecycle;
pub mod manifest;
pub mod metadata;
pub mod page;
pub mod protocol;

use sha2::{Digest as _, Sha256 as Hasher};

/// The length of a SHA-256 digest, in bytes.
pub const SHA256_LEN: usize = 32;

/// The textual prefix of every digest the catalog writes.
pub const SHA256_PREFIX: &str = "sha256:";

/// A SHA-256 digest, written `sha256:` followed by 64 lowercase hex digits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sha256(pub [u8; SHA256_LEN]);

impl Sha256 {
    /// The SHA-256 of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Sha256(Hasher::digest(bytes).into())
    }

    /// Parses exactly `sha256:` and 64 lowercase hex digits; anything else
    /// (upper case, a missing prefix, a wrong length) is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        crate::hex::decode::<SHA256_LEN>(text.strip_prefix(SHA256_PREFIX)?).map(Sha256)
    }

    /// The 64 lowercase hex digits, without the prefix (the directory name
    /// of a release under `releases/`).
    pub fn hex(&self) -> String {
        crate::hex::encode(self.0)
    }

    /// Parses a bare 64-digit lowercase hex name (a digest directory name).
    pub fn parse_hex(name: &str) -> Option<Self> {
        crate::hex::decode::<SHA256_LEN>(name).map(Sha256)
    }
}

impl std::fmt::Display for Sha256 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SHA256_PREFIX}{}", self.hex())
    }
}

/// The contract of every release decoder on arbitrary input, run by the
/// `release_decoders` fuzz target, its corpus replay and the property
/// tests: the COMPLETE decoder's own contract ([`complete::check_decoder`]);
/// whatever the canonical decoders (stored manifest, metadata, lifecycle
/// record, page token) accept re-encodes to exactly the input; a manifest
/// the publisher-side parser accepts canonicalizes to bytes the stored-form
/// decoder reads back as the same manifest. Never panics.
pub fn check_decoders(bytes: &[u8]) -> Result<(), complete::DecoderViolation> {
    let violation = |what: &str| Err(complete::DecoderViolation(what.to_owned()));
    complete::check_decoder(bytes)?;
    if let Ok(m) = manifest::Manifest::decode_canonical(bytes, u64::MAX) {
        if m.canonical() != bytes {
            return violation("stored manifest accepted non-canonical bytes");
        }
    }
    if let Ok(m) = manifest::Manifest::parse(bytes, u64::MAX) {
        if manifest::Manifest::decode_canonical(&m.canonical(), u64::MAX).as_ref() != Ok(&m) {
            return violation("a parsed manifest's canonical form does not read back");
        }
    }
    if let Ok(m) = metadata::ReleaseMetadata::decode(bytes, u64::MAX) {
        if m.encode().as_deref() != Ok(bytes) {
            return violation("metadata accepted non-canonical bytes");
        }
    }
    if let Ok(o) = lifecycle::Outcome::decode(bytes) {
        if o.encode() != bytes {
            return violation("lifecycle record accepted non-canonical bytes");
        }
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        if let Ok(t) = page::PageToken::decode(text) {
            if t.encode() != text {
                return violation("page token accepted a non-canonical spelling");
            }
        }
    }
    Ok(())
}

/// The wire form, as [`Sha256::parse`] accepts it: a string of `sha256:`
/// and 64 lowercase hex digits (a derive would describe a byte array).
#[cfg(feature = "schema")]
impl schemars::JsonSchema for Sha256 {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Sha256".into()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        "custos_core::release::Sha256".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A SHA-256 digest: `sha256:` followed by 64 lowercase hex digits.",
            "type": "string",
            "pattern": "^sha256:[0-9a-f]{64}$"
        })
    }
}

impl serde::Serialize for Sha256 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Sha256 {
    /// Accepts exactly the form [`Sha256::parse`] accepts.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Sha256::parse(&text).ok_or_else(|| {
            serde::de::Error::custom("not a sha256: digest with 64 lowercase hex digits")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_text_round_trips_and_is_strict() {
        let d = Sha256::of(b"component");
        assert_eq!(Sha256::parse(&d.to_string()), Some(d));
        assert_eq!(Sha256::parse_hex(&d.hex()), Some(d));
        assert_eq!(Sha256::parse(&d.hex()), None);
        assert_eq!(Sha256::parse(&d.to_string().to_uppercase()), None);
        assert_eq!(Sha256::parse(&d.to_string()[..70]), None);
        assert_eq!(Sha256::parse_hex("sha256:ab"), None);
    }
}
