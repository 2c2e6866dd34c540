#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::rules::{
    lineage_walk, prefixed_field_key, successor, validate_plan, Accountant, KeyRange,
};
use super::*;
use crate::storage::{KeyPrefix, Namespace, Payload, RecordId, Register, RegisterKey};

fn ns(s: &str) -> Namespace {
    Namespace::new(s).unwrap()
}
fn key(s: &str) -> RegisterKey {
    RegisterKey::new(s).unwrap()
}
fn rid(s: &str) -> RecordId {
    RecordId::new(s).unwrap()
}

#[test]
fn successor_increments_the_last_incrementable_char() {
    assert_eq!(successor(""), None);
    assert_eq!(successor("a"), Some("b".to_owned()));
    assert_eq!(successor("a/"), Some("a0".to_owned()));
    assert_eq!(successor("a\u{D7FF}"), Some("a\u{E000}".to_owned()));
    assert_eq!(successor("a\u{10FFFF}"), Some("b".to_owned()));
    assert_eq!(successor("\u{10FFFF}\u{10FFFF}"), None);
}

#[test]
fn prefix_window_is_literal_and_bounded() {
    let r = KeyRange::prefix(&KeyPrefix::new("a%").unwrap());
    assert!(r.contains("a%"));
    assert!(r.contains("a%z"));
    assert!(!r.contains("ab"));
    assert!(!r.contains("a"));
    assert!(!r.contains("a&"));
    let open = KeyRange::prefix(&KeyPrefix::new("\u{10FFFF}").unwrap());
    assert_eq!(open.end, None);
    assert!(open.contains("\u{10FFFF}\u{10FFFF}x"));
    assert!(!open.contains("z"));
}

#[test]
fn prefix_after_takes_the_higher_start() {
    let p = KeyPrefix::new("b").unwrap();
    let below = KeyRange::prefix_after(&p, Some(&key("a")));
    assert_eq!(below, KeyRange::prefix(&p));
    let inside = KeyRange::prefix_after(&p, Some(&key("b2")));
    assert!(!inside.contains("b2"));
    assert!(inside.contains("b3"));
    let past = KeyRange::prefix_after(&p, Some(&key("c")));
    assert!(past.is_empty());
}

#[test]
fn accountant_refuses_the_cell_that_passes_either_limit() {
    let mut a = Accountant::new(Budget {
        cells: 2,
        bytes: 10,
    });
    let h = |k: &str, size| CellHeader {
        key: key(k),
        seq: 1,
        size,
    };
    a.admit(&ns("n"), &h("a", 3)).unwrap(); // 1 + 1 + 3 = 5
    assert_eq!(a.window(), 2);
    let e = a.admit(&ns("n"), &h("b", 4)).unwrap_err(); // 5 + 6 = 11
    assert_eq!(
        e,
        SnapshotError::OverBudget {
            cells: 2,
            bytes: 11,
            limit: Budget {
                cells: 2,
                bytes: 10
            }
        }
    );
    a.admit(&ns("n"), &h("b", 0)).unwrap();
    assert!(matches!(
        a.admit(&ns("n"), &h("c", 0)),
        Err(SnapshotError::OverBudget { cells: 3, .. })
    ));
}

#[test]
fn plans_are_validated() {
    validate_plan(
        &Plan::new()
            .exact(ns("n"), key("k"))
            .optional_prefixed_field(0, "f", ns("o"), KeyPrefix::all()),
    )
    .unwrap();
    let bad =
        Plan::new()
            .namespace(ns("n"))
            .optional_prefixed_field(0, "f", ns("o"), KeyPrefix::all());
    assert_eq!(validate_plan(&bad).unwrap_err().reason(), "InvalidPlan");
    let dangling = Plan::new().optional_prefixed_field(3, "f", ns("o"), KeyPrefix::all());
    assert_eq!(
        validate_plan(&dangling).unwrap_err().reason(),
        "InvalidPlan"
    );
    let mut many = Plan::new();
    for _ in 0..=MAX_SELECTIONS {
        many = many.namespace(ns("n"));
    }
    assert_eq!(validate_plan(&many).unwrap_err().reason(), "InvalidPlan");
}

