//! Replays the checked-in fuzz corpus through the same checkers the fuzz
//! targets run, so CI covers them where libFuzzer cannot run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

fn replay(target: &str, run: fn(&[u8]) -> Result<(), custos_testkit::streams::Violation>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        if let Err(v) = run(&data) {
            panic!("{}: {v}", path.display());
        }
        files += 1;
    }
    assert!(files >= 8, "corpus {target} has only {files} inputs");
}

#[test]
fn lease_corpus_replays_clean() {
    replay("lease", custos_testkit::streams::lease::check_lease_bytes);
}

#[test]
fn fence_corpus_replays_clean() {
    replay("fence", custos_testkit::streams::fence::check_fence_bytes);
}
