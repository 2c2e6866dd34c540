//! The migration plan and receipt as data: validated names, normalized
//! credential-free URIs, SHA-256 digests, canonical JSON, and total decoders.
//!
//! **Credential-free by construction.** Every URI in a plan or receipt is a
//! [`NormalizedUri`], whose constructor (and deserializer) refuses userinfo,
//! a query, a fragment and percent-encoding; every other text field is a
//! [`Name`]. No field can carry a session, a filesystem handle or a secret.
//!
//! **Canonical.** The canonical form of a plan or receipt is its compact
//! `serde_json` encoding: fields in declaration order, sequences sorted and
//! validated, no maps, no optional fields (a missing field is an error, never
//! a default). A decoder refuses input whose re-encoding differs byte for
//! byte.
//!
//! **Digest-bound.** [`Plan::digest`] and [`Receipt::digest`] hash a
//! domain-separated prefix followed by the canonical bytes with SHA-256, so
//! any change to any field changes the digest.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::fence::{self, Epoch};
use crate::Millis;

/// The plan format this crate writes and reads.
pub const PLAN_FORMAT: u32 = 1;
/// The receipt format this crate writes and reads.
pub const RECEIPT_FORMAT: u32 = 1;
/// The longest [`Name`], in bytes.
pub const MAX_NAME_LEN: usize = 256;
/// The longest [`NormalizedUri`], in bytes.
pub const MAX_URI_LEN: usize = 2048;
/// The most tables, objects or worlds one plan may list.
pub const MAX_ITEMS: usize = 100_000;
/// The most manifest writer epochs one world may list.
pub const MAX_MANIFEST_EPOCHS: usize = 4096;
/// The largest encoded plan or stored receipt a decoder reads, in bytes.
/// Checked before anything is parsed or allocated.
pub const MAX_ENCODED_LEN: usize = 64 << 20;

const PLAN_DOMAIN: &[u8] = b"custos.migration.plan.v1\0";
const RECEIPT_DOMAIN: &[u8] = b"custos.migration.receipt.v1\0";
const EVIDENCE_DOMAIN: &[u8] = b"custos.migration.evidence.v1\0";

/// Why a name, URI, digest, plan or receipt is refused.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Error, Serialize, Deserialize)]
pub enum DataError {
    /// A name that is empty, too long, or has control characters.
    #[error("invalid-name: a name must be 1..={max} bytes without control characters (got {len} bytes)", max = MAX_NAME_LEN)]
    InvalidName {
        /// The rejected name's length in bytes.
        len: usize,
    },
    /// A URI that carries a credential or is not a normalized identity.
    #[error("credential-bearing-uri: {0}")]
    CredentialBearingUri(UriProblem),
    /// A URI that is not in its normalized form.
    #[error("invalid-uri: {0}")]
    InvalidUri(UriProblem),
    /// A digest that is not 64 lowercase hexadecimal digits.
    #[error("non-canonical-digest: a digest is 64 lowercase hex digits")]
    InvalidDigest,
    /// The input is larger than [`MAX_ENCODED_LEN`].
    #[error("encoded-too-large: {len} bytes exceeds {max}", max = MAX_ENCODED_LEN)]
    TooLarge {
        /// The input's length.
        len: usize,
    },
    /// The input does not parse: a missing, unknown or mistyped field.
    #[error("malformed-encoding: {0}")]
    Malformed(String),
    /// The input parses but is not the canonical encoding of its value.
    #[error("non-canonical-encoding: re-encoding differs from the input")]
    NonCanonical,
    /// A stored digest that does not match the recomputed one.
    #[error("digest-mismatch: stored {stored_hex}, computed {computed_hex}", stored_hex = .stored.hex(), computed_hex = .computed.hex())]
    DigestMismatch {
        /// The digest found in the input.
        #[serde(with = "crate::digest::bare")]
        stored: Digest,
        /// The digest of the decoded value.
        #[serde(with = "crate::digest::bare")]
        computed: Digest,
    },
    /// The value decodes but breaks a structural rule of its type.
    #[error("invalid-structure: {0}")]
    Invalid(String),
}

impl DataError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (a document whose digest does not bind it is `CorruptArtifact`; every other refusal is of the input).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            DataError::InvalidName { .. } => Class::InvalidArgument,
            DataError::CredentialBearingUri(..) => Class::InvalidArgument,
            DataError::InvalidUri(..) => Class::InvalidArgument,
            DataError::InvalidDigest => Class::InvalidArgument,
            DataError::TooLarge { .. } => Class::ResourceExhausted,
            DataError::Malformed(..) => Class::InvalidArgument,
            DataError::NonCanonical => Class::InvalidArgument,
            DataError::DigestMismatch { .. } => Class::CorruptArtifact,
            DataError::Invalid(..) => Class::InvalidArgument,
        }
    }
}

/// What is wrong with a URI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum UriProblem {
    /// `user[:password]@` in the authority.
    Userinfo,
    /// A `?query`.
    Query,
    /// A `#fragment`.
    Fragment,
    /// `%`-encoding, which could hide any of the above.
    PercentEncoded,
    /// Empty, too long, whitespace (a space aside, in the path) or control
    /// characters.
    Shape,
    /// A scheme that is not `[a-z][a-z0-9+.-]*`.
    Scheme,
    /// Not `scheme://authority/path`.
    NotHierarchical,
    /// An empty, `.` or `..` path segment, or a trailing slash.
    PathSegment,
    /// The text is valid but not in normalized form (e.g. an upper-case
    /// scheme or `localhost` authority on a deserialized value).
    NotNormalized,
}

