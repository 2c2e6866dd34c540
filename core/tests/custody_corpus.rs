//! Replays the checked-in custody fuzz corpus (`fuzz/corpus/custody/`)
//! through the checker the fuzz target runs, so CI covers it where libFuzzer
//! cannot run; and runs random streams through it as a property test.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use custos_testkit::streams::custody::{check_custody_bytes, check_custody_stream, CustodyOp};
use proptest::prelude::*;

#[test]
fn custody_corpus_replays_clean() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/custody");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        if let Err(v) = check_custody_bytes(&data) {
            panic!("{}: {v}", path.display());
        }
        files += 1;
    }
    assert!(files >= 8, "corpus custody has only {files} inputs");
}

fn op() -> impl Strategy<Value = CustodyOp> {
    prop_oneof![
        (0u8..3, 0u8..4, 0u8..3).prop_map(|(cat, op, to)| CustodyOp::Begin { cat, op, to }),
        (0u8..3, 0u8..4).prop_map(|(cat, op)| CustodyOp::Finish { cat, op }),
        (0u8..3, 0u8..4).prop_map(|(cat, op)| CustodyOp::Abort { cat, op }),
        (0u8..3, 0u8..4, 0u8..3).prop_map(|(cat, op, from)| CustodyOp::Import { cat, op, from }),
        (0u8..3).prop_map(|cat| CustodyOp::Delete { cat }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn random_custody_streams_hold_every_rule(ops in proptest::collection::vec(op(), 0..64)) {
        if let Err(v) = check_custody_stream(&ops) {
            panic!("{v}");
        }
    }
}
