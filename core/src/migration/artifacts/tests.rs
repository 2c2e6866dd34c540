//! Relocation against an in-memory [`ObjectStore`]: the layout rule, the
//! hashes, every refusal (each leaving the destination untouched when found
//! before copying), and convergence on a retry.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::Mutex;

use super::*;

/// What the memory store holds at an address.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Obj {
    Bytes(Vec<u8>),
    Symlink,
    Dir,
    Other,
    /// An object that never ends (read only as a stream).
    Endless,
}

/// An in-memory object store. `stream` hands every object over as an
/// unbounded reader (so the caller's `limit + 1` cap is what bounds it);
/// `corrupt_puts` stores each put with its first byte flipped (a store
/// whose writes do not read back); `fail_puts` refuses every put;
/// `changes` makes it a source that changes after some reads.
#[derive(Default)]
struct Mem {
    objects: Mutex<BTreeMap<String, Obj>>,
    stream: bool,
    corrupt_puts: bool,
    fail_puts: bool,
    changes: Option<Changes>,
    puts: Mutex<u64>,
    reads: Mutex<u64>,
}

/// A source store that answers its first `honest` reads truthfully and
/// then changes: each later read of an object's bytes has the first byte
/// flipped, or (`fail`) fails after 3 bytes.
#[derive(Clone, Copy)]
struct Changes {
    honest: u64,
    fail: bool,
}

impl Changes {
    /// What a changed source streams for an object of `bytes`.
    fn read(self, mut bytes: Vec<u8>) -> ObjectRead {
        if self.fail {
            bytes.truncate(3);
            return ObjectRead::Stream(Box::new(FailingAfter(Cursor::new(bytes))));
        }
        bytes[0] ^= 1;
        ObjectRead::Stream(Box::new(Cursor::new(bytes)))
    }
}

/// Fails after the bytes it holds.
struct FailingAfter(Cursor<Vec<u8>>);

impl std::io::Read for FailingAfter {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.0.read(buf)? {
            0 => Err(std::io::Error::other("injected source read failure")),
            n => Ok(n),
        }
    }
}

impl Mem {
    fn streaming() -> Self {
        Mem {
            stream: true,
            ..Mem::default()
        }
    }
    fn set(&self, uri: &NormalizedUri, obj: Obj) {
        self.objects
            .lock()
            .unwrap()
            .insert(uri.as_str().to_string(), obj);
    }
    fn get(&self, uri: &NormalizedUri) -> Option<Obj> {
        self.objects.lock().unwrap().get(uri.as_str()).cloned()
    }
    fn snapshot(&self) -> BTreeMap<String, Obj> {
        self.objects.lock().unwrap().clone()
    }
    fn puts(&self) -> u64 {
        *self.puts.lock().unwrap()
    }
    fn reads(&self) -> u64 {
        *self.reads.lock().unwrap()
    }
}

fn entry_of(obj: Option<&Obj>) -> Entry {
    match obj {
        None => Entry::Missing,
        Some(Obj::Bytes(b)) => Entry::RegularFile {
            len: b.len() as u64,
        },
        Some(Obj::Endless) => Entry::RegularFile { len: 0 },
        Some(Obj::Symlink) => Entry::Symlink,
        Some(Obj::Dir) => Entry::Directory,
        Some(Obj::Other) => Entry::Other,
    }
}

impl ObjectStore for Mem {
    fn probe(&self, uri: &NormalizedUri) -> Result<Entry, ObjectError> {
        Ok(entry_of(self.get(uri).as_ref()))
    }
    fn read(&self, uri: &NormalizedUri, limit: u64) -> Result<ObjectRead, ObjectError> {
        let reads = {
            let mut reads = self.reads.lock().unwrap();
            *reads += 1;
            *reads
        };
        let found = self.get(uri);
        if let (Some(changes), Some(Obj::Bytes(b))) = (self.changes, &found) {
            if reads > changes.honest {
                return Ok(changes.read(b.clone()));
            }
        }
        match found {
            None => Err(ObjectError::Missing),
            Some(Obj::Endless) => Ok(ObjectRead::Stream(Box::new(std::io::repeat(7)))),
            Some(Obj::Bytes(b)) if self.stream => Ok(ObjectRead::Stream(Box::new(Cursor::new(b)))),
            Some(Obj::Bytes(b)) if b.len() as u64 > limit => Err(ObjectError::TooLong {
                len: b.len() as u64,
            }),
            Some(Obj::Bytes(b)) => Ok(ObjectRead::Bytes(b)),
            Some(other) => Err(ObjectError::NotRegularFile(entry_of(Some(&other)))),
        }
    }
    fn put_new(
        &self,
        uri: &NormalizedUri,
        bytes: &mut dyn std::io::Read,
        expect: &ObjectFacts,
    ) -> Result<(), ObjectError> {
        if self.fail_puts {
            return Err(ObjectError::Io("injected put failure".into()));
        }
        if let Some(o) = self.objects.lock().unwrap().get(uri.as_str()) {
            return Err(ObjectError::Exists(entry_of(Some(o))));
        }
        let mut v = Verifying::new(bytes, expect.size);
        let mut b = Vec::new();
        let read = std::io::Read::read_to_end(&mut v, &mut b);
        if let Some(e) = v.source_failure() {
            return Err(ObjectError::Source(e.to_string()));
        }
        read.map_err(|e| ObjectError::Io(e.to_string()))?;
        let measured = v.measured();
        if measured != Measured::Facts(*expect) {
            return Err(ObjectError::Mismatch(measured));
        }
        if self.corrupt_puts {
            if let Some(x) = b.first_mut() {
                *x ^= 1;
            }
        }
        let mut objects = self.objects.lock().unwrap();
        objects.insert(uri.as_str().to_string(), Obj::Bytes(b));
        *self.puts.lock().unwrap() += 1;
        Ok(())
    }
}

