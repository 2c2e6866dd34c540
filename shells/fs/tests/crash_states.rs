//! Crash-state enumeration of one durable publication: every crash state of
//! every prefix of its recorded trace recovers (clear `.tmp`) to the old
//! state (no destination) or the new one (every file byte-identical), and
//! the acknowledged publication is always present.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::root::Layout;
use custos_fs::crash::{crash_states, Image, Node};
use custos_fs::{Access, DurableRoot, RealFs, RecordingFs};

const LAYOUT: Layout = Layout {
    kind: "test catalog",
    marker: b"custos test catalog 1\n",
    dirs: &[".tmp", "releases"],
    staging: Some(".tmp"),
    files: &[],
    scratch: &[],
};

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
