//! Storage identity and the location of its control catalog.
//!
//! A storage identity is `uri + namespace + backend` — the key a store is
//! pooled by. [`StorageIdentity::new`] normalizes it so that equivalent
//! spellings compare equal: a plain absolute path and its `file://` form,
//! trailing slashes, repeated slashes, `.` and `..` segments (resolved
//! lexically), an upper-case scheme or host, an upper-case backend name.
//! Its [`fingerprint`](StorageIdentity::fingerprint) is the SHA-256 of the
//! normalized identity.
//!
//! [`catalog_location`] is a pure function of the identity: a local identity
//! keeps its catalog beside the data (`<uri>/<namespace>/.custos-catalog-<backend>.db`),
//! a remote one under a directory the **caller** supplies
//! (`<dir>/<fingerprint>.db`). The shell resolves that directory
//! (`CUSTOS_CATALOG_DIR`, else `~/.custos/catalogs`) and makes a relative
//! local path absolute before calling [`StorageIdentity::new`]: core reads
//! no environment and no working directory. The backend is part of both
//! locations, so two backends on one uri and namespace never share a catalog.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

/// The longest uri, namespace or backend accepted, in bytes.
pub const MAX_PART_LEN: usize = 4096;

/// Why an identity was refused.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum IdentityError {
    /// A part is empty, too long, or carries control characters.
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
        use crate::Class;
        match self {
            IdentityError::Invalid { .. } => Class::InvalidArgument,
        }
    }
}

fn invalid(part: &str, detail: &str) -> IdentityError {
    IdentityError::Invalid {
        part: part.to_owned(),
        detail: detail.to_owned(),
    }
}

/// A normalized storage identity.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StorageIdentity {
    uri: String,
    namespace: String,
    backend: String,
    local: bool,
}

/// Resolves `.`, `..`, empty segments and trailing slashes lexically; the
/// result starts with `/` and has no trailing slash (except the root).
fn normalize_path(path: &str) -> String {
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

fn check_text(part: &str, s: &str) -> Result<(), IdentityError> {
    if s.is_empty() {
        return Err(invalid(part, "empty"));
    }
    if s.len() > MAX_PART_LEN {
        return Err(invalid(part, "too long"));
    }
    if s.chars().any(char::is_control) {
        return Err(invalid(part, "control character"));
    }
    Ok(())
}

fn normalize_uri(uri: &str) -> Result<(String, bool), IdentityError> {
    check_text("uri", uri)?;
    if uri.contains('?') || uri.contains('#') {
        return Err(invalid(
            "uri",
            "a query or fragment is not part of a storage identity",
        ));
    }
    let Some((scheme, rest)) = uri.split_once("://") else {
        if uri.starts_with('/') {
            return Ok((normalize_path(uri), true));
        }
        return Err(invalid(
            "uri",
            "a local path must be absolute (the shell resolves relative paths)",
        ));
    };
    let scheme = scheme.to_ascii_lowercase();
    let mut sc = scheme.chars();
    if !sc.next().is_some_and(|c| c.is_ascii_lowercase())
        || !sc.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+.-".contains(c))
    {
        return Err(invalid("uri", "bad scheme"));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if authority.contains('@') {
        return Err(invalid(
            "uri",
            "credentials are not part of a storage identity",
        ));
    }
    let authority = authority.to_ascii_lowercase();
    if scheme == "file" {
        if !(authority.is_empty() || authority == "localhost") {
            return Err(invalid("uri", "a file uri names no remote host"));
        }
        return Ok((normalize_path(path), true));
    }
    if authority.is_empty() {
        return Err(invalid("uri", "a remote uri needs a host or bucket"));
    }
    let path = normalize_path(path);
    let path = if path == "/" { "" } else { path.as_str() };
    Ok((format!("{scheme}://{authority}{path}"), false))
}

impl StorageIdentity {
    /// Normalizes `uri`, `namespace` and `backend` into an identity.
    ///
    /// The namespace is one path segment (no `/`, `\`, and not `.` or
    /// `..`); the backend is ASCII letters, digits, `-` and `_`, compared
    /// case-insensitively.
    pub fn new(uri: &str, namespace: &str, backend: &str) -> Result<Self, IdentityError> {
        let (uri, local) = normalize_uri(uri)?;
        check_text("namespace", namespace)?;
        if namespace.contains('/')
            || namespace.contains('\\')
            || namespace == "."
            || namespace == ".."
        {
            return Err(invalid("namespace", "must be one path segment"));
        }
        check_text("backend", backend)?;
        if !backend
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(invalid(
                "backend",
                "ASCII letters, digits, '-' and '_' only",
            ));
        }
        Ok(StorageIdentity {
            uri,
            namespace: namespace.to_owned(),
            backend: backend.to_ascii_lowercase(),
            local,
        })
    }

    /// The normalized uri: an absolute path for a local store, else
    /// `scheme://host/path` without a trailing slash.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The backend name, lower-case.
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// Whether the data lives on the local filesystem.
    pub fn is_local(&self) -> bool {
        self.local
    }

    /// The canonical bytes the fingerprint hashes: a version tag and the
    /// three normalized parts, each length-prefixed.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        let mut out = b"custos-storage-identity/v1".to_vec();
        for part in [&self.uri, &self.namespace, &self.backend] {
            out.extend_from_slice(&(part.len() as u64).to_be_bytes());
            out.extend_from_slice(part.as_bytes());
        }
        out
    }

    /// SHA-256 of [`canonical_bytes`](Self::canonical_bytes), lower-case hex.
    pub fn fingerprint(&self) -> String {
        crate::hex::encode(Sha256::digest(self.canonical_bytes()))
    }
}

