//! The filesystem Artifact store and relocation between two real roots
//! (every referenced object copied once by content address and verified in
//! full, never re-ingested): an end-to-end relocation with `RealFs`, every bad input
//! or fault as its own test named after it — each a typed refusal naming
//! the object, and each refusal found before copying leaving the
//! destination tree byte-untouched — and failpoints over every filesystem
//! operation of a relocation's put: no partial object is ever visible at a
//! content address, and a retry after reopening succeeds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use custos_core::migration::artifacts::{
    content_address, put_bytes, relocate, Entry, ObjectError, ObjectStore, Occurrence,
    OccurrenceMeta, Relocation, RelocationError, Side,
};
use custos_core::migration::{Name, NormalizedUri};
use custos_fs::artifacts::{ArtifactStore, ArtifactStoreError, STAGING_DIR};
use custos_fs::{Op, RealFs, RecordingFs};

fn meta(id: &str, tick: u64) -> OccurrenceMeta {
    OccurrenceMeta {
        artifact_id: Name::new(id).unwrap(),
        ingested_at: 1_764_600_000_000_000 + tick as i64,
        source_uri: format!("file:///camera/{id}.raw"),
        logical_path: format!("captures/{id}.png"),
        world: Name::new("w").unwrap(),
        run: Some(Name::new("run-1").unwrap()),
        tick: Some(tick),
        media_type: "image/png".into(),
    }
}

fn big() -> Vec<u8> {
    (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}

/// A temp dir with a source store holding four rows over three distinct
/// objects (rows a and d share bytes), written through `ingest`.
struct Env {
    _dir: tempfile::TempDir,
    src: PathBuf,
    dst: PathBuf,
    rows: Vec<Occurrence>,
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        let dst = dir.path().join("dst");
        let store = ArtifactStore::open(RealFs, &src).unwrap();
        let rows = vec![
            store.ingest(b"frame one", meta("a", 1)).unwrap(),
            store.ingest(&big(), meta("b", 2)).unwrap(),
            store.ingest(b"", meta("c", 3)).unwrap(),
            store.ingest(b"frame one", meta("d", 4)).unwrap(),
        ];
        drop(store);
        // The destination root exists (initialized, empty) before any run.
        drop(ArtifactStore::open(RealFs, &dst).unwrap());
        Env {
            _dir: dir,
            src,
            dst,
            rows,
        }
    }

    fn source(&self) -> ArtifactStore<RealFs> {
        ArtifactStore::open_read_only(RealFs, &self.src).unwrap()
    }

    fn destination(&self) -> ArtifactStore<RealFs> {
        ArtifactStore::open(RealFs, &self.dst).unwrap()
    }

    fn run(&self, rows: &[Occurrence]) -> Result<Relocation, Box<RelocationError>> {
        let (s, d) = (self.source(), self.destination());
        relocate(rows, &s, s.root_uri(), &d, d.root_uri())
    }

    /// The file of row `i`'s object at the source.
    fn src_file(&self, i: usize) -> PathBuf {
        self.source().path_of(&self.rows[i].object_uri).unwrap()
    }

    /// The destination file of row `i`'s object.
    fn dst_file(&self, i: usize) -> PathBuf {
        let d = self.destination();
        d.path_of(&content_address(d.root_uri(), &self.rows[i].sha256).unwrap())
            .unwrap()
    }

    /// Relocates `rows`, which must be refused with `reason` before any
    /// copy: the destination tree (and the source's) is byte-identical
    /// before and after.
    fn refused_untouched(&self, rows: &[Occurrence], reason: &str) -> RelocationError {
        let (dst_before, src_before) = (snapshot(&self.dst), snapshot(&self.src));
        let err = *self.run(rows).unwrap_err();
        assert_eq!(err.reason(), reason, "{err}");
        assert!(err.to_string().starts_with(reason));
        assert_eq!(snapshot(&self.dst), dst_before, "destination touched");
        assert_eq!(snapshot(&self.src), src_before, "source touched");
        err
    }
}

/// What a path in a snapshot is.
#[derive(Debug, PartialEq, Eq)]
enum Snap {
    File(Vec<u8>),
    Dir,
    Symlink(PathBuf),
    Other,
}

