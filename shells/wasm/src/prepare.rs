//! The preparation step (cargo feature `wasmtime`): compile a component with
//! an engine and stamp the result with an engine-version-scoped identity.
//!
//! Separate from publication, which never prepares or instantiates a
//! component: registration calls [`crate::inspect()`] only; a runtime that is about to
//! execute a release calls [`Preparer::prepare`]. Preparation re-runs the
//! same inspection first, so a component the catalog would refuse is never
//! handed to the compiler, and the stamp binds the contract that inspection
//! extracted.
//!
//! The stamp is an internal identity for reusing prepared state, never a
//! replacement for the release digest: it binds the engine (its name, the
//! major version this crate pins, and a SHA-256 over the engine's own
//! precompiled-artifact compatibility hash, which covers its exact version,
//! compiler settings and enabled features), the SHA-256 of the component
//! bytes, and the digest of the canonical contract.

use std::hash::{Hash, Hasher};

use custos_core::release::bounds::PreparationFingerprint;
use custos_core::release::Sha256;
use sha2::Digest as _;
use thiserror::Error;

use crate::contract::{canonical_bytes, digest, Contract};
use crate::inspect::{inspect, InspectError};

/// The engine's name in a stamp.
pub const ENGINE_NAME: &str = "wasmtime";

/// The engine major version this crate is built against (its `Cargo.toml`
/// pin). The exact version is covered by [`PreparationStamp::engine_digest`].
pub const ENGINE_MAJOR: u32 = 48;

/// Why preparation failed.
#[derive(Debug, Error)]
pub enum PrepareError {
    /// Inspection refused the bytes (the same refusal publication gives).
    #[error(transparent)]
    Inspect(#[from] InspectError),
    /// The engine could not be built from its configuration.
    #[error("PreparationFailed: engine configuration refused: {0}")]
    Engine(String),
    /// The engine refused to compile a component that inspection accepted.
    #[error("PreparationFailed: the engine refused the component: {0}")]
    Compile(String),
}

impl PrepareError {
    /// The failure's [`Class`](custos_core::Class): what the caller does next
    /// (an inspection keeps its own class).
    pub fn class(&self) -> custos_core::Class {
        use custos_core::Class;
        match self {
            PrepareError::Inspect(e) => e.class(),
            PrepareError::Engine(..) => Class::Internal,
            PrepareError::Compile(..) => Class::InvalidArgument,
        }
    }
}

/// The engine-version-scoped identity of one prepared component.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PreparationStamp {
    /// `wasmtime-48`: [`ENGINE_NAME`] and [`ENGINE_MAJOR`].
    pub engine: String,
    /// SHA-256 over the engine's compatibility hash (exact version, compiler
    /// settings, enabled features).
    pub engine_digest: Sha256,
    /// SHA-256 of the component bytes (the release identity).
    pub component_digest: Sha256,
    /// [`crate::digest()`] of the extracted contract.
    pub contract_digest: Sha256,
    /// Length of the contract's canonical encoding (the stamped metadata's
    /// charged bytes).
    pub contract_bytes: u64,
    /// The contract's maximum type depth.
    pub type_depth: u32,
}

impl PreparationStamp {
    /// SHA-256 over the stamp's fields, each length-prefixed.
    pub fn digest(&self) -> Sha256 {
        let mut h = sha2::Sha256::new();
        h.update((self.engine.len() as u64).to_le_bytes());
        h.update(self.engine.as_bytes());
        h.update(self.engine_digest.0);
        h.update(self.component_digest.0);
        h.update(self.contract_digest.0);
        h.update(self.contract_bytes.to_le_bytes());
        h.update(self.type_depth.to_le_bytes());
        Sha256(h.finalize().into())
    }

    /// The compact, fixed-size form the catalog index charges per release.
    pub fn fingerprint(&self) -> PreparationFingerprint {
        PreparationFingerprint {
            digest: self.digest().0,
            charged_bytes: self.contract_bytes,
            type_depth: self.type_depth,
        }
    }
}

/// A compiled component with its contract and stamp.
pub struct Prepared {
    /// The compiled component, ready for a linker.
    pub component: wasmtime::component::Component,
    /// The contract inspection extracted.
    pub contract: Contract,
    /// The engine-scoped identity.
    pub stamp: PreparationStamp,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("contract", &self.contract)
            .field("stamp", &self.stamp)
            .finish_non_exhaustive()
    }
}

/// Compiles components with one engine.
#[derive(Clone)]
pub struct Preparer {
    engine: wasmtime::Engine,
    engine_digest: Sha256,
}

impl std::fmt::Debug for Preparer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preparer")
            .field("engine_digest", &self.engine_digest)
            .finish_non_exhaustive()
    }
}

/// Feeds a `Hash` stream into SHA-256.
struct DigestHasher(sha2::Sha256);

impl Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let d = self.0.clone().finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&d[..8]);
        u64::from_le_bytes(first)
    }
}

impl Preparer {
    /// A preparer with the engine's default configuration (the one
    /// [`crate::engine_features`] mirrors).
    pub fn new() -> Result<Self, PrepareError> {
        Self::with_config(&wasmtime::Config::new())
    }

    /// A preparer with an explicit engine configuration.
    pub fn with_config(config: &wasmtime::Config) -> Result<Self, PrepareError> {
        let engine =
            wasmtime::Engine::new(config).map_err(|e| PrepareError::Engine(format!("{e:#}")))?;
        let mut h = DigestHasher(sha2::Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut h);
        let engine_digest = Sha256(h.0.finalize().into());
        Ok(Preparer {
            engine,
            engine_digest,
        })
    }

    /// The engine.
    pub fn engine(&self) -> &wasmtime::Engine {
        &self.engine
    }

    /// SHA-256 over the engine's compatibility hash.
    pub fn engine_digest(&self) -> Sha256 {
        self.engine_digest
    }

    /// Inspects, then compiles, then stamps. Nothing is instantiated.
    pub fn prepare(&self, bytes: &[u8]) -> Result<Prepared, PrepareError> {
        let contract = inspect(bytes)?;
        let component = wasmtime::component::Component::from_binary(&self.engine, bytes)
            .map_err(|e| PrepareError::Compile(format!("{e:#}")))?;
        let stamp = PreparationStamp {
            engine: format!("{ENGINE_NAME}-{ENGINE_MAJOR}"),
            engine_digest: self.engine_digest,
            component_digest: Sha256::of(bytes),
            contract_digest: digest(&contract),
            contract_bytes: canonical_bytes(&contract).len() as u64,
            type_depth: contract.shape().depth,
        };
        Ok(Prepared {
            component,
            contract,
            stamp,
        })
    }
}