impl fmt::Display for UriProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            UriProblem::Userinfo => "userinfo is not allowed",
            UriProblem::Query => "a query is not allowed",
            UriProblem::Fragment => "a fragment is not allowed",
            UriProblem::PercentEncoded => "percent-encoding is not allowed",
            UriProblem::Shape => "empty, too long, or has control characters or whitespace other than a space in the path",
            UriProblem::Scheme => "scheme must be [a-z][a-z0-9+.-]*",
            UriProblem::NotHierarchical => "expected scheme://authority/path",
            UriProblem::PathSegment => "empty, '.' or '..' path segment or trailing slash",
            UriProblem::NotNormalized => "not in normalized form",
        };
        f.write_str(s)
    }
}

/// A validated name: a migration id, table, world, namespace, backend or
/// version. 1..=[`MAX_NAME_LEN`] bytes, no control characters.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Name(String);

impl Name {
    /// Validates and wraps a name.
    pub fn new(name: impl Into<String>) -> Result<Self, DataError> {
        let name = name.into();
        if name.is_empty() || name.len() > MAX_NAME_LEN || name.chars().any(char::is_control) {
            return Err(DataError::InvalidName { len: name.len() });
        }
        Ok(Name(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The wire form: a string of 1..=256 bytes without control characters
/// (JSON Schema's `maxLength` counts characters, so it states the bound
/// only for ASCII; the description says bytes).
#[cfg(feature = "schema")]
impl schemars::JsonSchema for Name {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Name".into()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        "custos_core::migration::data::Name".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A name (migration id, table, World, namespace, backend or version): \
                            1 to 256 bytes of UTF-8 without control characters.",
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_NAME_LEN,
            "pattern": "^[^\\u0000-\\u001F\\u007F-\\u009F]+$"
        })
    }
}

impl TryFrom<String> for Name {
    type Error = DataError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Name::new(value)
    }
}

impl From<Name> for String {
    fn from(value: Name) -> Self {
        value.0
    }
}

/// The one digest type ([`crate::digest::Sha256`]), under the name the
/// migration has always used. Migration formats (plans, receipts,
/// evidence, rows) store it as its bare 64 lowercase hex digits
/// ([`crate::digest::bare`]); messages print [`Sha256::hex`](crate::digest::Sha256::hex).
pub use crate::digest::Sha256 as Digest;

/// SHA-256 of a domain prefix followed by `bytes`.
pub(crate) fn domain(domain: &[u8], bytes: &[u8]) -> Digest {
    Digest::of_parts(&[domain, bytes])
}

/// A normalized, credential-free URI identity: `scheme://authority/path`
/// with a lower-case scheme and host, no userinfo, query, fragment or
/// percent-encoding, no empty, `.` or `..` segments and no trailing slash.
/// `file://localhost/p` normalizes to `file:///p`.
///
/// [`NormalizedUri::parse`] normalizes; deserialization accepts only text
/// that is already normalized, so a decoded plan is canonical.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NormalizedUri {
    text: String,
    /// Byte length of the scheme.
    scheme_len: usize,
    /// Byte offset where the path starts.
    path_at: usize,
}

impl NormalizedUri {
    /// Parses and normalizes `s`, refusing anything that could carry a
    /// credential or an ambiguity.
    pub fn parse(s: &str) -> Result<Self, DataError> {
        let bad = |p| Err(DataError::InvalidUri(p));
        let cred = |p| Err(DataError::CredentialBearingUri(p));
        if s.is_empty()
            || s.len() > MAX_URI_LEN
            || s.chars()
                .any(|c| c.is_control() || (c.is_whitespace() && c != ' '))
        {
            return bad(UriProblem::Shape);
        }
        if s.contains('#') {
            return cred(UriProblem::Fragment);
        }
        if s.contains('?') {
            return cred(UriProblem::Query);
        }
        if s.contains('%') {
            return cred(UriProblem::PercentEncoded);
        }
        let Some((scheme, rest)) = s.split_once(':') else {
            return bad(UriProblem::NotHierarchical);
        };
        let scheme = scheme.to_ascii_lowercase();
        let mut sc = scheme.chars();
        if !sc.next().is_some_and(|c| c.is_ascii_lowercase())
            || !sc.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+.-".contains(c))
        {
            return bad(UriProblem::Scheme);
        }
        let Some(rest) = rest.strip_prefix("//") else {
            return bad(UriProblem::NotHierarchical);
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return cred(UriProblem::Userinfo);
        }
        if authority.contains(' ') {
            return bad(UriProblem::Shape);
        }
        let mut authority = authority.to_ascii_lowercase();
        if scheme == "file" && authority == "localhost" {
            authority.clear();
        }
        if path.is_empty() || path == "/" {
            if path.is_empty() && authority.is_empty() {
                return bad(UriProblem::NotHierarchical);
            }
        } else if path
            .split('/')
            .skip(1)
            .any(|seg| seg.is_empty() || seg == "." || seg == "..")
        {
            return bad(UriProblem::PathSegment);
        }
        let path = if path.is_empty() { "/" } else { path };
        let text = format!("{scheme}://{authority}{path}");
        Ok(NormalizedUri {
            scheme_len: scheme.len(),
            path_at: scheme.len() + 3 + authority.len(),
            text,
        })
    }

    /// The normalized text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The lower-case scheme.
    pub fn scheme(&self) -> &str {
        self.text.get(..self.scheme_len).unwrap_or_default()
    }

    /// The lower-case authority (empty for a local file URI).
    pub fn authority(&self) -> &str {
        self.text
            .get(self.scheme_len + 3..self.path_at)
            .unwrap_or_default()
    }

    /// The path, starting with `/`.
    pub fn path(&self) -> &str {
        self.text.get(self.path_at..).unwrap_or_default()
    }