/// Every entry beneath `root` with its full contents (not following
/// symbolic links).
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Snap> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let snap = if m.file_type().is_symlink() {
                Snap::Symlink(std::fs::read_link(&p).unwrap())
            } else if m.is_dir() {
                todo.push(p.clone());
                Snap::Dir
            } else if m.is_file() {
                Snap::File(std::fs::read(&p).unwrap())
            } else {
                Snap::Other
            };
            out.insert(p.strip_prefix(root).unwrap().to_path_buf(), snap);
        }
    }
    out
}

fn objects_under(root: &Path) -> Vec<PathBuf> {
    snapshot(&root.join("sha256"))
        .into_iter()
        .filter(|(_, s)| matches!(s, Snap::File(_)))
        .map(|(p, _)| p)
        .collect()
}

fn rewrite(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut b = std::fs::read(path).unwrap();
    f(&mut b);
    std::fs::write(path, b).unwrap();
}

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

#[test]
fn ingest_and_relocate_between_two_real_roots() {
    let env = Env::new();
    let src_before = snapshot(&env.src);
    let r = env.run(&env.rows).unwrap();
    // Four rows, three distinct objects: each copied exactly once.
    assert_eq!((r.copied, r.reused), (3, 0));
    assert_eq!(objects_under(&env.dst).len(), 3);
    assert_eq!(r.objects.len(), 3);
    assert!(r.objects.windows(2).all(|w| w[0].sha256 < w[1].sha256));
    assert_eq!(r.verified_bytes, 9 + 200_000);
    let dst_uri = env.destination().root_uri().clone();
    for (i, (before, after)) in env.rows.iter().zip(&r.occurrences).enumerate() {
        assert_eq!(
            after.object_uri,
            content_address(&dst_uri, &before.sha256).unwrap()
        );
        assert!(dst_uri.contains(&after.object_uri));
        assert_eq!(
            Occurrence {
                object_uri: before.object_uri.clone(),
                ..after.clone()
            },
            *before,
            "a field other than object_uri changed"
        );
        assert_eq!(
            std::fs::read(env.dst_file(i)).unwrap(),
            std::fs::read(env.src_file(i)).unwrap()
        );
    }
    let plan = r.artifact_plan();
    assert_eq!(plan.occurrences, 4);
    assert_eq!(plan.total_bytes(), 9 + 200_000);
    // Read paths never write: the source is byte-identical.
    assert_eq!(snapshot(&env.src), src_before);
    // No staging debris, only the three objects.
    assert!(snapshot(&env.dst.join(STAGING_DIR)).is_empty());

    // A second relocation (fresh handles) reuses every verified object and
    // copies nothing: the destination is byte-identical.
    let dst_before = snapshot(&env.dst);
    let again = env.run(&env.rows).unwrap();
    assert_eq!((again.copied, again.reused), (0, 3));
    assert_eq!(again.occurrences, r.occurrences);
    assert_eq!(snapshot(&env.dst), dst_before);
}

#[test]
fn ingest_reuses_identical_bytes_and_refuses_conflicting_ones() {
    let env = Env::new();
    let store = ArtifactStore::open(RealFs, &env.src).unwrap();
    let again = store.ingest(b"frame one", meta("e", 5)).unwrap();
    assert_eq!(again.object_uri, env.rows[0].object_uri);
    drop(store);
    rewrite(&env.src_file(0), |b| b[0] ^= 1);
    let before = snapshot(&env.src);
    let store = ArtifactStore::open(RealFs, &env.src).unwrap();
    let err = store.ingest(b"frame one", meta("f", 6)).unwrap_err();
    assert!(matches!(err, ArtifactStoreError::Conflict { .. }), "{err}");
    drop(store);
    assert_eq!(snapshot(&env.src), before);
}

