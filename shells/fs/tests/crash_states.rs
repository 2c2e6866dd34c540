//! Crash-state enumeration of one durable publication: every crash state of
//! every prefix of its recorded trace recovers (clear `.tmp`) to the old
//! state (no destination) or the new one (every file byte-identical), and
//! the acknowledged publication is always present.
//!
//! And the enumerator's rules on synthetic traces: torn prefixes at every
//! sector boundary (a test that fails if no torn state is generated) and
//! their bound; a file synced later keeps all its data; synced and
//! relinked directory entries survive; two files' unsynced data are
//! independent; the CI sample is bounded, seeded and keeps the whole state;
//! distinct images are counted once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_fs::crash::{crash_states, Image, Node};
use custos_fs::{Access, DurableRoot, RealFs, RecordingFs};

mod support;
use support::LAYOUT;

#[test]
fn a_durable_publication_recovers_to_old_or_new_in_every_crash_state() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = RecordingFs::new(RealFs);
    let (root, _) = DurableRoot::open(fs.clone(), tmp.path(), &LAYOUT, Access::Write).unwrap();
    let stage = root.ensure_dir(".tmp").unwrap();
    let releases = root.ensure_dir("releases").unwrap();
    fs.clear_trace();
    let files: [(&str, &[u8]); 3] = [
        ("component.wasm", b"\0asm\x0d\0\x01\0"),
        ("metadata.json", b"{\"d\":1}"),
        ("COMPLETE", b"{\"format_version\":1}"),
    ];
    let dest = root
        .publish_dir(".tmp", "s", "releases", "d", &files)
        .unwrap();
    let trace = fs.trace();
    let initial: Image = [root.root(), &stage, &releases]
        .into_iter()
        .map(|p| (p.to_path_buf(), Node::Dir))
        .collect();
    let states = crash_states(&initial, &trace);
    let mut old = 0;
    let mut new = 0;
    for (k, mut image) in states.iter().cloned() {
        // Recovery: `.tmp` contents are abandoned debris.
        image.retain(|p, _| !(p.starts_with(&stage) && p != &stage));
        if image.contains_key(&dest) {
            for (name, data) in files {
                assert_eq!(
                    image.get(&dest.join(name)),
                    Some(&Node::File(data.to_vec())),
                    "prefix {k}: {name} is not intact"
                );
            }
            new += 1;
        } else {
            assert!(k < trace.len(), "the acknowledged publication is lost");
            assert!(!image.keys().any(|p| p.starts_with(&dest)));
            old += 1;
        }
    }
    assert!(old > 0 && new > 0);
    println!(
        "crash states checked: {} ({old} old, {new} new) over {} operations",
        states.len(),
        trace.len()
    );
}

// The enumerator's rules, on synthetic traces (every operation succeeded).

