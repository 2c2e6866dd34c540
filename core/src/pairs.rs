//! The serde form of a map whose keys are not strings (a struct, a tuple,
//! a digest): a sequence of `[key, value]` pairs in ascending key order.
//!
//! A map keyed so serializes fine into a binary format but fails in JSON
//! ("key must be a string"), and only at run time. As pairs it goes
//! through any self-describing or binary format and back unchanged. On
//! the way in, a key given twice is refused (a map cannot hold it twice,
//! and silently keeping one would change the state), and the pairs are
//! read one by one into the map — nothing is preallocated from a length
//! the input declares.
//!
//! The ledger, storage, access, catalogue and lifecycle states round-trip
//! through JSON and postcard (their property tests); the deployment
//! catalog's through JSON and CBOR (its manifests omit absent fields, which
//! only a self-describing format carries).
//!
//! The form is stable: the pairs are the keys' and values' own serde forms,
//! in the map's order; a change to a key or value type changes it as that
//! type's own form changes. (A dozen lines, so no crate: `serde_with`'s
//! `Seq` does the same but brings a proc-macro stack into `custos-core`,
//! which must build in seconds.)

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, Error, SeqAccess, Visitor};
use serde::ser::{Serialize, Serializer};

/// Serializes `map` as a sequence of `(key, value)` pairs.
pub fn serialize<K: Serialize, V: Serialize, S: Serializer>(
    map: &BTreeMap<K, V>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(map.iter())
}

/// Deserializes a sequence of `(key, value)` pairs into a map, refusing a
/// repeated key.
pub fn deserialize<'de, K, V, D>(d: D) -> Result<BTreeMap<K, V>, D::Error>
where
    K: Deserialize<'de> + Ord + fmt::Debug,
    V: Deserialize<'de>,
    D: Deserializer<'de>,
{
    struct Pairs<K, V>(PhantomData<(K, V)>);
    impl<'de, K, V> Visitor<'de> for Pairs<K, V>
    where
        K: Deserialize<'de> + Ord + fmt::Debug,
        V: Deserialize<'de>,
    {
        type Value = BTreeMap<K, V>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence of [key, value] pairs")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut map = BTreeMap::new();
            while let Some((k, v)) = seq.next_element::<(K, V)>()? {
                if map.contains_key(&k) {
                    return Err(A::Error::custom(format_args!("duplicate key {k:?}")));
                }
                map.insert(k, v);
            }
            Ok(map)
        }
    }
    d.deserialize_seq(Pairs(PhantomData))
}

/// Checks (in tests) that `value` goes through JSON and through a binary
/// format (postcard) and comes back equal: the state types' written form.
#[cfg(test)]
pub(crate) fn round_trips<T>(value: &T) -> Result<(), String>
where
    T: Serialize + serde::de::DeserializeOwned + PartialEq + fmt::Debug,
{
    let text = serde_json::to_string(value).map_err(|e| format!("to JSON: {e}"))?;
    let back: T = serde_json::from_str(&text).map_err(|e| format!("from JSON: {e}"))?;
    if &back != value {
        return Err(format!("JSON changed it: {text}"));
    }
    let bytes = postcard::to_allocvec(value).map_err(|e| format!("to postcard: {e}"))?;
    let back: T = postcard::from_bytes(&bytes).map_err(|e| format!("from postcard: {e}"))?;
    if &back != value {
        return Err("postcard changed it".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct M {
        #[serde(with = "super")]
        m: BTreeMap<(String, u32), u8>,
    }

    #[test]
    fn a_map_with_tuple_keys_goes_through_json_and_a_repeat_is_refused() {
        let m = M {
            m: BTreeMap::from([(("b".into(), 2), 1), (("a".into(), 10), 2)]),
        };
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(text, r#"{"m":[[["a",10],2],[["b",2],1]]}"#);
        assert_eq!(serde_json::from_str::<M>(&text).unwrap(), m);
        let e = serde_json::from_str::<M>(r#"{"m":[[["a",1],2],[["a",1],3]]}"#).unwrap_err();
        assert!(e.to_string().contains("duplicate key"), "{e}");
    }

    #[test]
    fn the_state_types_keyed_by_pairs_and_digests_have_a_written_form() {
        use crate::catalogue::{CatalogueState, DelegateRow};
        use crate::release::lifecycle::{LifecycleState, Membership};
        use crate::release::Sha256;
        let mut c = CatalogueState::default();
        c.delegates.insert(
            ("spawner".into(), "parent".into()),
            DelegateRow {
                session_id: "child".into(),
                last_contact_ms: 7,
            },
        );
        c.access.memberships.insert(
            ("p".into(), "s".into()),
            crate::catalogue::access::Role::Operator,
        );
        round_trips(&c).unwrap();
        let mut l = LifecycleState::default();
        l.releases.insert(Sha256([1; 32]), Membership::Member);
        l.releases.insert(Sha256([2; 32]), Membership::Revoked);
        l.next_seq = 3;
        round_trips(&l).unwrap();
        round_trips(&crate::lease::LeaseState::default()).unwrap();
        round_trips(&crate::migration::departure::Departures::default()).unwrap();
    }
}