    /// A local file URI: scheme `file` with an empty authority.
    pub fn is_local_file(&self) -> bool {
        self.scheme() == "file" && self.authority().is_empty()
    }

    /// Whether `other` is this URI or lies beneath it (segment-wise).
    pub fn contains(&self, other: &NormalizedUri) -> bool {
        if self.scheme() != other.scheme() || self.authority() != other.authority() {
            return false;
        }
        let (a, b) = (self.path(), other.path());
        a == "/" || a == b || (b.starts_with(a) && b.as_bytes().get(a.len()) == Some(&b'/'))
    }

    /// Whether the two URIs are disjoint: neither contains the other.
    pub fn disjoint(&self, other: &NormalizedUri) -> bool {
        !self.contains(other) && !other.contains(self)
    }
}

impl fmt::Display for NormalizedUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The wire form the deserializer accepts: already-normalized text,
/// `scheme://authority/path` with a lowercase scheme and authority, no
/// userinfo, query, fragment, percent-encoding, control character or
/// whitespace (a space in the path aside), no empty, `.` or `..` segment and no trailing slash (the path
/// `/` alone aside). Not stated by the pattern: `file://localhost/…` is not
/// normalized (it is `file:///…`).
#[cfg(feature = "schema")]
impl schemars::JsonSchema for NormalizedUri {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NormalizedUri".into()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        "custos_core::migration::data::NormalizedUri".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // A path character, one that is not a dot, and an authority one.
        // A path character may be a space (U+0020); no other whitespace.
        const W: &str = r"\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000";
        let c = format!(r"[^{W}\u0000-\u001F\u007F-\u009F/#?%]");
        let d = format!(r"[^{W}\u0000-\u001F\u007F-\u009F/#?%.]");
        let (c, d) = (c.as_str(), d.as_str());
        const A: &str = r"[^\s\u0000-\u001F\u007F-\u009F/#?%@A-Z]";
        let pattern =
            format!("^[a-z][a-z0-9+.-]*://{A}*(?:/|(?:/(?:{d}{c}*|\\.{d}{c}*|\\.\\.{c}+))+)$");
        schemars::json_schema!({
            "description": "A normalized, credential-free URI: `scheme://authority/path` with a \
                            lowercase scheme and authority; no userinfo, query, fragment, \
                            percent-encoding or control character, no whitespace but a space in \
                            the path; no empty, `.` or \
                            `..` path segment and no trailing slash (a path of `/` alone aside); \
                            a local file is `file:///path` (never `file://localhost/path`). At \
                            most 2048 bytes.",
            "type": "string",
            "maxLength": MAX_URI_LEN,
            "pattern": pattern
        })
    }
}

impl TryFrom<String> for NormalizedUri {
    type Error = DataError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        let uri = NormalizedUri::parse(&value)?;
        if uri.text != value {
            return Err(DataError::InvalidUri(UriProblem::NotNormalized));
        }
        Ok(uri)
    }
}

impl From<NormalizedUri> for String {
    fn from(value: NormalizedUri) -> Self {
        value.text
    }
}

/// The longest uri, namespace or backend [`StorageIdentity::new`] reads,
/// in bytes, before it normalizes anything (a normalized uri is further
/// bounded by [`MAX_URI_LEN`], a namespace and a backend by
/// [`MAX_NAME_LEN`]).
pub const MAX_PART_LEN: usize = 4096;

/// Why a storage identity was refused.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum IdentityError {
    /// A part is empty, too long, or breaks its rule.
    #[error("InvalidIdentity: {part}: {detail}")]
    Invalid {
        /// `uri`, `namespace` or `backend`.
        part: String,
        /// What is wrong with it.
        detail: String,
    },
}

impl IdentityError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (always `InvalidArgument`).
    pub fn class(&self) -> crate::Class {
        match self {
            IdentityError::Invalid { .. } => crate::Class::InvalidArgument,
        }
    }
}

fn invalid_part(part: &str, detail: impl fmt::Display) -> IdentityError {
    IdentityError::Invalid {
        part: part.to_owned(),
        detail: detail.to_string(),
    }
}

