//! The release decoders' checked-in fuzz corpus replayed through the
//! contract the `release_decoders` fuzz target checks; the seeds include a
//! valid input for every canonical decoder, and each is accepted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use custos_core::release::check_decoders;
use custos_core::release::lifecycle::Outcome;
use custos_core::release::manifest::Manifest;
use custos_core::release::metadata::{MetadataError, ReleaseMetadata};
use custos_core::release::page::PageToken;

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/release_decoders");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        out.push((name, std::fs::read(&path).unwrap()));
    }
    out
}

#[test]
fn release_decoders_corpus_replays_clean() {
    let inputs = corpus();
    assert!(inputs.len() >= 8, "corpus has only {} inputs", inputs.len());
    for (name, data) in &inputs {
        if let Err(v) = check_decoders(data) {
            panic!("{name}: {v}");
        }
    }
    let get = |n: &str| {
        inputs
            .iter()
            .find(|(name, _)| name == n)
            .map(|(_, d)| d.clone())
            .unwrap_or_else(|| panic!("seed {n} missing"))
    };
    assert!(Manifest::decode_canonical(&get("manifest_canonical"), 1 << 20).is_ok());
    let spaced = Manifest::parse(&get("manifest_spaced"), 1 << 20).unwrap();
    assert_eq!(spaced.exports, vec!["a".to_string(), "b".to_string()]);
    assert!(Manifest::parse(&get("manifest_duplicate_export"), 1 << 20).is_err());
    assert!(ReleaseMetadata::decode(&get("metadata_canonical"), 1 << 20).is_ok());
    assert!(matches!(
        ReleaseMetadata::decode(&get("metadata_too_deep"), 1 << 20),
        Err(MetadataError::Contract(_))
    ));
    assert!(Outcome::decode(&get("outcome_record")).is_ok());
    let token = String::from_utf8(get("page_token")).unwrap();
    assert!(PageToken::decode(&token).is_ok());
    let upper = String::from_utf8(get("page_token_upper")).unwrap();
    assert!(PageToken::decode(&upper).is_err());
}
