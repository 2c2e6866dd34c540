//! Storage identity and the location of its control catalog.
//!
//! A storage identity is `uri + namespace + backend` — the key a store is
//! pooled by, and the endpoint a migration plan and receipt name. It is
//! one type, [`StorageIdentity`] (defined beside the migration's other
//! stored data, whose format it shares). [`StorageIdentity::new`]
//! normalizes it so that equivalent spellings compare equal: a plain
//! absolute path and its `file://` form, trailing slashes, repeated
//! slashes, `.` and `..` segments (resolved lexically), an upper-case
//! scheme or host, an upper-case backend name. Its
//! [`catalog_fingerprint`](StorageIdentity::catalog_fingerprint) — the
//! SHA-256 of its [`location`](StorageIdentity::location) (the plain path
//! of a local store, the uri without a trailing slash of a remote one),
//! namespace and backend — names a remote store's files.
//!
//! [`catalog_location`] is a pure function of the identity: a local identity
//! keeps its catalog beside the data (`<path>/<namespace>/.custos-catalog-<backend>.db`),
//! a remote one under a directory the **caller** supplies
//! (`<dir>/<fingerprint>.db`). The shell resolves that directory
//! (`CUSTOS_CATALOG_DIR`, else `~/.custos/catalogs`) and makes a relative
//! local path absolute before calling [`StorageIdentity::new`]: core reads
//! no environment and no working directory. The backend is part of both
//! locations, so two backends on one uri and namespace never share a catalog.

pub use crate::migration::{IdentityError, StorageIdentity, MAX_PART_LEN};

/// Where the control catalog of `id` lives. `remote_dir` is used only for a
/// remote identity (the shell passes `CUSTOS_CATALOG_DIR` or
/// `~/.custos/catalogs`); a trailing slash on it is ignored.
pub fn catalog_location(id: &StorageIdentity, remote_dir: &str) -> String {
    if id.is_local() {
        let base = if id.location() == "/" {
            ""
        } else {
            id.location()
        };
        format!(
            "{base}/{}/.custos-catalog-{}.db",
            id.namespace(),
            id.backend()
        )
    } else {
        let dir = remote_dir.trim_end_matches('/');
        format!("{dir}/{}.db", id.catalog_fingerprint())
    }
}