fn uri(s: &str) -> NormalizedUri {
    NormalizedUri::parse(s).unwrap()
}

/// The bytes `store` holds at `at`.
fn bytes_at(store: &Mem, at: &NormalizedUri) -> Vec<u8> {
    match store.get(at) {
        Some(Obj::Bytes(b)) => b,
        other => panic!("no bytes at {at}: {other:?}"),
    }
}

fn src_root() -> NormalizedUri {
    uri("file:///src/artifacts")
}

fn dst_root() -> NormalizedUri {
    uri("file:///dst/artifacts")
}

fn meta(id: &str) -> OccurrenceMeta {
    OccurrenceMeta {
        artifact_id: Name::new(id).unwrap(),
        ingested_at: 1_700_000_000_000_000,
        source_uri: format!("s3://ingest-bucket/{id}?not-a-normalized-uri"),
        logical_path: format!("frames/{id}.png"),
        world: Name::new("w1").unwrap(),
        run: Some(Name::new("r7").unwrap()),
        tick: Some(42),
        media_type: "image/png".into(),
    }
}

/// Ingests `bytes` into `store` beneath `root` (a test fixture; relocation
/// never does this) and answers the row.
fn ingest(store: &Mem, root: &NormalizedUri, id: &str, bytes: &[u8]) -> Occurrence {
    let facts = facts_of(bytes);
    let at = content_address(root, &facts.sha256).unwrap();
    store.set(&at, Obj::Bytes(bytes.to_vec()));
    Occurrence::new(meta(id), facts, at)
}

/// Three rows over two distinct objects (a and c share bytes).
fn fixture(store: &Mem) -> Vec<Occurrence> {
    vec![
        ingest(store, &src_root(), "a", b"alpha bytes"),
        ingest(store, &src_root(), "b", &vec![9u8; 3 * CHUNK + 17]),
        ingest(store, &src_root(), "c", b"alpha bytes"),
    ]
}

fn run(rows: &[Occurrence], src: &Mem, dst: &Mem) -> Result<Relocation, Box<RelocationError>> {
    relocate(rows, src, &src_root(), dst, &dst_root())
}

/// Runs a relocation that must be refused with `reason` before anything is
/// written: the destination is unchanged and no put happened.
fn refused_untouched(rows: &[Occurrence], src: &Mem, dst: &Mem, reason: &str) -> RelocationError {
    let before = dst.snapshot();
    let err = *run(rows, src, dst).unwrap_err();
    assert_eq!(err.reason(), reason, "{err}");
    assert!(err.to_string().starts_with(reason), "{err}");
    assert_eq!(dst.snapshot(), before, "destination changed by a refusal");
    assert_eq!(dst.puts(), 0);
    err
}

/// Relocates the [`fixture`] into `dst`, which must refuse it.
fn refused_into(dst: &Mem) -> RelocationError {
    let src = Mem::default();
    let rows = fixture(&src);
    *run(&rows, &src, dst).unwrap_err()
}