/// Resolves `.`, `..`, empty segments and trailing slashes lexically; the
/// result starts with `/` and has no trailing slash (except the root).
fn resolve_path(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

fn check_part(part: &str, s: &str) -> Result<(), IdentityError> {
    if s.is_empty() {
        return Err(invalid_part(part, "empty"));
    }
    if s.len() > MAX_PART_LEN {
        return Err(invalid_part(part, "too long"));
    }
    if s.chars().any(char::is_control) {
        return Err(invalid_part(part, "control character"));
    }
    Ok(())
}

/// A user's spelling of a uri in the [`NormalizedUri`] form: a plain
/// absolute path is a local file; `.`, `..`, repeated and trailing slashes
/// are resolved lexically; a remote uri needs a host or bucket.
fn spell_uri(uri: &str) -> Result<NormalizedUri, IdentityError> {
    check_part("uri", uri)?;
    if uri.contains('?') || uri.contains('#') {
        return Err(invalid_part(
            "uri",
            "a query or fragment is not part of a storage identity",
        ));
    }
    let text = match uri.split_once("://") {
        None if uri.starts_with('/') => format!("file://{}", resolve_path(uri)),
        None => {
            return Err(invalid_part(
                "uri",
                "a local path must be absolute (the shell resolves relative paths)",
            ))
        }
        Some((scheme, rest)) => {
            let (authority, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            if authority.contains('@') {
                return Err(invalid_part(
                    "uri",
                    "credentials are not part of a storage identity",
                ));
            }
            let file = scheme.eq_ignore_ascii_case("file");
            if file && !(authority.is_empty() || authority.eq_ignore_ascii_case("localhost")) {
                return Err(invalid_part("uri", "a file uri names no remote host"));
            }
            if !file && authority.is_empty() {
                return Err(invalid_part("uri", "a remote uri needs a host or bucket"));
            }
            let authority = if file { "" } else { authority };
            format!("{scheme}://{authority}{}", resolve_path(path))
        }
    };
    NormalizedUri::parse(&text).map_err(|e| invalid_part("uri", e))
}

/// A storage identity: normalized storage URI, namespace and backend.
///
/// The one identity of a store, for every use: the key its handles are
/// pooled by, the name of its control catalog and Activity catalog
/// ([`crate::identity::catalog_location`]), and the two endpoints a
/// migration plan and receipt bind. [`StorageIdentity::new`] normalizes a
/// user's spelling so that equivalent ones compare equal: a plain absolute
/// path and its `file://` form, trailing, repeated, `.` and `..` segments
/// (resolved lexically), an upper-case scheme or host, an upper-case
/// backend. The fields are private: a decoded identity must have the uri
/// and namespace `new` gives and a backend `new` accepts, or it is
/// refused. One spelling is kept as stored: a backend with upper-case
/// letters, written before backends were lower-cased, decodes as written
/// so that the digests binding it still hold (it compares unequal to the
/// lower-case one `new` makes, as it did when it was written).
///
/// The identity is a uri that can travel in a plan, so `new` refuses what
/// a [`NormalizedUri`] cannot hold: a `%` or whitespace other than a space
/// (U+0020) in the path, whitespace in the host, a uri over
/// [`MAX_URI_LEN`] bytes once normalized, a namespace or backend over
/// [`MAX_NAME_LEN`] bytes.
///
/// Two fingerprints, two stored formats, both stable:
/// [`fingerprint`](Self::fingerprint) is a digest of the canonical JSON
/// (what receipts bind); [`catalog_fingerprint`](Self::catalog_fingerprint)
/// is the hex digest that names a remote store's catalog files.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(description = "A storage identity: normalized storage URI, namespace and backend.")
)]
#[serde(deny_unknown_fields)]
pub struct StorageIdentity {
    /// The normalized storage URI (the warehouse root).
    uri: NormalizedUri,
    /// The Iceberg namespace.
    #[cfg_attr(feature = "schema", schemars(schema_with = "namespace_schema"))]
    namespace: Name,
    /// The backend name.
    #[cfg_attr(feature = "schema", schemars(schema_with = "backend_schema"))]
    backend: Name,
}

/// A namespace's wire form: one path segment of a [`Name`].
#[cfg(feature = "schema")]
fn namespace_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    // A segment character, and one that is not a dot.
    const C: &str = r"[^/\\\u0000-\u001F\u007F-\u009F]";
    const D: &str = r"[^./\\\u0000-\u001F\u007F-\u009F]";
    schemars::json_schema!({
        "description": "The Iceberg namespace: one path segment (no `/` or `\\`, not `.` or \
                        `..`) of 1 to 256 bytes without control characters.",
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_NAME_LEN,
        "pattern": format!("^(?:{D}{C}*|\\.{D}{C}*|\\.\\.{C}+)$")
    })
}

/// A backend's wire form: ASCII letters, digits, `-` and `_` (lower-case
/// when written now; an older identity may keep an upper-case letter).
#[cfg(feature = "schema")]
fn backend_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "The backend name: ASCII letters, digits, `-` and `_`, written \
                        lower-case (an identity stored before backends were lower-cased keeps \
                        its spelling).",
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_NAME_LEN,
        "pattern": "^[A-Za-z0-9_-]+$"
    })
}

/// The wire form a decoded identity is read through before it is held to
/// [`StorageIdentity::new`]'s form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdentityWire {
    uri: NormalizedUri,
    namespace: Name,
    backend: Name,
}

impl<'de> Deserialize<'de> for StorageIdentity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = IdentityWire::deserialize(d)?;
        let id = StorageIdentity::new(
            wire.uri.as_str(),
            wire.namespace.as_str(),
            wire.backend.as_str(),
        )
        .map_err(serde::de::Error::custom)?;
        if id.uri != wire.uri {
            return Err(serde::de::Error::custom(
                "a storage identity whose uri is not in its normalized form",
            ));
        }
        // A backend written before backends were lower-cased keeps the
        // spelling it was stored with, so the digests that bind it (a
        // plan's, a receipt's fingerprints) still hold.
        Ok(StorageIdentity {
            backend: wire.backend,
            ..id
        })
    }
}