/// Where the Activity catalog (the execution ledger) of `id` lives, by the
/// same rule as [`catalog_location`]: beside the data for a local identity
/// (`<uri>/<namespace>/.custos-activity-<backend>.db`), in `remote_dir` by
/// fingerprint (`<fingerprint>.activity.db`) for a remote one. A migration
/// reads it to refuse an identity with any Activity history, settled or not.
pub fn activity_location(id: &StorageIdentity, remote_dir: &str) -> String {
    if id.is_local() {
        let base = if id.location() == "/" {
            ""
        } else {
            id.location()
        };
        format!(
            "{base}/{}/.custos-activity-{}.db",
            id.namespace(),
            id.backend()
        )
    } else {
        let dir = remote_dir.trim_end_matches('/');
        format!("{dir}/{}.activity.db", id.catalog_fingerprint())
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
            format!("/c/{}.activity.db", remote.catalog_fingerprint())
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
            format!("/home/u/.custos/catalogs/{}.db", a.catalog_fingerprint())
        );
        assert_eq!(a.catalog_fingerprint().len(), 64);
    }

    #[test]
    fn two_backends_never_share_a_catalog() {
        let l1 = id("/d", "ns", "iceberg");
        let l2 = id("/d", "ns", "lancedb");
        assert_ne!(catalog_location(&l1, "/c"), catalog_location(&l2, "/c"));
        let r1 = id("s3://b/w", "ns", "iceberg");
        let r2 = id("s3://b/w", "ns", "lancedb");
        assert_ne!(r1.catalog_fingerprint(), r2.catalog_fingerprint());
        assert_ne!(catalog_location(&r1, "/c"), catalog_location(&r2, "/c"));
    }

    #[test]
    fn namespaces_and_uris_separate_catalogs() {
        let base = id("s3://b/w", "ns", "iceberg");
        assert_ne!(
            base.catalog_fingerprint(),
            id("s3://b/w", "ns2", "iceberg").catalog_fingerprint()
        );
        assert_ne!(
            base.catalog_fingerprint(),
            id("s3://b/w2", "ns", "iceberg").catalog_fingerprint()
        );
        assert_ne!(
            base.catalog_fingerprint(),
            id("gs://b/w", "ns", "iceberg").catalog_fingerprint()
        );
        // Length prefixes: moving a byte between parts changes the fingerprint.
        assert_ne!(
            id("s3://b/w", "ab", "c").catalog_fingerprint(),
            id("s3://b/w", "a", "bc").catalog_fingerprint()
        );
    }

    #[test]
    fn catalog_file_names_are_the_ones_earlier_versions_chose() {
        // The hex below was computed outside this crate from the stored
        // layout (tag, then each part's u64 length and bytes), so a change
        // to the layout or the parts cannot pass by changing both sides.
        assert_eq!(
            id("s3://bucket/warehouse/", "ns", "ICEBERG").catalog_fingerprint(),
            "399d941c5f5589da66a2e87644dcafcf9ce5ba4c0afaf70efa788b024049318a"
        );
        assert_eq!(
            id("s3://bucket/", "ns", "iceberg").catalog_fingerprint(),
            "eaff5a5028d7766f5045935712aea00fe74b58027e96c3b4d3c3155f416d1909"
        );
        let spaced = id("/srv/my data/", "ns", "iceberg");
        assert_eq!(
            spaced.catalog_fingerprint(),
            "6db784cece4187eb69c81c699522394c5c466d2842141947a9dbe1a7bf6872c4"
        );
        assert_eq!(spaced.location(), "/srv/my data");
        assert_eq!(spaced.uri().as_str(), "file:///srv/my data");
        assert_eq!(
            catalog_location(&spaced, "/c"),
            "/srv/my data/ns/.custos-catalog-iceberg.db"
        );
        assert_eq!(id("s3://bucket", "ns", "iceberg").location(), "s3://bucket");
        assert_eq!(
            id("s3://bucket", "ns", "iceberg").uri().as_str(),
            "s3://bucket/"
        );
    }

    #[test]
    fn a_decoded_identity_is_one_new_makes_or_an_older_spelling_of_it() {
        let good = id("/srv/data", "ns", "iceberg");
        let text = serde_json::to_string(&good).unwrap();
        assert_eq!(
            text,
            r#"{"uri":"file:///srv/data","namespace":"ns","backend":"iceberg"}"#
        );
        assert_eq!(
            serde_json::from_str::<StorageIdentity>(&text).unwrap(),
            good
        );
        // A backend stored before backends were lower-cased decodes as
        // written (so the digests binding it hold) and is another identity.
        let old = r#"{"uri":"file:///srv/data","namespace":"ns","backend":"Iceberg"}"#;
        let decoded = serde_json::from_str::<StorageIdentity>(old).unwrap();
        assert_eq!(decoded.backend(), "Iceberg");
        assert_eq!(serde_json::to_string(&decoded).unwrap(), old);
        assert_ne!(decoded, id("/srv/data", "ns", "Iceberg"));
        // A uri at the bound once normalized is one, however it was spelled.
        let long = format!(
            "/{}",
            "a".repeat(crate::migration::MAX_URI_LEN - "file:///".len())
        );
        assert!(StorageIdentity::new(&format!("file://localhost{long}"), "ns", "b").is_ok());
        for bad in [
            r#"{"uri":"file://localhost/srv/data","namespace":"ns","backend":"iceberg"}"#,
            r#"{"uri":"file:///srv/data","namespace":"a/b","backend":"iceberg"}"#,
            r#"{"uri":"file:///srv/data","namespace":"ns","backend":"ice berg"}"#,
            r#"{"uri":"s3:///w","namespace":"ns","backend":"iceberg"}"#,
            r#"{"uri":"file:///srv/data","namespace":"ns","backend":"iceberg","x":1}"#,
        ] {
            assert!(
                serde_json::from_str::<StorageIdentity>(bad).is_err(),
                "{bad}"
            );
        }
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
            ("/d\tx", "ns", "iceberg"),
            ("/d/%41", "ns", "iceberg"),
            ("s3://buck et/w", "ns", "iceberg"),
            // What a plan's uri cannot hold is no identity either.
            ("/data/100%", "ns", "iceberg"),
            ("/data/no\u{a0}break", "ns", "iceberg"),
            ("/d", "n".repeat(257).as_str(), "iceberg"),
        ] {
            assert!(StorageIdentity::new(u, n, b).is_err(), "{u:?} {n:?} {b:?}");
        }
    }
}
