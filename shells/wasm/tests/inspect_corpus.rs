//! The component inspector: the checked-in fuzz corpus
//! (`fuzz/corpus/wasm_inspect`) replayed through the same contract the fuzz
//! target checks, so CI covers the target where libFuzzer cannot run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use custos_wasm::{check_inspector, inspect};

#[test]
fn wasm_inspect_corpus_replays_clean() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/wasm_inspect");
    let mut files = 0;
    let mut accepted = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        if let Err(v) = check_inspector(&data) {
            panic!("{}: {v}", path.display());
        }
        accepted += usize::from(inspect(&data).is_ok());
        files += 1;
    }
    assert!(files >= 10, "corpus wasm_inspect has only {files} inputs");
    assert!(
        accepted >= 3,
        "the corpus holds only {accepted} valid components"
    );
}