impl StorageIdentity {
    /// Normalizes `uri`, `namespace` and `backend` into an identity.
    ///
    /// The uri is an absolute path or `scheme://authority/path`, without
    /// credentials, query, fragment, percent-encoding or whitespace other
    /// than a space in the path, at most [`MAX_URI_LEN`] bytes once
    /// normalized (a plain path `p` is `file://p`, `file://localhost/p`
    /// is `file:///p`). The namespace is one path segment (no `/`, `\`, and not
    /// `.` or `..`); the backend is ASCII letters, digits, `-` and `_`,
    /// compared case-insensitively; each at most [`MAX_NAME_LEN`] bytes.
    pub fn new(uri: &str, namespace: &str, backend: &str) -> Result<Self, IdentityError> {
        let uri = spell_uri(uri)?;
        check_part("namespace", namespace)?;
        if namespace.contains('/')
            || namespace.contains('\\')
            || namespace == "."
            || namespace == ".."
        {
            return Err(invalid_part("namespace", "must be one path segment"));
        }
        check_part("backend", backend)?;
        if !backend
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(invalid_part(
                "backend",
                "ASCII letters, digits, '-' and '_' only",
            ));
        }
        Ok(StorageIdentity {
            uri,
            namespace: Name::new(namespace).map_err(|e| invalid_part("namespace", e))?,
            backend: Name::new(backend.to_ascii_lowercase())
                .map_err(|e| invalid_part("backend", e))?,
        })
    }

    /// The normalized storage URI (`file:///path` for a local store).
    pub fn uri(&self) -> &NormalizedUri {
        &self.uri
    }

    /// Where the store is, as a user names it: the absolute path of a
    /// local store, else `scheme://host/path` without a trailing slash.
    pub fn location(&self) -> &str {
        if self.is_local() {
            return self.uri.path();
        }
        let text = self.uri.as_str();
        text.strip_suffix('/')
            .filter(|_| self.uri.path() == "/")
            .unwrap_or(text)
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        self.namespace.as_str()
    }

    /// The backend name, lower-case.
    pub fn backend(&self) -> &str {
        self.backend.as_str()
    }

    /// Whether the data lives on the local filesystem.
    pub fn is_local(&self) -> bool {
        self.uri.is_local_file()
    }

    /// A digest of the identity's canonical JSON (what a receipt binds as
    /// its storage fingerprint).
    pub fn fingerprint(&self) -> Digest {
        crate::migration::data::domain(b"custos.migration.identity.v1\0", &canonical_bytes(self))
    }

    /// The bytes [`catalog_fingerprint`](Self::catalog_fingerprint) hashes:
    /// a version tag and the [`location`](Self::location), namespace and
    /// backend, each length-prefixed.
    pub fn catalog_bytes(&self) -> Vec<u8> {
        let mut out = b"custos-storage-identity/v1".to_vec();
        for part in [self.location(), self.namespace(), self.backend()] {
            out.extend_from_slice(&(part.len() as u64).to_be_bytes());
            out.extend_from_slice(part.as_bytes());
        }
        out
    }

    /// The SHA-256 of [`catalog_bytes`](Self::catalog_bytes), 64 lower-case
    /// hex digits: the name of a remote store's catalog files.
    pub fn catalog_fingerprint(&self) -> String {
        Digest::of(&self.catalog_bytes()).hex()
    }
}

/// How a table is classified in the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Classification {
    /// A storage-owned table (ECS rows, control mirrors, …).
    Storage,
    /// A typed Artifact index joined to `artifact_files`.
    ArtifactIndex,
    /// The `artifact_files` occurrence inventory: copied last, relocated.
    ArtifactFiles,
    /// An unknown application table: copied and verified uninterpreted.
    Application,
}

/// Evidence of one table: what a fresh read reproduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TableFacts {
    /// The snapshot read (physical; may differ at the destination).
    pub snapshot: u64,
    /// The logical-schema fingerprint.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub schema_fingerprint: Digest,
    /// The fingerprint of the table's partition spec, sort order and
    /// owner's properties ([`super::metadata::TableMetadata::fingerprint`]).
    #[cfg_attr(
        feature = "schema",
        schemars(
            description = "The fingerprint of the table's partition spec, sort order and \
                                owner's properties."
        )
    )]
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub metadata_fingerprint: Digest,
    /// The row count.
    pub rows: u64,
    /// The deterministic, order-independent content digest.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub content_digest: Digest,
}

impl TableFacts {
    /// Same logical table: schema, metadata, rows and digest (snapshot
    /// ignored).
    pub fn same_content(
        &self,
        schema: Digest,
        metadata: Digest,
        rows: u64,
        digest: Digest,
    ) -> bool {
        self.schema_fingerprint == schema
            && self.metadata_fingerprint == metadata
            && self.rows == rows
            && self.content_digest == digest
    }

    /// What differs between these facts (a destination's) and the ones
    /// `plan` expects, for a refusal that says why: `None` when they
    /// match ([`TablePlan::destination_matches`]).
    pub fn difference(&self, plan: &TablePlan) -> Option<String> {
        let want = &plan.source;
        let mut what = Vec::new();
        if self.schema_fingerprint != want.schema_fingerprint {
            what.push("schema fingerprint");
        }
        if self.metadata_fingerprint != want.metadata_fingerprint {
            what.push("metadata fingerprint (partition spec, sort order or properties)");
        }
        if self.rows != want.rows {
            what.push("row count");
        }
        if self.content_digest != plan.destination_content_digest {
            what.push("content digest");
        }
        (!what.is_empty()).then(|| what.join(", "))
    }
}

/// One table of the plan.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TablePlan {
    /// The exact table name.
    pub name: Name,
    /// Its classification.
    pub classification: Classification,
    /// The pinned source evidence.
    pub source: TableFacts,
    /// The content digest the destination must reproduce: equal to the
    /// source's except for `artifact_files`, whose `object_uri` is relocated.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub destination_content_digest: Digest,
}

impl TablePlan {
    /// Whether `facts` are the expected destination content.
    pub fn destination_matches(&self, facts: &TableFacts) -> bool {
        facts.same_content(
            self.source.schema_fingerprint,
            self.source.metadata_fingerprint,
            self.source.rows,
            self.destination_content_digest,
        )
    }
}

/// One content object, as read and verified in full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ObjectFacts {
    /// SHA-256 of the bytes (the content address).
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub sha256: Digest,
    /// XXH3-64 of the bytes.
    pub xxh3_64: u64,
    /// Size in bytes.
    pub size: u64,
}

/// The Artifact inventory of the plan.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ArtifactPlan {
    /// Visible `artifact_files` occurrences.
    pub occurrences: u64,
    /// Every distinct referenced object, sorted by SHA-256.
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_ITEMS)))]
    pub objects: Vec<ObjectFacts>,
}