#[test]
fn the_store_serves_only_content_addresses_beneath_its_root() {
    let env = Env::new();
    let s = env.source();
    let root = s.root_uri().clone();
    let marker = NormalizedUri::parse(&format!("{root}/INITIALIZED")).unwrap();
    assert_eq!(s.probe(&marker), Err(ObjectError::NotServed));
    assert_eq!(s.read(&marker, 100).unwrap_err(), ObjectError::NotServed);
    let d = env.destination();
    let elsewhere = content_address(d.root_uri(), &env.rows[0].sha256).unwrap();
    assert_eq!(s.probe(&elsewhere), Err(ObjectError::NotServed));
    // A read-only handle never writes.
    let before = snapshot(&env.src);
    let missing = content_address(&root, &custos_core::migration::Digest::of(b"new")).unwrap();
    assert!(matches!(
        put_bytes(&s, &missing, b"new"),
        Err(ObjectError::Io(_))
    ));
    assert_eq!(snapshot(&env.src), before);
    // put_new never overwrites.
    let dst_uri = content_address(d.root_uri(), &env.rows[2].sha256).unwrap();
    put_bytes(&d, &dst_uri, b"").unwrap();
    assert_eq!(
        put_bytes(&d, &dst_uri, b""),
        Err(ObjectError::Exists(Entry::RegularFile { len: 0 }))
    );
}

#[test]
fn corrupt_object_flipped_byte_is_refused() {
    let env = Env::new();
    rewrite(&env.src_file(1), |b| b[12_345] ^= 0x10);
    let err = env.refused_untouched(&env.rows, "artifact-sha256-mismatch");
    let RelocationError::Sha256Mismatch {
        artifact_id,
        uri,
        expected,
        ..
    } = err
    else {
        panic!()
    };
    assert_eq!(
        (artifact_id, uri, expected),
        (
            name("b"),
            env.rows[1].object_uri.clone(),
            env.rows[1].sha256
        )
    );
}

/// The refusal of object `b` (row 1, 200,000 bytes) found `found` bytes
/// long.
fn size_mismatch_of_b(env: &Env, found: u64) -> RelocationError {
    RelocationError::SizeMismatch {
        artifact_id: name("b"),
        uri: env.rows[1].object_uri.clone(),
        sha256: env.rows[1].sha256,
        expected: 200_000,
        found: Some(found),
    }
}

#[test]
fn truncated_object_is_refused() {
    let env = Env::new();
    rewrite(&env.src_file(1), |b| b.truncate(150_000));
    let err = env.refused_untouched(&env.rows, "artifact-size-mismatch");
    assert_eq!(err, size_mismatch_of_b(&env, 150_000));
}

#[test]
fn missing_object_is_refused() {
    let env = Env::new();
    std::fs::remove_file(env.src_file(0)).unwrap();
    let err = env.refused_untouched(&env.rows, "artifact-object-missing");
    assert_eq!(
        err,
        RelocationError::ObjectMissing {
            side: Side::Source,
            artifact_id: name("a"),
            uri: env.rows[0].object_uri.clone(),
            sha256: env.rows[0].sha256,
        }
    );
}

#[test]
fn oversized_object_is_refused_without_reading_it_whole() {
    let env = Env::new();
    // One byte longer than its row.
    rewrite(&env.src_file(0), |b| b.push(b'!'));
    let err = env.refused_untouched(&env.rows, "artifact-size-mismatch");
    assert!(matches!(
        err,
        RelocationError::SizeMismatch { ref artifact_id, expected: 9, found: Some(10), .. }
            if *artifact_id == name("a")
    ));
    // 64 GiB (sparse) where the row says 200,000 bytes: refused by its
    // length, and the trace shows the file was never opened for reading.
    let path = env.src_file(1);
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(64 << 30)
        .unwrap();
    let rec = RecordingFs::new(RealFs);
    let s = ArtifactStore::open_read_only(rec.clone(), &env.src).unwrap();
    let d = env.destination();
    let before = snapshot(&env.dst);
    rec.clear_trace();
    let err = *relocate(&env.rows, &s, s.root_uri(), &d, d.root_uri()).unwrap_err();
    assert_eq!(err, size_mismatch_of_b(&env, 64 << 30));
    assert!(!rec.trace().iter().any(|r| r.op == Op::Read(path.clone())));
    assert_eq!(snapshot(&env.dst), before);
}