#[test]
fn prefixed_field_is_optional_but_typed() {
    let src = |v: &str| Register {
        namespace: ns("strand"),
        key: key("s"),
        value: Payload::new(v.as_bytes().to_vec()).unwrap(),
        seq: 1,
    };
    let p = KeyPrefix::new("op/").unwrap();
    assert_eq!(
        prefixed_field_key(&src(r#"{"latest":"7"}"#), "latest", &p).unwrap(),
        Some(key("op/7"))
    );
    assert_eq!(
        prefixed_field_key(&src(r#"{"latest":null}"#), "latest", &p).unwrap(),
        None
    );
    assert_eq!(prefixed_field_key(&src("{}"), "latest", &p).unwrap(), None);
    for bad in [
        r#"{"latest":7}"#,
        "[1]",
        "not json",
        r#"{"latest":"a\u0001"}"#,
    ] {
        assert_eq!(
            prefixed_field_key(&src(bad), "latest", &p)
                .unwrap_err()
                .reason(),
            "MalformedReference",
            "{bad}"
        );
    }
}

fn d(id: &str, parent: Option<&str>, seq: u64, size: u64) -> Descriptor {
    Descriptor {
        id: rid(id),
        parent: parent.map(rid),
        kind: crate::storage::Kind::new("m").unwrap(),
        seq,
        ts: 0,
        size,
    }
}

#[test]
fn lineage_walk_ends_on_a_loop_a_missing_parent_and_the_byte_bound() {
    // c(3) -> b(2) -> a(1) -> c again: the probe below 1 finds nothing.
    let store = [
        d("a", Some("c"), 1, 10),
        d("b", Some("a"), 2, 10),
        d("c", Some("b"), 3, 10),
    ];
    let mut probes = 0;
    let step = |id: &RecordId, below: u64| {
        probes += 1;
        Ok(store.iter().find(|e| &e.id == id && e.seq < below).cloned())
    };
    let out = lineage_walk(&rid("c"), 10, 100, &Limits::STANDARD, step).unwrap();
    let ids: Vec<_> = out.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(probes, 4);

    let limits = Limits {
        lineage_bytes: 15,
        ..Limits::STANDARD
    };
    let step = |id: &RecordId, below: u64| {
        Ok(store.iter().find(|e| &e.id == id && e.seq < below).cloned())
    };
    let out = lineage_walk(&rid("c"), 10, 100, &limits, step).unwrap();
    assert_eq!(out.len(), 2, "the first is free, one more fits in 15 bytes");

    let step = |_: &RecordId, _: u64| Ok(None);
    assert_eq!(
        lineage_walk(&rid("c"), 10, 100, &Limits::STANDARD, step)
            .unwrap_err()
            .reason(),
        "UnknownEntry"
    );
    let step = |_: &RecordId, _: u64| Ok(None);
    assert_eq!(
        lineage_walk(&rid("c"), 10, 101, &Limits::STANDARD, step)
            .unwrap_err()
            .reason(),
        "LimitOutOfRange"
    );
}

#[test]
fn lineage_walk_refuses_a_probe_that_ignores_its_bound() {
    let c = d("c", Some("c"), 3, 1);
    let step = |_: &RecordId, _: u64| Ok(Some(c.clone()));
    assert_eq!(
        lineage_walk(&rid("c"), 10, 100, &Limits::STANDARD, step)
            .unwrap_err()
            .reason(),
        "BackendViolation"
    );
}

#[test]
fn limits_only_tighten() {
    let m = crate::storage::MemoryStorage::new();
    assert!(Reader::with_limits(&m, Limits::STANDARD).is_ok());
    let loose = Limits {
        page: 101,
        ..Limits::STANDARD
    };
    assert_eq!(
        Reader::with_limits(&m, loose).unwrap_err(),
        SnapshotError::LimitsAboveStandard
    );
}