impl ArtifactPlan {
    /// The inventory digest: binds every object and the occurrence count.
    pub fn inventory_digest(&self) -> Digest {
        crate::migration::data::domain(b"custos.migration.inventory.v1\0", &canonical_bytes(self))
    }

    /// Total bytes of the distinct objects (saturating).
    pub fn total_bytes(&self) -> u64 {
        self.objects
            .iter()
            .fold(0u64, |a, o| a.saturating_add(o.size))
    }
}

/// One World's control identity and fence evidence.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WorldPlan {
    /// The World.
    pub world: Name,
    /// The source fence epoch the migration holder acquired at planning.
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub source_epoch: Epoch,
    /// Every writer epoch recorded in the World's imported manifests.
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_MANIFEST_EPOCHS)))]
    pub manifest_writer_epochs: Vec<Epoch>,
    /// Whether the World is active and resumable (cold verification must
    /// resume it).
    pub resumable: bool,
}

impl WorldPlan {
    /// The floor the destination must import: `fence::import_floor_for`.
    pub fn import_floor(&self) -> Epoch {
        fence::import_floor_for(self.source_epoch, &self.manifest_writer_epochs)
    }
}

/// The typed control snapshot of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ControlPlan {
    /// Digest of the typed, versioned control snapshot.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub snapshot_digest: Digest,
    /// Control records in the snapshot.
    pub records: u64,
}

/// The immutable, credential-free migration plan.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[cfg_attr(
    feature = "schema",
    schemars(
        description = "The immutable, credential-free migration plan, as `custos migrate \
                            plan --json` prints it and `custos migrate plan --out FILE` writes it \
                            (compact, canonical) for `custos migrate run --plan FILE`. A plan file \
                            must be canonical: compact JSON, each object's fields in the order \
                            its `required` lists them (`second_copy` last, only when true), \
                            worlds, tables and objects sorted and unique."
    )
)]
pub struct Plan {
    /// The plan format: 1 ([`PLAN_FORMAT`]).
    #[cfg_attr(
        feature = "schema",
        schemars(description = "The plan format: 1.", extend("const" = PLAN_FORMAT))
    )]
    pub format: u32,
    /// The migration id.
    pub migration_id: Name,
    /// The source storage identity.
    pub source: StorageIdentity,
    /// The destination storage identity.
    pub destination: StorageIdentity,
    /// The source Artifact root.
    pub source_artifact_root: NormalizedUri,
    /// The destination Artifact root (disjoint from the source's).
    pub destination_artifact_root: NormalizedUri,
    /// The control snapshot.
    pub control: ControlPlan,
    /// Every World, sorted by name.
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_ITEMS)))]
    pub worlds: Vec<WorldPlan>,
    /// Every table of the namespace, sorted by name; exactly one is
    /// `artifact_files`.
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_ITEMS)))]
    pub tables: Vec<TablePlan>,
    /// The verified Artifact inventory.
    pub artifacts: ArtifactPlan,
    /// The operator acknowledged that this migration makes a second live
    /// copy of a source that already departed elsewhere (absent from the
    /// encoding when false, so plans without it keep their bytes).
    #[serde(default, skip_serializing_if = "is_false")]
    pub second_copy: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Plan {
    /// Checks every structural rule: format, distinct identities, disjoint
    /// Artifact roots, sorted unique sequences within bounds, exactly one
    /// `artifact_files` table, unrelocated tables keep their digest.
    pub fn check(&self) -> Result<(), DataError> {
        let inv = |s: &str| Err(DataError::Invalid(s.to_string()));
        if self.format != PLAN_FORMAT {
            return inv("unknown plan format");
        }
        if self.source == self.destination {
            return inv("identical source and destination storage identities");
        }
        if !self
            .source_artifact_root
            .disjoint(&self.destination_artifact_root)
        {
            return inv("source and destination Artifact roots overlap");
        }
        if self.tables.len() > MAX_ITEMS
            || self.worlds.len() > MAX_ITEMS
            || self.artifacts.objects.len() > MAX_ITEMS
        {
            return inv("too many items");
        }
        if !strictly_sorted(self.tables.iter().map(|t| &t.name)) {
            return inv("tables not sorted and unique");
        }
        if !strictly_sorted(self.worlds.iter().map(|w| &w.world)) {
            return inv("worlds not sorted and unique");
        }
        if !strictly_sorted(self.artifacts.objects.iter().map(|o| &o.sha256)) {
            return inv("objects not sorted and unique");
        }
        if self
            .worlds
            .iter()
            .any(|w| w.manifest_writer_epochs.len() > MAX_MANIFEST_EPOCHS || w.source_epoch == 0)
        {
            return inv("world fence evidence out of bounds");
        }
        let files = self
            .tables
            .iter()
            .filter(|t| t.classification == Classification::ArtifactFiles)
            .count();
        // An identity without an Artifact index has nothing to relocate.
        if files > 1 || (files == 0 && self.artifacts.occurrences > 0) {
            return inv("at most one artifact_files table, and none only without occurrences");
        }
        if self.tables.iter().any(|t| {
            t.classification != Classification::ArtifactFiles
                && t.destination_content_digest != t.source.content_digest
        }) {
            return inv("only artifact_files may change content digest");
        }
        if (self.artifacts.objects.len() as u64) > self.artifacts.occurrences {
            return inv("more objects than occurrences");
        }
        Ok(())
    }

    /// The canonical bytes.
    pub fn canonical(&self) -> Vec<u8> {
        canonical_bytes(self)
    }

    /// The plan digest: SHA-256 over a domain prefix and the canonical bytes.
    pub fn digest(&self) -> Digest {
        crate::migration::data::domain(PLAN_DOMAIN, &self.canonical())
    }

    /// Decodes a plan, refusing oversized, malformed, non-canonical or
    /// structurally invalid input. Total.
    pub fn decode(bytes: &[u8]) -> Result<Plan, DataError> {
        let plan: Plan = decode_canonical(bytes)?;
        plan.check()?;
        Ok(plan)
    }

    /// The index of the `artifact_files` table, if the plan has one.
    pub fn artifact_files(&self) -> Option<usize> {
        self.tables
            .iter()
            .position(|t| t.classification == Classification::ArtifactFiles)
    }
}