#[test]
fn row_whose_xxh3_disagrees_is_refused() {
    let env = Env::new();
    let mut rows = env.rows.clone();
    rows[3].xxh3_64 ^= 0x8000;
    let err = env.refused_untouched(&rows, "artifact-xxh3-mismatch");
    assert_eq!(
        err,
        RelocationError::Xxh3Mismatch {
            artifact_id: name("d"),
            uri: rows[3].object_uri.clone(),
            sha256: rows[3].sha256,
            expected: env.rows[3].xxh3_64 ^ 0x8000,
            found: env.rows[3].xxh3_64,
        }
    );
}

#[test]
fn row_whose_sha256_disagrees_is_refused() {
    // The row names another digest, and its object sits at that digest's
    // address: the bytes there do not hash to it.
    let env = Env::new();
    let mut rows = env.rows.clone();
    let wrong = custos_core::migration::Digest::of(b"frame two");
    let s = env.source();
    let at = content_address(s.root_uri(), &wrong).unwrap();
    let path = s.path_of(&at).unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::copy(env.src_file(0), &path).unwrap();
    rows[0].sha256 = wrong;
    rows[0].object_uri = at.clone();
    let err = env.refused_untouched(&rows, "artifact-sha256-mismatch");
    assert_eq!(
        err,
        RelocationError::Sha256Mismatch {
            artifact_id: name("a"),
            uri: at,
            expected: wrong,
            found: env.rows[0].sha256,
        }
    );
}

#[test]
fn row_whose_size_disagrees_is_refused() {
    let env = Env::new();
    let mut rows = env.rows.clone();
    rows[1].size += 1;
    let err = env.refused_untouched(&rows, "artifact-size-mismatch");
    assert!(matches!(
        err,
        RelocationError::SizeMismatch { ref artifact_id, expected: 200_001, found: Some(200_000), .. }
            if *artifact_id == name("b")
    ));
}

#[test]
fn symlinked_content_address_at_the_source_fails_closed() {
    // The link's target holds exactly the right bytes: it is still refused.
    let env = Env::new();
    let file = env.src_file(0);
    let real = env.src.parent().unwrap().join("real-object");
    std::fs::rename(&file, &real).unwrap();
    std::os::unix::fs::symlink(&real, &file).unwrap();
    let err = env.refused_untouched(&env.rows, "artifact-object-not-regular-file");
    assert_eq!(
        err,
        RelocationError::NotRegularFile {
            side: Side::Source,
            artifact_id: name("a"),
            uri: env.rows[0].object_uri.clone(),
            sha256: env.rows[0].sha256,
            found: Entry::Symlink,
        }
    );
}

#[test]
fn symlinked_fan_out_directory_at_the_source_fails_closed() {
    let env = Env::new();
    let fan = env.src_file(1).parent().unwrap().to_path_buf();
    let moved = env.src.parent().unwrap().join("moved-fan");
    std::fs::rename(&fan, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &fan).unwrap();
    let err = env.refused_untouched(&env.rows, "artifact-object-not-regular-file");
    assert!(matches!(
        err,
        RelocationError::NotRegularFile {
            side: Side::Source,
            found: Entry::Symlink,
            ..
        }
    ));
}

#[test]
fn symlinked_content_address_at_the_destination_fails_closed() {
    let env = Env::new();
    let target = env.dst_file(1);
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    // A link to a verified copy of the very bytes: still refused, never
    // followed, never replaced.
    let real = env.dst.parent().unwrap().join("verified-copy");
    std::fs::copy(env.src_file(1), &real).unwrap();
    std::os::unix::fs::symlink(&real, &target).unwrap();
    let err = env.refused_untouched(&env.rows, "artifact-object-not-regular-file");
    assert_eq!(
        err,
        RelocationError::NotRegularFile {
            side: Side::Destination,
            artifact_id: name("b"),
            uri: content_address(env.destination().root_uri(), &env.rows[1].sha256).unwrap(),
            sha256: env.rows[1].sha256,
            found: Entry::Symlink,
        }
    );
}

