//! The release manifest: what a publisher declares about a component, and
//! its canonical JSON form stored as `manifest.json`.
//!
//! Fields, in canonical order: `name`, `version`, `tenant` (optional),
//! `service` (optional), `component_digest`, `exports`. [`Manifest::parse`]
//! accepts any JSON spelling of a valid manifest (the publisher's input),
//! validates every field and returns the manifest; [`Manifest::canonical`]
//! is the only byte form stored; [`Manifest::decode_canonical`] (the reader)
//! accepts exactly those bytes. All are total and bounded: the caller checks
//! the length before reading (`bounds::check_file_len`), and
//! [`Manifest::parse`] checks it again on the slice it is given.
//!
//! The release's **reference** is `name@version`: unique in a catalog, like
//! the content digest.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::Sha256;

/// The longest name, tenant or service.
pub const MAX_NAME_LEN: usize = 128;
/// The longest version.
pub const MAX_VERSION_LEN: usize = 64;
/// The longest export name.
pub const MAX_EXPORT_LEN: usize = 256;
/// The most exports a manifest declares.
pub const MAX_EXPORTS: usize = 1024;

/// Why a manifest was refused. Nothing was stored.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
pub enum ManifestError {
    /// Longer than the bound it was read under.
    #[error("ResourceExhausted: manifest is {len} bytes, over the {limit}-byte bound")]
    TooLarge {
        /// The length.
        len: u64,
        /// The bound.
        limit: u64,
    },
    /// Not a JSON object of the manifest's fields.
    #[error("InvalidManifest: malformed: {0}")]
    Malformed(String),
    /// A field that breaks its rule.
    #[error("InvalidManifest: field {field} {rule}")]
    InvalidField {
        /// The field.
        field: &'static str,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// An export named twice.
    #[error("InvalidManifest: export {0:?} is declared twice")]
    DuplicateExport(String),
    /// Stored bytes that are not the canonical form.
    #[error("CorruptArtifact: manifest.json is not canonically serialized")]
    NonCanonical,
}

/// The pattern of a name, tenant or service (its length is
/// [`MAX_NAME_LEN`]).
#[cfg(feature = "schema")]
const NAME_PATTERN: &str = "^[a-z0-9][a-z0-9._-]*$";

/// A validated release manifest.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(
        description = "A release manifest, as `custos releases publish --manifest` reads it \
                       (at most 4 MiB). A service requires a tenant.",
        extend(
            "if" = {"properties": {"service": {"type": "string"}}, "required": ["service"]},
            "then" = {"properties": {"tenant": {"type": "string"}}, "required": ["tenant"]}
        )
    )
)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The release name: 1–128 of `[a-z0-9._-]`, starting with `[a-z0-9]`.
    #[cfg_attr(
        feature = "schema",
        schemars(length(min = 1, max = MAX_NAME_LEN), regex(pattern = NAME_PATTERN))
    )]
    pub name: String,
    /// The version: 1–64 of `[A-Za-z0-9.+_-]`.
    #[cfg_attr(
        feature = "schema",
        schemars(length(min = 1, max = MAX_VERSION_LEN), regex(pattern = "^[A-Za-z0-9.+_-]+$"))
    )]
    pub version: String,
    /// The owning tenant (same rule as the name); absent (`None`) for a
    /// trusted local release outside tenant-scoped queries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(length(min = 1, max = MAX_NAME_LEN), regex(pattern = NAME_PATTERN))
    )]
    pub tenant: Option<String>,
    /// The service within the tenant (same rule as the name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(length(min = 1, max = MAX_NAME_LEN), regex(pattern = NAME_PATTERN))
    )]
    pub service: Option<String>,
    /// The release identity: SHA-256 of the component bytes.
    pub component_digest: Sha256,
    /// The declared exports: 0–1024 names of 1–256 of `[A-Za-z0-9:/@._-]`,
    /// unique; sorted in the canonical form.
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(max = MAX_EXPORTS),
            inner(length(min = 1, max = MAX_EXPORT_LEN), regex(pattern = "^[A-Za-z0-9:/@._-]+$")),
            extend("uniqueItems" = true)
        )
    )]
    pub exports: Vec<String>,
}

fn ident_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME_LEN
        && b.first()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c))
}

fn version_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_VERSION_LEN
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b".+_-".contains(c))
}

fn export_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_EXPORT_LEN
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b":/@._-".contains(c))
}

fn invalid(field: &'static str, rule: &'static str) -> ManifestError {
    ManifestError::InvalidField { field, rule }
}