fn strictly_sorted<'a, T: Ord + 'a>(mut it: impl Iterator<Item = &'a T>) -> bool {
    let Some(mut prev) = it.next() else {
        return true;
    };
    for x in it {
        if x <= prev {
            return false;
        }
        prev = x;
    }
    true
}

/// The canonical encoding of a value: compact `serde_json`, the bytes every
/// migration digest (plan, receipt, identity, evidence) is taken over.
pub fn canonical_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain-data types cannot fail: no maps with non-string
    // keys, no custom serializers that error. Fall back to empty bytes (which
    // never decodes) rather than panic.
    serde_json::to_vec(value).unwrap_or_default()
}

/// Decodes `bytes` as a `T` in its canonical encoding: at most
/// [`MAX_ENCODED_LEN`] bytes, well formed, and byte for byte what
/// [`canonical_bytes`] writes for the value decoded (anything else is
/// [`DataError::NonCanonical`]).
pub fn decode_canonical<T: Serialize + for<'de> Deserialize<'de>>(
    bytes: &[u8],
) -> Result<T, DataError> {
    if bytes.len() > MAX_ENCODED_LEN {
        return Err(DataError::TooLarge { len: bytes.len() });
    }
    let value: T =
        serde_json::from_slice(bytes).map_err(|e| DataError::Malformed(e.to_string()))?;
    if canonical_bytes(&value) != bytes {
        return Err(DataError::NonCanonical);
    }
    Ok(value)
}

/// Evidence digest of any canonical evidence value (observations, cold
/// verification).
pub fn evidence_digest<T: Serialize>(value: &T) -> Digest {
    crate::migration::data::domain(EVIDENCE_DOMAIN, &canonical_bytes(value))
}

/// The per-table line of a receipt.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TableReceipt {
    /// Table name.
    pub name: Name,
    /// Classification.
    pub classification: Classification,
    /// Source snapshot identity.
    pub source_snapshot: u64,
    /// Destination snapshot identity.
    pub destination_snapshot: u64,
    /// Logical-schema fingerprint.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub schema_fingerprint: Digest,
    /// Fingerprint of the partition spec, sort order and owner's
    /// properties, the same at both ends.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub metadata_fingerprint: Digest,
    /// Row count.
    pub rows: u64,
    /// Source content digest.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub source_content_digest: Digest,
    /// Destination (relocated) content digest.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub destination_content_digest: Digest,
}

/// The Artifact line of a receipt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ArtifactReceipt {
    /// Occurrences relocated.
    pub occurrences: u64,
    /// Distinct content objects copied or reused.
    pub objects: u64,
    /// Bytes read back and verified.
    pub verified_bytes: u64,
    /// The inventory digest.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub inventory_digest: Digest,
}

/// Activation status recorded in a receipt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Activation {
    /// Every World was activated.
    Activated,
}

/// The control line of a receipt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ControlReceipt {
    /// Control records imported.
    pub records: u64,
    /// Worlds activated.
    pub worlds: u64,
    /// Writer-fence floors imported.
    pub fence_floors: u64,
    /// The control snapshot digest.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub snapshot_digest: Digest,
    /// Activation status.
    pub activation: Activation,
}

/// What the receipt says about Activity history (always empty in local v1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ActivityDisposition {
    /// `empty-v1`: preflight proved both Activity catalogs empty.
    #[serde(rename = "empty-v1")]
    EmptyV1,
}

/// How cold verification exercised a resumable World.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Resume {
    /// The identity has no active resumable World.
    NotApplicable,
    /// A read-only verification: the identity has a resumable World, and
    /// it was left as it is — no fence taken, no tick committed. Never the
    /// evidence of a migration's own cold verification, which resumes.
    NotExercised,
    /// A World was resumed at its durable head under a fresh epoch above the
    /// imported floor and committed a later tick.
    Resumed {
        /// The World resumed.
        world: Name,
        /// The destination epoch acquired.
        epoch: Epoch,
        /// The tick committed.
        tick: u64,
    },
}

/// Evidence returned by the destination-only cold verifier.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColdEvidence {
    /// The plan the verifier checked against.
    #[serde(with = "crate::digest::bare")]
    pub plan_digest: Digest,
    /// Worlds discovered at the destination.
    pub worlds_discovered: u64,
    /// Every destination table as read fresh, sorted by name.
    pub tables: Vec<(Name, TableFacts)>,
    /// Objects whose full bytes verified.
    pub objects_verified: u64,
    /// The resume exercise.
    pub resume: Resume,
    /// Planned Worlds the destination does not discover as active, by name
    /// (absent from the encoding when empty, so evidence that verified
    /// keeps its bytes and its digest).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worlds_missing: Vec<Name>,
    /// Planned objects whose bytes at the destination did not verify, each
    /// with what was found there (absent from the encoding when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects_failed: Vec<ObjectMismatch>,
}