#[test]
fn directory_at_a_content_address_fails_closed() {
    // At the source.
    let env = Env::new();
    let file = env.src_file(2);
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    let err = env.refused_untouched(&env.rows, "artifact-object-not-regular-file");
    assert!(matches!(
        err,
        RelocationError::NotRegularFile { side: Side::Source, found: Entry::Directory, ref artifact_id, .. }
            if *artifact_id == name("c")
    ));
    // At the destination.
    let env = Env::new();
    std::fs::create_dir_all(env.dst_file(0)).unwrap();
    let err = env.refused_untouched(&env.rows, "artifact-object-not-regular-file");
    assert!(matches!(
        err,
        RelocationError::NotRegularFile {
            side: Side::Destination,
            found: Entry::Directory,
            ..
        }
    ));
}

#[test]
fn conflicting_bytes_at_the_destination_are_never_overwritten() {
    let env = Env::new();
    let target = env.dst_file(1);
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    let mut other = big();
    other[0] ^= 0xff;
    std::fs::write(&target, &other).unwrap();
    let err = env.refused_untouched(&env.rows, "artifact-destination-conflict");
    let RelocationError::DestinationConflict {
        artifact_id,
        sha256,
        ..
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!((artifact_id, sha256), (&name("b"), &env.rows[1].sha256));
    assert_eq!(std::fs::read(&target).unwrap(), other);
    // Nothing else was copied either (refused before copying).
    assert_eq!(objects_under(&env.dst).len(), 1);
}

#[test]
fn overlapping_roots_nested_both_ways_are_refused() {
    let env = Env::new();
    let s = env.source();
    // Destination nested inside the source root.
    let inner = env.src.join("nested-destination");
    let d = ArtifactStore::open(RealFs, &inner).unwrap();
    let before = snapshot(&env.src);
    let err = *relocate(&env.rows, &s, s.root_uri(), &d, d.root_uri()).unwrap_err();
    assert_eq!(
        err,
        RelocationError::RootsOverlap {
            source_root: s.root_uri().clone(),
            destination_root: d.root_uri().clone(),
        }
    );
    assert_eq!(snapshot(&env.src), before);
    // Source nested inside the destination root.
    let outer = ArtifactStore::open(RealFs, &env.dst).unwrap();
    let nested_src = env.dst.join("nested-source");
    let n = ArtifactStore::open(RealFs, &nested_src).unwrap();
    let row = n.ingest(b"frame one", meta("x", 9)).unwrap();
    let before = snapshot(&env.dst);
    let err = *relocate(&[row], &n, n.root_uri(), &outer, outer.root_uri()).unwrap_err();
    assert_eq!(err.reason(), "artifact-roots-overlap");
    assert_eq!(snapshot(&env.dst), before);
    // And the same root on both sides.
    let err = *relocate(&env.rows, &s, s.root_uri(), &s, s.root_uri()).unwrap_err();
    assert_eq!(err.reason(), "artifact-roots-overlap");
}

#[test]
fn object_uri_outside_the_source_root_is_refused() {
    let env = Env::new();
    let mut rows = env.rows.clone();
    let elsewhere = NormalizedUri::parse(&format!(
        "file:///{}/sha256/aa/{}",
        "tmp/elsewhere",
        rows[1].sha256.hex()
    ))
    .unwrap();
    rows[1].object_uri = elsewhere.clone();
    let err = env.refused_untouched(&rows, "artifact-uri-outside-root");
    assert_eq!(
        err,
        RelocationError::UriOutsideRoot {
            artifact_id: name("b"),
            uri: elsewhere,
            root: env.source().root_uri().clone(),
        }
    );
}

#[test]
fn object_uri_not_its_content_address_is_refused() {
    let env = Env::new();
    let mut rows = env.rows.clone();
    // Beneath the root, but the address of another row's digest.
    rows[2].object_uri = env.rows[1].object_uri.clone();
    let err = env.refused_untouched(&rows, "artifact-uri-not-content-address");
    assert_eq!(
        err,
        RelocationError::NotContentAddress {
            artifact_id: name("c"),
            uri: env.rows[1].object_uri.clone(),
            expected: env.rows[2].object_uri.clone(),
        }
    );
    // A path of its own beneath the root.
    let mut rows = env.rows.clone();
    let own = NormalizedUri::parse(&format!("{}/captures/a.png", env.source().root_uri())).unwrap();
    rows[0].object_uri = own;
    env.refused_untouched(&rows, "artifact-uri-not-content-address");
}

/// Failpoints over every filesystem operation of the destination during a
/// relocation of one object (inspection, the put, the read-back): each
/// failure is an error, the content address holds nothing or the whole
/// object — never a part — and a retry after reopening with `RealFs`
/// succeeds with the object in place and no staging debris.
#[test]
fn every_destination_operation_of_a_put_failed_leaves_no_partial_object() {
    let env = Env::new();
    let rows = vec![env.rows[1].clone()];
    let bytes = big();
    let reference = {
        let dir = tempfile::tempdir().unwrap();
        let rec = RecordingFs::new(RealFs);
        let d = ArtifactStore::open(rec.clone(), &dir.path().join("d")).unwrap();
        let s = env.source();
        rec.clear_trace();
        relocate(&rows, &s, s.root_uri(), &d, d.root_uri()).unwrap();
        rec.trace()
    };
    let writes = reference
        .iter()
        .filter(|r| {
            matches!(
                r.op,
                Op::CreateDir(_)
                    | Op::WriteNew(..)
                    | Op::SyncFile(_)
                    | Op::SyncDir(_)
                    | Op::Rename(..)
            )
        })
        .count();
    assert!(writes >= 6, "{reference:?}");
    for (i, failed) in reference.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("d");
        let rec = RecordingFs::new(RealFs);
        let d = ArtifactStore::open(rec.clone(), &dst).unwrap();
        let s = env.source();
        let target = d
            .path_of(&content_address(d.root_uri(), &rows[0].sha256).unwrap())
            .unwrap();
        rec.clear_trace();
        rec.fail_at(i);
        let err = *relocate(&rows, &s, s.root_uri(), &d, d.root_uri()).unwrap_err();
        assert_eq!(err.reason(), "artifact-io", "op {i} {:?}: {err}", failed.op);
        assert!(!rec.trace()[i].ok);
        assert_eq!(
            std::mem::discriminant(&rec.trace()[i].op),
            std::mem::discriminant(&failed.op)
        );
        match std::fs::read(&target) {
            Ok(b) => assert_eq!(b, bytes, "partial object after failing op {i}"),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
        }
        drop(d);
        let d = ArtifactStore::open(RealFs, &dst).unwrap();
        let r = relocate(&rows, &s, s.root_uri(), &d, d.root_uri()).unwrap();
        assert_eq!(r.copied + r.reused, 1);
        assert_eq!(std::fs::read(&target).unwrap(), bytes);
        assert!(snapshot(&dst.join(STAGING_DIR)).is_empty());
    }
}

