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

pub use crate::digest::{Sha256, SHA256_LEN, SHA256_PREFIX};

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
