//! Every crash state of the Artifact store's put protocol (staged file,
//! fsync, rename to the content address, directory fsyncs), from the
//! recording filesystem's traces replayed into every POSIX-allowed crash
//! image and reopened on real files: the store always reopens, every
//! object acknowledged before the crash is present byte for byte, the
//! object in flight is absent or whole (never partial at its address), and
//! a retry of an absent one succeeds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use custos_core::migration::artifacts::{put_bytes, read_bounded, Entry, ObjectStore};
use custos_core::migration::Digest;
use custos_fs::artifacts::ArtifactStore;
use custos_fs::crash::{crash_states, image_of, materialize, Image};
use custos_fs::{RealFs, RecordingFs};

fn object(n: u8) -> Vec<u8> {
    (0..4096u32)
        .map(|i| (i as u8).wrapping_mul(n).wrapping_add(n))
        .collect()
}

/// Reopens one crash image and checks it; returns whether the in-flight
/// object was present.
fn check(image: &Image, root: &Path, acked: &[Vec<u8>], in_flight: &[u8]) -> bool {
    let scratch = tempfile::tempdir().unwrap();
    let copy = scratch.path().join("a");
    std::fs::create_dir_all(&copy).unwrap();
    materialize(image, root, &copy).unwrap();
    let store = ArtifactStore::open(RealFs, &copy).unwrap_or_else(|e| panic!("reopen: {e}"));
    let whole = |bytes: &[u8]| -> bool {
        let uri = store.address(&Digest::of(bytes));
        match store.probe(&uri).unwrap() {
            Entry::Missing => false,
            Entry::RegularFile { len } => {
                assert_eq!(len, bytes.len() as u64, "a partial object at its address");
                let got = read_bounded(store.read(&uri, len).unwrap(), len)
                    .unwrap()
                    .unwrap();
                assert_eq!(got, bytes, "other bytes at a content address");
                true
            }
            other => panic!("{other:?} at a content address"),
        }
    };
    for a in acked {
        assert!(whole(a), "an acknowledged object was lost");
    }
    let present = whole(in_flight);
    if !present {
        put_bytes(&store, &store.address(&Digest::of(in_flight)), in_flight).unwrap();
        assert!(whole(in_flight));
    }
    present
}

#[test]
fn every_crash_state_of_every_put_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("a");
    let fs = RecordingFs::new(RealFs);
    let store = ArtifactStore::open(fs.clone(), &root).unwrap();
    let root = store.root().to_path_buf();
    let mut acked: Vec<Vec<u8>> = Vec::new();
    let (mut states, mut present, mut absent) = (0usize, 0usize, 0usize);
    // Two objects in one fan-out directory's first use, a third in another.
    for n in [1u8, 2, 3] {
        let bytes = object(n);
        let before = image_of(&root).unwrap();
        fs.clear_trace();
        put_bytes(&store, &store.address(&Digest::of(&bytes)), &bytes).unwrap();
        for (_, image) in crash_states(&before, &fs.trace()) {
            states += 1;
            if check(&image, &root, &acked, &bytes) {
                present += 1;
            } else {
                absent += 1;
            }
        }
        acked.push(bytes);
    }
    println!(
        "artifact put crash states checked: {states} ({present} with the object, {absent} without)"
    );
    assert!(states >= 9, "only {states} crash states");
    assert!(present > 0 && absent > 0, "both outcomes reached");
}