use custos_fs::crash::{crash_states_with, CrashState, Distinct, Options, TornMode, SECTOR};
use custos_fs::{Op, Recorded};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn ok(op: Op) -> Recorded {
    Recorded { op, ok: true }
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// `/d` exists and is durable.
fn base() -> (PathBuf, Image) {
    let d = PathBuf::from("/d");
    let initial: Image = [(PathBuf::from("/"), Node::Dir), (d.clone(), Node::Dir)]
        .into_iter()
        .collect();
    (d, initial)
}

fn all(initial: &Image, trace: &[Recorded], options: &Options) -> Vec<CrashState> {
    crash_states_with(initial, trace, options).collect()
}

/// Fails if torn states are never generated: an unsynced 2,048-byte write
/// in a synced directory is found with every sector prefix (512, 1,024 and
/// 1,536 bytes), besides empty and whole.
#[test]
fn an_unsynced_write_is_found_torn_at_every_sector_boundary() {
    let (d, initial) = base();
    let data = bytes(4 * SECTOR, 1);
    let f = d.join("f");
    let trace = [
        ok(Op::WriteNew(f.clone(), data.clone())),
        ok(Op::SyncDir(d)),
    ];
    let states = all(&initial, &trace, &Options::default());
    let lens: BTreeSet<usize> = states
        .iter()
        .filter(|s| s.prefix == trace.len())
        .filter_map(|s| match s.image.get(&f) {
            Some(Node::File(b)) => {
                assert_eq!(b.as_slice(), &data[..b.len()], "not a prefix of the write");
                Some(b.len())
            }
            _ => None,
        })
        .collect();
    assert_eq!(lens, BTreeSet::from([0, 512, 1024, 1536, 2048]));
    let torn = |k: usize| {
        states
            .iter()
            .filter(|s| s.prefix == k && s.torn > 0)
            .count()
    };
    assert_eq!((torn(1), torn(2)), (3, 3));
    // The directory sync covers the entry: never absent once it returned.
    assert!(states
        .iter()
        .filter(|s| s.prefix == trace.len())
        .all(|s| s.image.contains_key(&f)));
    // Torn off: empty or whole only.
    let off = Options {
        torn: TornMode::Off,
        sample: None,
    };
    assert!(all(&initial, &trace, &off).iter().all(|s| s.torn == 0));
}

/// A file of at most one sector is never torn; a large write is sampled to
/// its bound, holding the first, the middle and the last boundary.
#[test]
fn torn_prefixes_are_bounded_and_keep_first_middle_and_last() {
    let (d, initial) = base();
    let f = d.join("f");
    let small = [ok(Op::WriteNew(f.clone(), bytes(SECTOR, 2)))];
    assert!(all(&initial, &small, &Options::default())
        .iter()
        .all(|s| s.torn == 0));
    let len = 1000 * SECTOR + 7;
    let big = [ok(Op::WriteNew(f.clone(), bytes(len, 3)))];
    let options = Options {
        torn: TornMode::Sectors { max: 5 },
        sample: None,
    };
    let torn: BTreeSet<usize> = all(&initial, &big, &options)
        .iter()
        .filter(|s| s.torn > 0)
        .filter_map(|s| match s.image.get(&f) {
            Some(Node::File(b)) => Some(b.len() / SECTOR),
            _ => None,
        })
        .collect();
    assert_eq!(torn.len(), 5, "{torn:?}");
    for want in [1, 500, 1000] {
        assert!(torn.contains(&want), "{want} missing from {torn:?}");
    }
}

/// A file covered by a later `SyncFile` keeps all its data (its entry may
/// still be lost while its directory is unsynced); before the sync it may
/// be torn.
#[test]
fn a_file_synced_later_keeps_all_its_data() {
    let (d, initial) = base();
    let f = d.join("f");
    let data = bytes(3 * SECTOR, 4);
    let trace = [
        ok(Op::WriteNew(f.clone(), data.clone())),
        ok(Op::SyncFile(f.clone())),
    ];
    let states = all(&initial, &trace, &Options::default());
    let mut absent = 0;
    for s in states.iter().filter(|s| s.prefix == trace.len()) {
        match s.image.get(&f) {
            Some(node) => assert_eq!(node, &Node::File(data.clone()), "synced data lost"),
            None => absent += 1,
        }
    }
    assert!(absent > 0, "the unsynced entry is never lost");
    assert!(states.iter().any(|s| s.prefix == 1 && s.torn > 0));
}

/// A directory entry covered by a later `SyncDir` of its parent survives,
/// and so does one renamed into a directory that is then synced.
#[test]
fn synced_and_relinked_entries_survive() {
    let (d, mut initial) = base();
    let stage = PathBuf::from("/stage");
    initial.insert(stage.clone(), Node::Dir);
    let (kept, moved) = (d.join("kept"), stage.join("moved"));
    let trace = [
        ok(Op::CreateDir(d.join("sub"))),
        ok(Op::WriteNew(kept.clone(), b"k".to_vec())),
        ok(Op::SyncDir(d.clone())),
        ok(Op::WriteNew(moved.clone(), b"m".to_vec())),
        ok(Op::SyncFile(moved.clone())),
        ok(Op::Rename(moved, d.join("moved"))),
        ok(Op::SyncDir(d.clone())),
    ];
    let states = all(&initial, &trace, &Options::default());
    let mut before = 0;
    for s in &states {
        let has = |p: &str| s.image.contains_key(&d.join(p));
        if s.prefix >= 3 {
            assert!(
                has("sub") && has("kept"),
                "prefix {}: synced entry lost",
                s.prefix
            );
        } else if !has("sub") || !has("kept") {
            before += 1;
        }
        if s.prefix == trace.len() {
            assert_eq!(
                s.image.get(&d.join("moved")),
                Some(&Node::File(b"m".to_vec()))
            );
        }
    }
    assert!(before > 0, "an unsynced entry is never lost");
}

/// One file's unsynced data survives while another's does not: the
/// per-operation odometer chooses for each write independently.
#[test]
fn unsynced_data_of_two_files_is_independent() {
    let (d, initial) = base();
    let (a, b) = (d.join("a"), d.join("b"));
    let (da, db) = (bytes(2 * SECTOR, 5), bytes(2 * SECTOR, 6));
    let trace = [
        ok(Op::WriteNew(a.clone(), da.clone())),
        ok(Op::WriteNew(b.clone(), db.clone())),
        ok(Op::SyncDir(d)),
    ];
    let states = all(&initial, &trace, &Options::default());
    let len = |s: &CrashState, p: &PathBuf| match s.image.get(p) {
        Some(Node::File(x)) => x.len(),
        _ => usize::MAX,
    };
    let pairs: BTreeSet<(usize, usize)> = states
        .iter()
        .filter(|s| s.prefix == trace.len())
        .map(|s| (len(s, &a), len(s, &b)))
        .collect();
    // Each of {0, 512, 1024} for a with each for b: nine states.
    assert_eq!(pairs.len(), 9, "{pairs:?}");
    for want in [(1024, 0), (0, 1024), (512, 1024), (1024, 512)] {
        assert!(pairs.contains(&want), "{want:?} missing");
    }
}

/// The CI sample keeps at most its bound per prefix, always the state the
/// operations left whole, and is the same for the same seed.
#[test]
fn the_sample_is_bounded_deterministic_and_keeps_the_whole_state() {
    let (d, initial) = base();
    let trace: Vec<Recorded> = (0..8)
        .map(|i| ok(Op::WriteNew(d.join(format!("f{i}")), bytes(4 * SECTOR, i))))
        .collect();
    let options = Options::ci(7);
    let (seed, max) = options.sample.unwrap();
    assert_eq!(seed, 7);
    let first = all(&initial, &trace, &options);
    assert_eq!(first, all(&initial, &trace, &options), "not deterministic");
    let mut whole = initial.clone();
    for r in &trace {
        if let Op::WriteNew(p, data) = &r.op {
            whole.insert(p.clone(), Node::File(data.clone()));
        }
    }
    for k in 0..=trace.len() {
        let n = first.iter().filter(|s| s.prefix == k).count();
        assert!(n >= 1 && n <= max, "prefix {k}: {n} states");
    }
    assert!(first
        .iter()
        .any(|s| s.prefix == trace.len() && s.image == whole));
    // Exhaustive: 7^8 states at the last prefix; the sample has 33 at most.
    let mut distinct = Distinct::default();
    for s in &first {
        distinct.insert(s);
    }
    assert!(distinct.torn() > 0, "no torn state in the sample");
    assert!(distinct.len() <= first.len());
    println!(
        "sampled: {} states, {} distinct ({} torn)",
        first.len(),
        distinct.len(),
        distinct.torn()
    );
}

/// Distinct counts an image once, whatever its prefix.
#[test]
fn distinct_counts_each_image_once() {
    let (d, initial) = base();
    let trace = [ok(Op::CreateDir(d.join("x"))), ok(Op::Metadata(d))];
    let states = all(&initial, &trace, &Options::default());
    let mut distinct = Distinct::default();
    let new = states.iter().filter(|s| distinct.insert(s)).count();
    // Prefix 0: initial; 1 and 2: initial or with x.
    assert_eq!(states.len(), 5);
    assert_eq!((new, distinct.len()), (2, 2));
}