impl Manifest {
    /// Parses and validates a publisher's manifest (any JSON spelling),
    /// refusing input longer than `limit` before parsing. Exports are sorted
    /// into canonical order; a duplicate is refused.
    pub fn parse(bytes: &[u8], limit: u64) -> Result<Self, ManifestError> {
        let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if len > limit {
            return Err(ManifestError::TooLarge { len, limit });
        }
        let m: Manifest =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::Malformed(e.to_string()))?;
        m.validated()
    }

    /// Validates the fields and returns the canonical manifest (exports
    /// sorted).
    pub fn validated(mut self) -> Result<Self, ManifestError> {
        if !ident_ok(&self.name) {
            return Err(invalid(
                "name",
                "must be 1-128 of [a-z0-9._-] starting with [a-z0-9]",
            ));
        }
        if !version_ok(&self.version) {
            return Err(invalid("version", "must be 1-64 of [A-Za-z0-9.+_-]"));
        }
        if self.tenant.as_deref().is_some_and(|t| !ident_ok(t)) {
            return Err(invalid(
                "tenant",
                "must be 1-128 of [a-z0-9._-] starting with [a-z0-9]",
            ));
        }
        if self.service.as_deref().is_some_and(|s| !ident_ok(s)) {
            return Err(invalid(
                "service",
                "must be 1-128 of [a-z0-9._-] starting with [a-z0-9]",
            ));
        }
        if self.service.is_some() && self.tenant.is_none() {
            return Err(invalid("service", "requires a tenant"));
        }
        if self.exports.len() > MAX_EXPORTS {
            return Err(invalid("exports", "must have at most 1024 entries"));
        }
        if let Some(bad) = self.exports.iter().find(|e| !export_ok(e)) {
            let _ = bad;
            return Err(invalid(
                "exports",
                "entries must be 1-256 of [A-Za-z0-9:/@._-]",
            ));
        }
        self.exports.sort();
        if let Some(w) = self.exports.windows(2).find(|w| w.first() == w.get(1)) {
            return Err(ManifestError::DuplicateExport(
                w.first().cloned().unwrap_or_default(),
            ));
        }
        Ok(self)
    }

    /// The canonical bytes stored as `manifest.json`: compact JSON, fields in
    /// the documented order, absent optionals omitted, exports sorted.
    pub fn canonical(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decodes stored `manifest.json` bytes: valid, and exactly canonical.
    pub fn decode_canonical(bytes: &[u8], limit: u64) -> Result<Self, ManifestError> {
        let m = Manifest::parse(bytes, limit)?;
        if m.canonical() != bytes {
            return Err(ManifestError::NonCanonical);
        }
        Ok(m)
    }

    /// The release reference, `name@version`.
    pub fn reference(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(d: &Sha256) -> String {
        format!(
            r#"{{ "version": "1.0.0", "name": "hello", "tenant": "acme", "exports": ["b:x/y", "a:x/y"], "component_digest": "{d}" }}"#
        )
    }

    #[test]
    fn parse_canonicalizes_and_stored_form_is_strict() {
        let d = Sha256::of(b"c");
        let m = Manifest::parse(text(&d).as_bytes(), 4096).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.exports, vec!["a:x/y".to_string(), "b:x/y".to_string()]);
        assert_eq!(m.reference(), "hello@1.0.0");
        let c = m.canonical();
        let want = format!(
            r#"{{"name":"hello","version":"1.0.0","tenant":"acme","component_digest":"{d}","exports":["a:x/y","b:x/y"]}}"#
        );
        assert_eq!(String::from_utf8_lossy(&c), want);
        assert_eq!(Manifest::decode_canonical(&c, 4096), Ok(m));
        assert_eq!(
            Manifest::decode_canonical(text(&d).as_bytes(), 4096),
            Err(ManifestError::NonCanonical)
        );
        assert!(matches!(
            Manifest::parse(&c, 10),
            Err(ManifestError::TooLarge { .. })
        ));
    }

    #[test]
    fn every_field_rule_refuses() {
        let d = Sha256::of(b"c");
        let base = Manifest {
            name: "n".into(),
            version: "1".into(),
            tenant: None,
            service: None,
            component_digest: d,
            exports: vec![],
        };
        assert!(base.clone().validated().is_ok());
        let bad = |m: Manifest| m.validated().is_err();
        assert!(bad(Manifest {
            name: "".into(),
            ..base.clone()
        }));
        assert!(bad(Manifest {
            name: "Upper".into(),
            ..base.clone()
        }));
        assert!(bad(Manifest {
            name: "a/b".into(),
            ..base.clone()
        }));
        assert!(bad(Manifest {
            name: "x".repeat(129),
            ..base.clone()
        }));
        assert!(bad(Manifest {
            version: "1 0".into(),
            ..base.clone()
        }));
        assert!(bad(Manifest {
            tenant: Some("".into()),
            ..base.clone()
        }));
        assert!(bad(Manifest {
            service: Some("s".into()),
            ..base.clone()
        }));
        assert!(bad(Manifest {
            exports: vec!["".into()],
            ..base.clone()
        }));
        assert_eq!(
            Manifest {
                exports: vec!["e".into(), "e".into()],
                ..base.clone()
            }
            .validated(),
            Err(ManifestError::DuplicateExport("e".into()))
        );
        assert!(matches!(
            Manifest::parse(br#"{"name":"n"}"#, 100),
            Err(ManifestError::Malformed(_))
        ));
        let unknown =
            format!(r#"{{"name":"n","version":"1","component_digest":"{d}","exports":[],"x":1}}"#);
        assert!(matches!(
            Manifest::parse(unknown.as_bytes(), 1000),
            Err(ManifestError::Malformed(_))
        ));
    }
}
