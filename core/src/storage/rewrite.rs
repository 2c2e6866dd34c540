//! The precise-rewrite rule: what an offline rewrite may change.
//!
//! The precise rewrite is the one sanctioned exception to "entries are never
//! modified". It may replace an entry's **payload**, a register's **value**
//! and a usage row's **details** (so a needle can be erased from every store
//! it can reach) and nothing else: an entry keeps its id, parent, kind, seq
//! and ts, because the tree, the branch index and every cursor an external
//! index holds are keyed on them. A backend applies a caller's transforms,
//! asks [`check_entry_rewrite`] / [`check_register_rewrite`] /
//! [`check_details_rewrite`] about each result, and aborts the whole rewrite
//! (nothing swapped) on the first violation.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::types::{BoundError, Entry, Payload, RecordId, MAX_REGISTER_VALUE_LEN};

/// Why a rewritten record is refused. Stable reason strings are the variant
/// names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum RewriteViolation {
    /// The transform changed an entry's identity or position (`field` is one
    /// of `id`, `parent`, `kind`, `seq`, `ts`).
    #[error("EntryMoved: the rewrite changed entry {id}'s {field}")]
    EntryMoved {
        /// The entry as stored.
        id: RecordId,
        /// The first field that changed.
        field: String,
    },
    /// A rewritten value is outside the representation bounds.
    #[error("OutOfBounds: {0}")]
    OutOfBounds(BoundError),
}

crate::reasons! {
    /// The stable reason string (the variant name).
    RewriteViolation { EntryMoved, OutOfBounds }
}

/// Accepts `after` as the rewrite of `before` when only the payload differs.
/// Answers whether the payload changed.
pub fn check_entry_rewrite(before: &Entry, after: &Entry) -> Result<bool, RewriteViolation> {
    let moved = |field: &str| RewriteViolation::EntryMoved {
        id: before.id.clone(),
        field: field.to_owned(),
    };
    if after.id != before.id {
        return Err(moved("id"));
    }
    if after.parent != before.parent {
        return Err(moved("parent"));
    }
    if after.kind != before.kind {
        return Err(moved("kind"));
    }
    if after.seq != before.seq {
        return Err(moved("seq"));
    }
    if after.ts != before.ts {
        return Err(moved("ts"));
    }
    Ok(after.payload != before.payload)
}

/// Accepts a rewritten register value (it must still fit a register).
/// Answers whether it changed.
pub fn check_register_rewrite(before: &Payload, after: &Payload) -> Result<bool, RewriteViolation> {
    if after.len() > MAX_REGISTER_VALUE_LEN {
        return Err(RewriteViolation::OutOfBounds(
            BoundError::RegisterValueTooLarge { len: after.len() },
        ));
    }
    Ok(after != before)
}

/// Accepts rewritten usage details (any [`Payload`] fits). Answers whether
/// they changed.
pub fn check_details_rewrite(before: &Payload, after: &Payload) -> bool {
    after != before
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::storage::types::Kind;

    fn e(id: &str, parent: Option<&str>, kind: &str, payload: &[u8]) -> Entry {
        Entry {
            id: RecordId::new(id).unwrap(),
            parent: parent.map(|p| RecordId::new(p).unwrap()),
            kind: Kind::new(kind).unwrap(),
            payload: Payload::new(payload.to_vec()).unwrap(),
            seq: 3,
            ts: 9,
        }
    }

    #[test]
    fn only_the_payload_may_change() {
        let before = e("a", Some("r"), "m", b"secret");
        assert_eq!(check_entry_rewrite(&before, &before), Ok(false));
        assert_eq!(
            check_entry_rewrite(&before, &e("a", Some("r"), "m", b"xxx")),
            Ok(true)
        );
        for (after, field) in [
            (e("b", Some("r"), "m", b"x"), "id"),
            (e("a", None, "m", b"x"), "parent"),
            (e("a", Some("q"), "m", b"x"), "parent"),
            (e("a", Some("r"), "tool", b"x"), "kind"),
            (
                Entry {
                    seq: 4,
                    ..before.clone()
                },
                "seq",
            ),
            (
                Entry {
                    ts: 1,
                    ..before.clone()
                },
                "ts",
            ),
        ] {
            let err = check_entry_rewrite(&before, &after).unwrap_err();
            assert_eq!(
                err,
                RewriteViolation::EntryMoved {
                    id: before.id.clone(),
                    field: field.to_owned()
                }
            );
            assert_eq!(err.reason(), "EntryMoved");
        }
    }

    #[test]
    fn register_values_keep_their_bound() {
        let v = Payload::new(b"v".to_vec()).unwrap();
        assert_eq!(check_register_rewrite(&v, &v), Ok(false));
        let big = Payload::new(vec![0; MAX_REGISTER_VALUE_LEN + 1]).unwrap();
        assert_eq!(
            check_register_rewrite(&v, &big).unwrap_err().reason(),
            "OutOfBounds"
        );
        assert!(check_details_rewrite(&v, &Payload::default()));
    }
}
