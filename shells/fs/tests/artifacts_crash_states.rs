//! Every crash state of the Artifact store's put protocol (staged file,
//! fsync, rename to the content address, directory fsyncs), from the
//! recording filesystem's traces replayed into every POSIX-allowed crash
//! image — torn writes of the unsynced staged file included — and reopened
//! on real files: the store always reopens, every object acknowledged
//! before the crash is present byte for byte, the object in flight is
//! absent or whole (never partial, never torn, at its address), and a retry
//! of an absent one succeeds.
//!
//! CI (default): one store, three puts of 4 KiB objects, the bounded
//! sample of [`Options::ci`]. Deep (`CUSTOS_CRASH_DEEP=1`, `make
//! crash-deep`): 25 stores of four puts each of 64 KiB-and-some objects,
//! every combination and every torn sector boundary; each distinct image
//! is reopened once per acknowledgement side.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use custos_core::migration::artifacts::{put_bytes, read_bounded, Entry, ObjectStore};
use custos_core::migration::Digest;
use custos_fs::artifacts::ArtifactStore;
use custos_fs::crash::{
    crash_states_with, digest, image_of, materialize, Distinct, Image, Options,
};
use custos_fs::{RealFs, RecordingFs};

fn object(n: u32, len: usize) -> Vec<u8> {
    let mut x = n.wrapping_mul(0x9e37_79b9) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
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

/// Per-run counts.
#[derive(Debug, Default)]
struct Tally {
    states: usize,
    checked: usize,
    present: usize,
    absent: usize,
}

/// One store at `dir`: puts `objects` in order, each traced and every crash
/// state of its trace checked (each distinct image once per side).
fn run_store(dir: &Path, objects: &[Vec<u8>], options: &Options, distinct: &mut Distinct) -> Tally {
    let root = dir.join("a");
    let fs = RecordingFs::new(RealFs);
    let store = ArtifactStore::open(fs.clone(), &root).unwrap();
    let root = store.root().to_path_buf();
    let mut acked: Vec<Vec<u8>> = Vec::new();
    let mut tally = Tally::default();
    for bytes in objects {
        let before = image_of(&root).unwrap();
        fs.clear_trace();
        put_bytes(&store, &store.address(&Digest::of(bytes)), bytes).unwrap();
        let trace = fs.trace();
        let mut seen = std::collections::HashSet::new();
        for state in crash_states_with(&before, &trace, options) {
            tally.states += 1;
            let d = digest(&state.image);
            distinct.insert_digest(d, state.torn > 0);
            if !seen.insert((d, state.prefix == trace.len())) {
                continue;
            }
            tally.checked += 1;
            if check(&state.image, &root, &acked, bytes) {
                tally.present += 1;
            } else {
                assert!(state.prefix < trace.len(), "the acknowledged put is lost");
                tally.absent += 1;
            }
        }
        acked.push(bytes.clone());
    }
    tally
}

#[test]
fn every_crash_state_of_every_put_recovers() {
    let options = Options::from_env().unwrap();
    // Two objects in one fan-out directory's first use, a third in another
    // (per store); the deep run adds stores and a fourth put.
    let (stores, per, len) = if options.is_deep() {
        (25u32, 4u32, 64 << 10)
    } else {
        (1, 3, 4 << 10)
    };
    let mut distinct = Distinct::default();
    let mut total = Tally::default();
    for s in 0..stores {
        let tmp = tempfile::tempdir().unwrap();
        let objects: Vec<Vec<u8>> = (0..per)
            .map(|i| object(s * per + i + 1, len + 100 * i as usize))
            .collect();
        let t = run_store(tmp.path(), &objects, &options, &mut distinct);
        total.states += t.states;
        total.checked += t.checked;
        total.present += t.present;
        total.absent += t.absent;
    }
    println!(
        "artifact put crash states: {} enumerated, {} checked ({} with the object, {} without)",
        total.states, total.checked, total.present, total.absent
    );
    println!(
        "crash states artifact put: {} distinct ({} torn), all recovered",
        distinct.len(),
        distinct.torn()
    );
    assert!(total.states >= 9, "only {} crash states", total.states);
    assert!(
        total.present > 0 && total.absent > 0,
        "both outcomes reached"
    );
    assert!(distinct.torn() > 0, "no torn staged object");
    if options.is_deep() {
        assert!(
            distinct.len() >= 10_000,
            "deep: {} distinct",
            distinct.len()
        );
    }
}
