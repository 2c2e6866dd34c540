//! The COMPLETE record decoder: the checked-in fuzz corpus replayed through
//! the same contract the fuzz target checks, and property tests
//! (encode/decode round trip; a flipped byte is refused or decodes to a
//! different record that fails integrity).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use custos_core::release::complete::{check_decoder, decode, CompleteRecord, StoredRelease};
use proptest::prelude::*;

#[test]
fn complete_corpus_replays_clean() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/complete");
    let mut files = 0;
    let mut accepted = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        if let Err(v) = check_decoder(&data) {
            panic!("{}: {v}", path.display());
        }
        accepted += usize::from(decode(&data).is_ok());
        files += 1;
    }
    assert!(files >= 8, "corpus complete has only {files} inputs");
    assert!(accepted >= 1, "the corpus holds no valid record");
}

fn release() -> impl Strategy<Value = (Vec<u8>, Vec<u8>, Vec<u8>)> {
    (
        proptest::collection::vec(any::<u8>(), 0..64),
        proptest::collection::vec(any::<u8>(), 0..64),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
}

proptest! {
    #[test]
    fn encode_decode_round_trips((c, m, n) in release()) {
        let r = CompleteRecord::for_release(&c, &m, &n);
        let bytes = r.encode();
        prop_assert_eq!(decode(&bytes), Ok(r));
        prop_assert!(check_decoder(&bytes).is_ok());
    }

    #[test]
    fn any_byte_flip_is_refused_or_fails_integrity(
        (c, m, n) in release(),
        at in any::<prop::sample::Index>(),
        mask in 1u8..=255,
    ) {
        let r = CompleteRecord::for_release(&c, &m, &n);
        let mut bytes = r.encode();
        let i = at.index(bytes.len());
        bytes[i] ^= mask;
        prop_assert!(check_decoder(&bytes).is_ok());
        if let Ok(other) = decode(&bytes) {
            prop_assert_ne!(other, r);
            let dir = r.component_digest.hex();
            let stored = StoredRelease {
                directory_name: &dir,
                descriptor_digest: r.component_digest,
                descriptor_size_bytes: r.component_size_bytes,
                component: &c,
                metadata: &m,
                manifest: &n,
            };
            prop_assert!(other.verify(&stored).is_err());
        }
    }

    #[test]
    fn arbitrary_bytes_keep_the_decoder_contract(
        bytes in proptest::collection::vec(any::<u8>(), 0..1100),
    ) {
        prop_assert!(check_decoder(&bytes).is_ok());
    }
}