#[test]
fn xxh3_64_and_sha256_match_known_vectors() {
    let empty = facts_of(b"");
    assert_eq!(empty.xxh3_64, 0x2D06_8005_38D3_94C2);
    assert_eq!(
        empty.sha256.hex(),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(empty.size, 0);
    let abc = facts_of(b"abc");
    assert_eq!(
        abc.sha256.hex(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(abc.xxh3_64, twox_hash::XxHash3_64::oneshot(b"abc"));
    // Streaming across chunk boundaries equals the one-shot hashes.
    let big: Vec<u8> = (0..(5 * CHUNK + 3)).map(|i| (i * 31 % 251) as u8).collect();
    let f = facts_of(&big);
    assert_eq!(f.xxh3_64, twox_hash::XxHash3_64::oneshot(&big));
    assert_eq!(f.sha256, Digest::of(&big));
    assert_eq!(f.size, big.len() as u64);
    let mut h = ObjectHasher::new();
    for piece in big.chunks(1000) {
        h.update(piece);
    }
    // Its debug form names what it has counted, never the running digests.
    assert_eq!(
        format!("{h:?}"),
        format!("ObjectHasher {{ size: {}, .. }}", big.len())
    );
    assert_eq!(h.finish(), f);
    let streamed = measure(
        ObjectRead::Stream(Box::new(Cursor::new(big.clone()))),
        f.size,
    );
    assert_eq!(streamed.unwrap(), Measured::Facts(f));
}

#[test]
fn content_address_layout_and_its_inverse() {
    let d = facts_of(b"x").sha256;
    let hex = d.hex();
    let at = content_address(&src_root(), &d).unwrap();
    assert_eq!(
        at.as_str(),
        format!("file:///src/artifacts/sha256/{}/{hex}", &hex[..2])
    );
    assert_eq!(addressed_digest(&src_root(), &at), Some(d));
    assert!(is_content_address(&src_root(), &at, &d));
    assert!(!is_content_address(&dst_root(), &at, &d));
    assert!(!is_content_address(
        &src_root(),
        &at,
        &facts_of(b"y").sha256
    ));
    // A root of path `/` has no doubled slash.
    let top = content_address(&uri("file:///"), &d).unwrap();
    assert_eq!(top.as_str(), format!("file:///sha256/{}/{hex}", &hex[..2]));
    assert_eq!(addressed_digest(&uri("file:///"), &top), Some(d));
    // Near misses are not content addresses.
    for near in [
        format!("file:///src/artifacts/sha256/00/{hex}"),
        format!("file:///src/artifacts/{}/{hex}", &hex[..2]),
        format!("file:///src/artifacts/sha256/{}/{hex}/x", &hex[..2]),
        format!(
            "file:///src/artifacts/sha256/{}/{}",
            &hex[..2],
            hex.to_uppercase()
        ),
        format!("file:///src/artifacts/x/sha256/{}/{hex}", &hex[..2]),
        format!("file:///src/artifactsx/sha256/{}/{hex}", &hex[..2]),
        format!("file://host/src/artifacts/sha256/{}/{hex}", &hex[..2]),
    ] {
        assert_eq!(addressed_digest(&src_root(), &uri(&near)), None, "{near}");
    }
    // A root too long for any address.
    let long = uri(&format!("file:///{}", "a".repeat(MAX_URI_LEN_FOR_TEST)));
    assert!(content_address(&long, &d).is_err());
    let err = relocate(&[], &Mem::default(), &long, &Mem::default(), &dst_root()).unwrap_err();
    assert_eq!(err.reason(), "artifact-root-invalid");
}

const MAX_URI_LEN_FOR_TEST: usize = crate::migration::MAX_URI_LEN - 20;

#[test]
fn relocation_copies_each_distinct_object_once_and_changes_only_object_uri() {
    for src in [Mem::default(), Mem::streaming()] {
        let dst = Mem::default();
        let rows = fixture(&src);
        let r = run(&rows, &src, &dst).unwrap();
        assert_eq!((r.copied, r.reused), (2, 0));
        assert_eq!(dst.puts(), 2);
        assert_eq!(r.occurrences.len(), rows.len());
        for (before, after) in rows.iter().zip(&r.occurrences) {
            assert!(after.is_relocation_of(before));
            let mut other = after.clone();
            other.media_type.push('x');
            assert!(
                !other.is_relocation_of(before),
                "a changed field is no relocation"
            );
            let expected = content_address(&dst_root(), &before.sha256).unwrap();
            assert_eq!(after.object_uri, expected);
            assert_eq!(
                Occurrence {
                    object_uri: before.object_uri.clone(),
                    ..after.clone()
                },
                *before,
                "a field other than object_uri changed"
            );
            assert_eq!(dst.get(&after.object_uri), src.get(&before.object_uri));
        }
        let mut sorted: Vec<ObjectFacts> = vec![rows[0].facts(), rows[1].facts()];
        sorted.sort();
        assert_eq!(r.objects, sorted);
        assert_eq!(r.verified_bytes, rows[0].size + rows[1].size);
        let plan = r.artifact_plan();
        assert_eq!(plan.occurrences, 3);
        assert_eq!(plan.objects, sorted);
        let inv = verify_source(&rows, &src, &src_root(), &dst_root()).unwrap();
        assert_eq!(inv.artifact_plan(), plan);
        assert_eq!(inv.objects[0].artifact_id.as_str(), {
            if rows[0].sha256 < rows[1].sha256 {
                "a"
            } else {
                "b"
            }
        });

        // A retry reuses every verified object and writes nothing.
        let again = run(&rows, &src, &dst).unwrap();
        assert_eq!((again.copied, again.reused), (0, 2));
        assert_eq!(dst.puts(), 2);
        assert_eq!(again.occurrences, r.occurrences);
    }
}

#[test]
fn an_empty_inventory_relocates_to_nothing() {
    let r = run(&[], &Mem::default(), &Mem::default()).unwrap();
    assert_eq!(r.occurrences, vec![]);
    assert_eq!((r.copied, r.reused, r.verified_bytes), (0, 0, 0));
}

#[test]
fn overlapping_roots_are_refused_first() {
    let src = Mem::default();
    let dst = Mem::default();
    let rows = fixture(&src);
    for (s, d) in [
        (src_root(), src_root()),
        (src_root(), uri("file:///src/artifacts/inner")),
        (uri("file:///dst/artifacts/inner"), dst_root()),
        (uri("file:///"), dst_root()),
    ] {
        let before = dst.snapshot();
        let err = *relocate(&rows, &src, &s, &dst, &d).unwrap_err();
        assert_eq!(err.reason(), "artifact-roots-overlap", "{s} {d}");
        assert_eq!(
            err,
            RelocationError::RootsOverlap {
                source_root: s.clone(),
                destination_root: d.clone()
            }
        );
        assert_eq!(dst.snapshot(), before);
    }
    // Siblings sharing a prefix are disjoint.
    let sib = uri("file:///src/artifacts2");
    relocate(&rows, &src, &src_root(), &dst, &sib).unwrap();
}

#[test]
fn object_uri_outside_the_source_root_is_refused() {
    let src = Mem::default();
    let dst = Mem::default();
    let mut rows = fixture(&src);
    let elsewhere = content_address(&uri("file:///elsewhere"), &rows[1].sha256).unwrap();
    src.set(&elsewhere, src.get(&rows[1].object_uri).unwrap());
    rows[1].object_uri = elsewhere.clone();
    let err = refused_untouched(&rows, &src, &dst, "artifact-uri-outside-root");
    assert_eq!(
        err,
        RelocationError::UriOutsideRoot {
            artifact_id: Name::new("b").unwrap(),
            uri: elsewhere,
            root: src_root(),
        }
    );
}

#[test]
fn object_uri_not_its_content_address_is_refused() {
    let src = Mem::default();
    let dst = Mem::default();
    let rows = fixture(&src);
    // Beneath the root, but at another digest's address, a wrong fan-out,
    // or a path of its own.
    let other = content_address(&src_root(), &rows[1].sha256).unwrap();
    let hex = rows[0].sha256.hex();
    for wrong in [
        other,
        uri(&format!("file:///src/artifacts/sha256/zz/{hex}")),
        uri("file:///src/artifacts/frames/a.png"),
    ] {
        let mut bad = rows.clone();
        bad[2].object_uri = wrong.clone();
        let err = refused_untouched(&bad, &src, &dst, "artifact-uri-not-content-address");
        assert_eq!(
            err,
            RelocationError::NotContentAddress {
                artifact_id: Name::new("c").unwrap(),
                uri: wrong,
                expected: rows[0].object_uri.clone(),
            }
        );
    }
}

#[test]
fn missing_source_object_is_refused() {
    let src = Mem::default();
    let dst = Mem::default();
    let rows = fixture(&src);
    src.objects
        .lock()
        .unwrap()
        .remove(rows[1].object_uri.as_str());
    let err = refused_untouched(&rows, &src, &dst, "artifact-object-missing");
    assert_eq!(
        err,
        RelocationError::ObjectMissing {
            side: Side::Source,
            artifact_id: Name::new("b").unwrap(),
            uri: rows[1].object_uri.clone(),
            sha256: rows[1].sha256,
        }
    );
}

#[test]
fn symlink_directory_or_other_entry_at_a_source_address_fails_closed() {
    for (obj, entry) in [
        (Obj::Symlink, Entry::Symlink),
        (Obj::Dir, Entry::Directory),
        (Obj::Other, Entry::Other),
    ] {
        let src = Mem::default();
        let dst = Mem::default();
        let rows = fixture(&src);
        src.set(&rows[0].object_uri, obj);
        let err = refused_untouched(&rows, &src, &dst, "artifact-object-not-regular-file");
        assert_eq!(
            err,
            RelocationError::NotRegularFile {
                side: Side::Source,
                artifact_id: Name::new("a").unwrap(),
                uri: rows[0].object_uri.clone(),
                sha256: rows[0].sha256,
                found: entry,
            }
        );
    }
}

#[test]
fn truncated_object_is_a_size_mismatch() {
    for src in [Mem::default(), Mem::streaming()] {
        let dst = Mem::default();
        let rows = fixture(&src);
        let mut b = bytes_at(&src, &rows[1].object_uri);
        b.truncate(b.len() - 5);
        src.set(&rows[1].object_uri, Obj::Bytes(b));
        let err = refused_untouched(&rows, &src, &dst, "artifact-size-mismatch");
        assert!(matches!(
            err,
            RelocationError::SizeMismatch { ref artifact_id, expected, found: Some(f), .. }
                if artifact_id.as_str() == "b" && f == expected - 5
        ));
    }
}

#[test]
fn oversized_object_is_refused_without_reading_it_whole() {
    // Whole-buffer store: refused by its length (probe and read).
    let src = Mem::default();
    let dst = Mem::default();
    let rows = fixture(&src);
    let mut b = bytes_at(&src, &rows[0].object_uri);
    b.push(0);
    src.set(&rows[0].object_uri, Obj::Bytes(b));
    let reads = src.reads();
    let err = refused_untouched(&rows, &src, &dst, "artifact-size-mismatch");
    assert!(matches!(
        err,
        RelocationError::SizeMismatch { expected, found: Some(f), .. } if f == expected + 1
    ));
    // Refused by the probe's length alone: the object was never read.
    assert_eq!(src.reads(), reads, "the longer source object was read");
    // A stream that never ends: the cap at size + 1 bytes is what stops it
    // (the test would not terminate otherwise).
    let src = Mem::streaming();
    let rows = fixture(&src);
    src.set(&rows[1].object_uri, Obj::Endless);
    let err = refused_untouched(&rows, &src, &dst, "artifact-size-mismatch");
    assert!(matches!(
        err,
        RelocationError::SizeMismatch { ref artifact_id, found: None, .. }
            if artifact_id.as_str() == "b"
    ));
    assert!(err.to_string().contains("without reading it whole"));
}

#[test]
fn corrupt_object_is_a_sha256_mismatch() {
    let src = Mem::default();
    let dst = Mem::default();
    let rows = fixture(&src);
    let mut b = bytes_at(&src, &rows[1].object_uri);
    b[100] ^= 0x40;
    let found = Digest::of(&b);
    src.set(&rows[1].object_uri, Obj::Bytes(b));
    let err = refused_untouched(&rows, &src, &dst, "artifact-sha256-mismatch");
    assert_eq!(
        err,
        RelocationError::Sha256Mismatch {
            artifact_id: Name::new("b").unwrap(),
            uri: rows[1].object_uri.clone(),
            expected: rows[1].sha256,
            found,
        }
    );
}

#[test]
fn row_whose_xxh3_disagrees_is_refused() {
    let src = Mem::default();
    let dst = Mem::default();
    let mut rows = fixture(&src);
    // The duplicate row c disagrees while its object (shared with a)
    // verifies against a: every row is checked, not one per object.
    rows[2].xxh3_64 ^= 1;
    let err = refused_untouched(&rows, &src, &dst, "artifact-xxh3-mismatch");
    assert_eq!(
        err,
        RelocationError::Xxh3Mismatch {
            artifact_id: Name::new("c").unwrap(),
            uri: rows[2].object_uri.clone(),
            sha256: rows[2].sha256,
            expected: rows[0].xxh3_64 ^ 1,
            found: rows[0].xxh3_64,
        }
    );
}

#[test]
fn row_whose_size_disagrees_is_refused() {
    let src = Mem::default();
    let dst = Mem::default();
    let mut rows = fixture(&src);
    rows[2].size += 1;
    let err = refused_untouched(&rows, &src, &dst, "artifact-size-mismatch");
    assert!(matches!(
        err,
        RelocationError::SizeMismatch { ref artifact_id, expected, found: Some(f), .. }
            if artifact_id.as_str() == "c" && f + 1 == expected
    ));
}

#[test]
fn row_whose_sha256_disagrees_is_refused() {
    // The row names digest D' and its address, but the bytes there hash to
    // D: exactly what a flipped recorded digest looks like.
    let src = Mem::default();
    let dst = Mem::default();
    let mut rows = fixture(&src);
    let wrong = facts_of(b"some other object").sha256;
    let at = content_address(&src_root(), &wrong).unwrap();
    src.set(&at, src.get(&rows[1].object_uri).unwrap());
    rows[1].sha256 = wrong;
    rows[1].object_uri = at.clone();
    let err = refused_untouched(&rows, &src, &dst, "artifact-sha256-mismatch");
    assert_eq!(
        err,
        RelocationError::Sha256Mismatch {
            artifact_id: Name::new("b").unwrap(),
            uri: at,
            expected: wrong,
            found: Digest::of(&vec![9u8; 3 * CHUNK + 17]),
        }
    );
}

#[test]
fn conflicting_destination_bytes_are_never_overwritten() {
    let src = Mem::default();
    let dst = Mem::default();
    let rows = fixture(&src);
    let at = content_address(&dst_root(), &rows[1].sha256).unwrap();
    let mut other = vec![9u8; 3 * CHUNK + 17];
    other[0] = 1;
    dst.set(&at, Obj::Bytes(other.clone()));
    let err = refused_untouched(&rows, &src, &dst, "artifact-destination-conflict");
    assert_eq!(
        err,
        RelocationError::DestinationConflict {
            artifact_id: Name::new("b").unwrap(),
            uri: at.clone(),
            sha256: rows[1].sha256,
            found: Found::Facts(facts_of(&other)),
        }
    );
    assert_eq!(dst.get(&at), Some(Obj::Bytes(other)));
    // Longer and shorter destination objects conflict too; a longer one
    // the probe's length already refuses, without reading it.
    dst.set(&at, Obj::Bytes(vec![9u8; 3 * CHUNK + 18]));
    let reads = dst.reads();
    let err = refused_untouched(&rows, &src, &dst, "artifact-destination-conflict");
    assert!(matches!(
        err,
        RelocationError::DestinationConflict {
            found: Found::Longer,
            ..
        }
    ));
    assert_eq!(dst.reads(), reads, "the longer object was read");
    dst.set(&at, Obj::Bytes(vec![9u8; 3]));
    refused_untouched(&rows, &src, &dst, "artifact-destination-conflict");
}

#[test]
fn symlink_or_directory_at_a_destination_address_fails_closed() {
    for (obj, entry) in [(Obj::Symlink, Entry::Symlink), (Obj::Dir, Entry::Directory)] {
        let src = Mem::default();
        let dst = Mem::default();
        let rows = fixture(&src);
        let at = content_address(&dst_root(), &rows[0].sha256).unwrap();
        dst.set(&at, obj);
        let err = refused_untouched(&rows, &src, &dst, "artifact-object-not-regular-file");
        assert_eq!(
            err,
            RelocationError::NotRegularFile {
                side: Side::Destination,
                artifact_id: Name::new("a").unwrap(),
                uri: at,
                sha256: rows[0].sha256,
                found: entry,
            }
        );
    }
}

#[test]
fn a_verified_destination_object_is_reused_and_others_copied() {
    let src = Mem::default();
    let dst = Mem::default();
    let rows = fixture(&src);
    let at = content_address(&dst_root(), &rows[1].sha256).unwrap();
    dst.set(&at, src.get(&rows[1].object_uri).unwrap());
    let r = run(&rows, &src, &dst).unwrap();
    assert_eq!((r.copied, r.reused), (1, 1));
    assert_eq!(dst.puts(), 1);
}

#[test]
fn a_store_whose_writes_do_not_read_back_is_a_readback_mismatch() {
    let dst = Mem {
        corrupt_puts: true,
        ..Mem::default()
    };
    let err = refused_into(&dst);
    assert_eq!(err.reason(), "artifact-readback-mismatch", "{err}");
    assert!(matches!(
        err,
        RelocationError::ReadbackMismatch {
            found: Found::Facts(_),
            ..
        }
    ));
}

#[test]
fn a_failed_put_is_an_io_refusal_naming_the_object() {
    let dst = Mem {
        fail_puts: true,
        ..Mem::default()
    };
    let err = refused_into(&dst);
    assert_eq!(err.reason(), "artifact-io");
    let RelocationError::Io {
        side, uri, detail, ..
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(*side, Side::Destination);
    assert!(dst_root().contains(uri));
    assert!(detail.contains("injected"));
    assert!(dst.snapshot().is_empty());
}

/// The source verifies in phase 1 (two distinct objects, two reads) and
/// then changes before the copy reads it again: the streamed bytes do not
/// verify, so `put_new` stores nothing and the refusal is the source's
/// SHA-256 mismatch; a source whose read fails mid-copy is an I/O refusal
/// on the source side. Either way the destination holds nothing.
#[test]
fn a_source_that_changes_after_verification_stores_nothing() {
    for fail in [false, true] {
        let src = Mem {
            changes: Some(Changes { honest: 2, fail }),
            ..Mem::default()
        };
        let rows = fixture(&src);
        let dst = Mem::default();
        let err = *run(&rows, &src, &dst).unwrap_err();
        if fail {
            assert_eq!(err.reason(), "artifact-io", "{err}");
            let RelocationError::Io { side, detail, .. } = &err else {
                panic!("{err}")
            };
            assert_eq!(*side, Side::Source);
            assert!(detail.contains("injected source read failure"), "{detail}");
        } else {
            assert_eq!(err.reason(), "artifact-sha256-mismatch", "{err}");
        }
        assert!(dst.snapshot().is_empty(), "{:?}", dst.snapshot().keys());
        assert_eq!(dst.puts(), 0);
    }
}

/// `put_new` stores only the expected object: other bytes, fewer bytes or
/// more bytes are a mismatch (the longer read stops at size + 1) and the
/// address stays empty.
#[test]
fn put_new_stores_only_the_expected_object() {
    let dst = Mem::default();
    let good = facts_of(b"object");
    let at = content_address(&dst_root(), &good.sha256).unwrap();
    for (bytes, longer) in [
        (&b"objecT"[..], false),
        (b"objec", false),
        (b"object!", true),
    ] {
        let err = dst.put_new(&at, &mut { bytes }, &good).unwrap_err();
        let ObjectError::Mismatch(found) = err else {
            panic!("{err}")
        };
        assert_eq!(found == Measured::Longer, longer);
        assert!(dst.snapshot().is_empty());
    }
    let mut endless = std::io::repeat(1);
    let err = dst.put_new(&at, &mut endless, &good).unwrap_err();
    assert_eq!(err, ObjectError::Mismatch(Measured::Longer));
    put_bytes(&dst, &at, b"object").unwrap();
    assert_eq!(dst.puts(), 1);
}

#[test]
fn relocation_error_serializes_nothing_but_its_reasons_are_stable() {
    let n = Name::new("x").unwrap();
    let u = src_root();
    let d = Digest::default();
    let all = [
        RelocationError::RootsOverlap {
            source_root: u.clone(),
            destination_root: u.clone(),
        },
        RelocationError::RootInvalid {
            side: Side::Source,
            root: u.clone(),
            problem: DataError::InvalidDigest,
        },
        RelocationError::TooManyObjects,
        RelocationError::UriOutsideRoot {
            artifact_id: n.clone(),
            uri: u.clone(),
            root: u.clone(),
        },
        RelocationError::NotContentAddress {
            artifact_id: n.clone(),
            uri: u.clone(),
            expected: u.clone(),
        },
        RelocationError::ObjectMissing {
            side: Side::Source,
            artifact_id: n.clone(),
            uri: u.clone(),
            sha256: d,
        },
        RelocationError::NotRegularFile {
            side: Side::Destination,
            artifact_id: n.clone(),
            uri: u.clone(),
            sha256: d,
            found: Entry::Symlink,
        },
        RelocationError::SizeMismatch {
            artifact_id: n.clone(),
            uri: u.clone(),
            sha256: d,
            expected: 1,
            found: None,
        },
        RelocationError::Sha256Mismatch {
            artifact_id: n.clone(),
            uri: u.clone(),
            expected: d,
            found: d,
        },
        RelocationError::Xxh3Mismatch {
            artifact_id: n.clone(),
            uri: u.clone(),
            sha256: d,
            expected: 1,
            found: 2,
        },
        RelocationError::DestinationConflict {
            artifact_id: n.clone(),
            uri: u.clone(),
            sha256: d,
            found: Found::Longer,
        },
        RelocationError::ReadbackMismatch {
            artifact_id: n.clone(),
            uri: u.clone(),
            sha256: d,
            found: Found::Entry(Entry::Missing),
        },
        RelocationError::Io {
            side: Side::Source,
            artifact_id: n,
            uri: u,
            detail: "d".into(),
        },
    ];
    let reasons: Vec<&str> = all.iter().map(RelocationError::reason).collect();
    assert_eq!(
        reasons,
        [
            "artifact-roots-overlap",
            "artifact-root-invalid",
            "artifact-too-many-objects",
            "artifact-uri-outside-root",
            "artifact-uri-not-content-address",
            "artifact-object-missing",
            "artifact-object-not-regular-file",
            "artifact-size-mismatch",
            "artifact-sha256-mismatch",
            "artifact-xxh3-mismatch",
            "artifact-destination-conflict",
            "artifact-readback-mismatch",
            "artifact-io",
        ]
    );
    for e in &all {
        assert!(e.to_string().starts_with(e.reason()), "{e}");
    }
}

#[test]
fn occurrence_rows_round_trip_through_serde() {
    let src = Mem::default();
    for row in fixture(&src) {
        let json = serde_json::to_string(&row).unwrap();
        let back: Occurrence = serde_json::from_str(&json).unwrap();
        assert_eq!(back, row);
    }
}

/// The declared inventory reads no object: it equals the verified one for
/// sound rows, refuses rows of one SHA-256 that disagree, and a corrupt
/// object (not re-read) does not change it.
#[test]
fn the_declared_inventory_reads_no_object_and_refuses_disagreeing_rows() {
    let src = Mem::default();
    let rows = fixture(&src);
    let verified = verify_source(&rows, &src, &src_root(), &dst_root()).unwrap();
    let declared = declared_inventory(&rows, &src_root(), &dst_root()).unwrap();
    assert_eq!(declared, verified);
    assert_eq!(
        declared_inventory(&rows, &src_root(), &dst_root()).unwrap(),
        declared
    );
    // Rows of one digest that disagree on a fact are refused.
    let mut bad = rows.clone();
    bad[2].size += 1;
    let e = declared_inventory(&bad, &src_root(), &dst_root()).unwrap_err();
    assert_eq!(e.reason(), "artifact-size-mismatch", "{e}");
    // Overlapping roots are refused as by verify_source.
    let e = declared_inventory(&rows, &src_root(), &src_root()).unwrap_err();
    assert_eq!(e.reason(), "artifact-roots-overlap", "{e}");
}

#[test]
fn a_bounded_read_keeps_exactly_the_limit_and_refuses_one_byte_more() {
    let at = |n: usize| vec![9u8; n];
    for limit in [0u64, 1, 4096] {
        let n = limit as usize;
        assert_eq!(
            read_bounded(ObjectRead::Bytes(at(n)), limit).unwrap(),
            Some(at(n))
        );
        assert_eq!(
            read_bounded(ObjectRead::Bytes(at(n + 1)), limit).unwrap(),
            None
        );
        assert_eq!(
            read_bounded(ObjectRead::Stream(Box::new(Cursor::new(at(n)))), limit).unwrap(),
            Some(at(n))
        );
        assert_eq!(
            read_bounded(ObjectRead::Stream(Box::new(Cursor::new(at(n + 1)))), limit).unwrap(),
            None
        );
    }
    // An endless stream is cut at limit + 1 and refused.
    assert_eq!(
        read_bounded(ObjectRead::Stream(Box::new(std::io::repeat(7))), 64).unwrap(),
        None
    );
}

#[test]
fn an_object_read_debugs_its_length_never_its_bytes() {
    assert_eq!(
        format!("{:?}", ObjectRead::Bytes(b"secret".to_vec())),
        "ObjectRead::Bytes(6 bytes)"
    );
    assert_eq!(
        format!(
            "{:?}",
            ObjectRead::Stream(Box::new(Cursor::new(b"secret".to_vec())))
        ),
        "ObjectRead::Stream(..)"
    );
}

/// The memory store names each digest's content address beneath its own
/// root (the fixtures plant foreign entries there), and a bytes entry
/// planted at that address reads back as the object.
#[test]
fn the_memory_store_addresses_each_digest_beneath_its_root() {
    let store = MemoryObjectStore::new(src_root());
    let bytes = b"object".to_vec();
    let d = Digest::of(&bytes);
    let at = store.address(&d).expect("a digest has an address");
    assert_eq!(Some(at.clone()), content_address(&src_root(), &d).ok());
    assert_eq!(addressed_digest(store.root(), &at), Some(d));
    assert!(store.root().contains(&at) && at != src_root());
    store.plant(&at, MemoryEntry::Bytes(bytes.clone())).unwrap();
    let read = store.read(&at, 64).unwrap();
    assert_eq!(read_bounded(read, 64).unwrap(), Some(bytes));
}

/// A reader that fails once with `kind` before it yields `bytes`.
struct FailsOnce {
    kind: Option<std::io::ErrorKind>,
    bytes: Cursor<Vec<u8>>,
}

impl Read for FailsOnce {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.kind.take() {
            Some(kind) => Err(std::io::Error::new(kind, "scripted failure")),
            None => self.bytes.read(buf),
        }
    }
}

fn fails_once(kind: std::io::ErrorKind, bytes: &[u8]) -> FailsOnce {
    FailsOnce {
        kind: Some(kind),
        bytes: Cursor::new(bytes.to_vec()),
    }
}

#[test]
fn an_interrupted_read_is_retried_and_any_other_failure_refuses() {
    use std::io::ErrorKind::{Interrupted, Other};
    let bytes = b"object bytes".as_slice();
    let f = facts_of(bytes);
    // `measure`: an interruption is retried, any other failure returned.
    let read = |kind| ObjectRead::Stream(Box::new(fails_once(kind, bytes)));
    assert_eq!(
        measure(read(Interrupted), f.size).unwrap(),
        Measured::Facts(f)
    );
    assert_eq!(measure(read(Other), f.size).unwrap_err().kind(), Other);
    // `Verifying`: the same, and the failure is kept as the source's.
    let mut r = fails_once(Interrupted, bytes);
    let mut v = Verifying::new(&mut r, f.size);
    let mut out = Vec::new();
    v.read_to_end(&mut out).unwrap();
    assert_eq!(out, bytes);
    assert_eq!(v.source_failure(), None);
    assert_eq!(v.measured(), Measured::Facts(f));
    let mut r = fails_once(Other, bytes);
    let mut v = Verifying::new(&mut r, f.size);
    assert!(v.read_to_end(&mut Vec::new()).is_err());
    assert_eq!(v.source_failure(), Some("scripted failure"));
}

#[test]
fn a_side_displays_as_its_name() {
    assert_eq!(Side::Source.to_string(), "source");
    assert_eq!(Side::Destination.to_string(), "destination");
}

#[test]
fn a_verifying_reader_debugs_as_what_it_read_of_its_limit() {
    let mut r = Cursor::new(b"abc".to_vec());
    let mut v = Verifying::new(&mut r, 8);
    v.read_to_end(&mut Vec::new()).unwrap();
    assert_eq!(
        format!("{v:?}"),
        "Verifying { read: 3, limit: 8, failed: None, .. }"
    );
}

#[test]
fn what_was_found_displays_as_a_person_reads_it() {
    let f = facts_of(b"abc");
    assert_eq!(
        Found::Facts(f).to_string(),
        format!(
            "an object of 3 bytes, sha256 {}, xxh3-64 {:016x}",
            f.sha256.hex(),
            f.xxh3_64
        )
    );
    assert_eq!(Found::Longer.to_string(), "an object longer than expected");
    assert_eq!(
        Found::Entry(Entry::Symlink).to_string(),
        Entry::Symlink.to_string()
    );
    assert!(!Entry::Symlink.to_string().is_empty());
}

#[test]
fn an_inventory_holds_at_most_max_items_distinct_objects() {
    let root = src_root();
    let rows: Vec<Occurrence> = (0..=MAX_ITEMS)
        .map(|i| {
            let facts = ObjectFacts {
                sha256: Digest::of(&i.to_le_bytes()),
                xxh3_64: 0,
                size: 0,
            };
            let at = content_address(&root, &facts.sha256).unwrap();
            Occurrence::new(meta("a"), facts, at)
        })
        .collect();
    assert_eq!(
        check_addresses(&rows[..MAX_ITEMS], &root).unwrap().len(),
        MAX_ITEMS
    );
    assert_eq!(
        check_addresses(&rows, &root),
        Err(RelocationError::TooManyObjects)
    );
}