impl ColdEvidence {
    /// The evidence of a cold read of `plan`: the worlds it found missing,
    /// the tables as read, the objects verified and those that failed, and
    /// the resume exercise. The worlds discovered are the plan's less the
    /// missing ones.
    pub fn of(
        plan: &Plan,
        worlds_missing: Vec<Name>,
        tables: Vec<(Name, TableFacts)>,
        (objects_verified, objects_failed): (u64, Vec<ObjectMismatch>),
        resume: Resume,
    ) -> Self {
        ColdEvidence {
            plan_digest: plan.digest(),
            worlds_discovered: plan.worlds.len().saturating_sub(worlds_missing.len()) as u64,
            tables,
            objects_verified,
            resume,
            worlds_missing,
            objects_failed,
        }
    }
}

/// A planned object whose bytes at the destination did not verify.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectMismatch {
    /// The planned object's SHA-256 (its content address).
    #[serde(with = "crate::digest::bare")]
    pub sha256: Digest,
    /// The address the verifier read.
    pub uri: NormalizedUri,
    /// What it found there.
    pub found: ObjectFound,
}

/// What a verifier found at a planned object's content address.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectFound {
    /// Nothing.
    Missing,
    /// Something other than a regular file (a directory, a symbolic link…).
    NotRegularFile(super::artifacts::Entry),
    /// More bytes than the plan's size (read no further).
    Longer,
    /// A regular file whose bytes measure to these facts.
    Facts(ObjectFacts),
}

/// The cold-verification line of a receipt.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ColdReceipt {
    /// Digest of the cold evidence.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub evidence_digest: Digest,
    /// The resume exercise.
    pub resume: Resume,
}

/// The immutable, credential-free migration receipt.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// The receipt format: 1 ([`RECEIPT_FORMAT`]).
    #[cfg_attr(
        feature = "schema",
        schemars(description = "The receipt format: 1.", extend("const" = RECEIPT_FORMAT))
    )]
    pub format: u32,
    /// The migration id.
    pub migration_id: Name,
    /// The software version that ran the migration.
    pub version: Name,
    /// When the reservation was made (caller's clock).
    pub started_at: Millis,
    /// When the receipt was completed (caller's clock).
    pub completed_at: Millis,
    /// Source storage fingerprint.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub source_fingerprint: Digest,
    /// Destination storage fingerprint.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub destination_fingerprint: Digest,
    /// The plan digest.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub plan_digest: Digest,
    /// The source-stability (recheck) digest.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub source_stability_digest: Digest,
    /// Every table, sorted by name.
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_ITEMS)))]
    pub tables: Vec<TableReceipt>,
    /// Artifacts.
    pub artifacts: ArtifactReceipt,
    /// Control.
    pub control: ControlReceipt,
    /// Activity disposition: `empty-v1`.
    pub activity_disposition: ActivityDisposition,
    /// Cold verification.
    pub cold_verification: ColdReceipt,
    /// The migration made a second live copy of its source, acknowledged
    /// by the operator (absent from the encoding when false).
    #[serde(default, skip_serializing_if = "is_false")]
    pub second_copy: bool,
}

impl Receipt {
    /// Structural rules: format, sorted unique tables within bounds.
    pub fn check(&self) -> Result<(), DataError> {
        if self.format != RECEIPT_FORMAT {
            return Err(DataError::Invalid("unknown receipt format".into()));
        }
        if self.tables.len() > MAX_ITEMS || !strictly_sorted(self.tables.iter().map(|t| &t.name)) {
            return Err(DataError::Invalid(
                "receipt tables not sorted and unique".into(),
            ));
        }
        Ok(())
    }

    /// The receipt digest: SHA-256 over a domain prefix and the canonical
    /// bytes of the complete receipt.
    pub fn digest(&self) -> Digest {
        crate::migration::data::domain(RECEIPT_DOMAIN, &canonical_bytes(self))
    }
}

/// A receipt with its digest, as stored atomically with the reservation.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[cfg_attr(
    feature = "schema",
    schemars(
        description = "A migration receipt with its digest, as `custos migrate run --json` \
                            prints it and `custos migrate run --receipt FILE` writes it (compact, \
                            canonical) for `custos migrate verify --receipt FILE`. A receipt file \
                            must be canonical (compact JSON, each object's fields in the order \
                            its `required` lists them, `second_copy` last and only when true, \
                            tables sorted by name) and its digest must bind the receipt."
    )
)]
pub struct StoredReceipt {
    /// The receipt.
    pub receipt: Receipt,
    /// Its digest.
    #[serde(with = "crate::digest::bare")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::digest::bare::BareHex"))]
    pub digest: Digest,
}

impl StoredReceipt {
    /// Seals a receipt with its digest.
    pub fn seal(receipt: Receipt) -> Self {
        let digest = receipt.digest();
        StoredReceipt { receipt, digest }
    }

    /// Checks the structure and that the digest binds the receipt.
    pub fn verify(&self) -> Result<(), DataError> {
        self.receipt.check()?;
        let computed = self.receipt.digest();
        if computed != self.digest {
            return Err(DataError::DigestMismatch {
                stored: self.digest,
                computed,
            });
        }
        Ok(())
    }

    /// The canonical bytes a shell stores.
    pub fn encode(&self) -> Vec<u8> {
        canonical_bytes(self)
    }

    /// Decodes stored receipt bytes: refuses oversized input before parsing,
    /// a missing or unknown field, a non-canonical encoding, an invalid
    /// structure and a digest that does not bind the receipt. Total.
    pub fn decode(bytes: &[u8]) -> Result<StoredReceipt, DataError> {
        let stored: StoredReceipt = decode_canonical(bytes)?;
        stored.verify()?;
        Ok(stored)
    }
}