/// Where the control catalog of `id` lives. `remote_dir` is used only for a
/// remote identity (the shell passes `CUSTOS_CATALOG_DIR` or
/// `~/.custos/catalogs`); a trailing slash on it is ignored.
pub fn catalog_location(id: &StorageIdentity, remote_dir: &str) -> String {
    if id.is_local() {
        let base = if id.uri() == "/" { "" } else { id.uri() };
        format!(
            "{base}/{}/.custos-catalog-{}.db",
            id.namespace(),
            id.backend()
        )
    } else {
        let dir = remote_dir.trim_end_matches('/');
        format!("{dir}/{}.db", id.fingerprint())
    }
}

/// Where the Activity catalog (the execution ledger) of `id` lives, by the
/// same rule as [`catalog_location`]: beside the data for a local identity
/// (`<uri>/<namespace>/.custos-activity-<backend>.db`), in `remote_dir` by
/// fingerprint (`<fingerprint>.activity.db`) for a remote one. A migration
/// reads it to refuse an identity with any Activity history, settled or not.
pub fn activity_location(id: &StorageIdentity, remote_dir: &str) -> String {
    if id.is_local() {
        let base = if id.uri() == "/" { "" } else { id.uri() };
        format!(
            "{base}/{}/.custos-activity-{}.db",
            id.namespace(),
            id.backend()
        )
    } else {
        let dir = remote_dir.trim_end_matches('/');
        format!("{dir}/{}.activity.db", id.fingerprint())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_activity_catalog_lives_beside_the_control_catalog() {
        let local = StorageIdentity::new("/srv/data", "ns", "iceberg").unwrap();
        assert_eq!(
            activity_location(&local, "/c"),
            "/srv/data/ns/.custos-activity-iceberg.db"
        );
        let control = catalog_location(&local, "/c");
        assert_eq!(
            std::path::Path::new(&control).parent(),
            std::path::Path::new(&activity_location(&local, "/c")).parent()
        );
        let remote = StorageIdentity::new("s3://bucket/x", "ns", "iceberg").unwrap();
        assert_eq!(
            activity_location(&remote, "/c/"),
            format!("/c/{}.activity.db", remote.fingerprint())
        );
        assert_ne!(
            activity_location(&remote, "/c"),
            catalog_location(&remote, "/c")
        );
    }

    fn id(u: &str, n: &str, b: &str) -> StorageIdentity {
        StorageIdentity::new(u, n, b).unwrap()
    }

    #[test]
    fn equivalent_local_spellings_land_on_one_file() {
        let want = "/data/store/ns/.custos-catalog-iceberg.db";
        for u in [
            "/data/store",
            "/data/store/",
            "/data//store///",
            "/data/./store",
            "/data/x/../store",
            "file:///data/store",
            "file://localhost/data/store/",
            "FILE:///data/store/.",
        ] {
            assert_eq!(catalog_location(&id(u, "ns", "iceberg"), "/c"), want, "{u}");
        }
        assert_eq!(
            catalog_location(&id("/data/store", "ns", "ICEBERG"), "/c"),
            want
        );
        assert_eq!(
            catalog_location(&id("/", "ns", "iceberg"), "/c"),
            "/ns/.custos-catalog-iceberg.db"
        );
    }

    #[test]
    fn equivalent_remote_spellings_share_one_fingerprint() {
        let a = id("s3://bucket/warehouse", "ns", "iceberg");
        for u in [
            "s3://bucket/warehouse/",
            "S3://BUCKET/warehouse",
            "s3://bucket/./warehouse//",
            "s3://bucket/tmp/../warehouse",
        ] {
            assert_eq!(id(u, "ns", "iceberg"), a, "{u}");
        }
        let loc = catalog_location(&a, "/home/u/.custos/catalogs/");
        assert_eq!(
            loc,
            format!("/home/u/.custos/catalogs/{}.db", a.fingerprint())
        );
        assert_eq!(a.fingerprint().len(), 64);
    }

    #[test]
    fn two_backends_never_share_a_catalog() {
        let l1 = id("/d", "ns", "iceberg");
        let l2 = id("/d", "ns", "lancedb");
        assert_ne!(catalog_location(&l1, "/c"), catalog_location(&l2, "/c"));
        let r1 = id("s3://b/w", "ns", "iceberg");
        let r2 = id("s3://b/w", "ns", "lancedb");
        assert_ne!(r1.fingerprint(), r2.fingerprint());
        assert_ne!(catalog_location(&r1, "/c"), catalog_location(&r2, "/c"));
    }

    #[test]
    fn namespaces_and_uris_separate_catalogs() {
        let base = id("s3://b/w", "ns", "iceberg");
        assert_ne!(
            base.fingerprint(),
            id("s3://b/w", "ns2", "iceberg").fingerprint()
        );
        assert_ne!(
            base.fingerprint(),
            id("s3://b/w2", "ns", "iceberg").fingerprint()
        );
        assert_ne!(
            base.fingerprint(),
            id("gs://b/w", "ns", "iceberg").fingerprint()
        );
        // Length prefixes: moving a byte between parts changes the fingerprint.
        assert_ne!(
            id("s3://b/w", "ab", "c").fingerprint(),
            id("s3://b/w", "a", "bc").fingerprint()
        );
    }

    #[test]
    fn malformed_identities_are_refused() {
        for (u, n, b) in [
            ("relative/path", "ns", "iceberg"),
            ("", "ns", "iceberg"),
            ("s3://user:secret@b/w", "ns", "iceberg"),
            ("s3://b/w?token=x", "ns", "iceberg"),
            ("file://otherhost/x", "ns", "iceberg"),
            ("s3:///w", "ns", "iceberg"),
            ("/d", "a/b", "iceberg"),
            ("/d", "..", "iceberg"),
            ("/d", "", "iceberg"),
            ("/d", "ns", "ice berg"),
            ("/d", "ns", ""),
        ] {
            assert!(StorageIdentity::new(u, n, b).is_err(), "{u:?} {n:?} {b:?}");
        }
    }
}