/// `put_new` streams and stores only the expected object: other bytes, a
/// short stream and an endless one are `Mismatch` (the endless one read to
/// size + 1 only), each leaving the address empty and no staged file.
#[test]
fn put_new_stores_only_bytes_that_verify_and_leaves_no_staged_file() {
    let env = Env::new();
    let d = env.destination();
    let good = custos_core::migration::artifacts::facts_of(b"the object");
    let at = content_address(d.root_uri(), &good.sha256).unwrap();
    let mut endless = std::io::repeat(b'x');
    let attempts: [&mut dyn std::io::Read; 3] =
        [&mut &b"the objecT"[..], &mut &b"the"[..], &mut endless];
    for bytes in attempts {
        let err = d.put_new(&at, bytes, &good).unwrap_err();
        assert!(matches!(err, ObjectError::Mismatch(_)), "{err}");
        assert_eq!(d.probe(&at), Ok(Entry::Missing));
        assert_eq!(
            std::fs::read_dir(env.dst.join(STAGING_DIR))
                .unwrap()
                .count(),
            0
        );
    }
    d.put_new(&at, &mut &b"the object"[..], &good).unwrap();
    assert_eq!(
        std::fs::read(d.path_of(&at).unwrap()).unwrap(),
        b"the object"
    );
}
