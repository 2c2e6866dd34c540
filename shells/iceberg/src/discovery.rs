//! Which tables a cold query reads: live signatures united with the ones
//! the control catalog discovered.
//!
//! [`query_components`] answers "which tables hold rows for these
//! components?" from two sources:
//!
//! 1. the **live** signatures this process registered itself, and
//! 2. the control catalog's durable records ([`ControlCatalog::list_signatures`]).
//!
//! A catalog record and a live signature are the same table only when both
//! the full schema fingerprint and the table identity agree — never because
//! their component names agree. A catalog record is used only when it is
//! self-consistent: its fingerprint is its descriptor's
//! ([`Signature::validate`]; otherwise it *drifted*) and its `table_id` is
//! the identity recomputed from its components and fingerprint
//! ([`table_identity`]). When a live signature claims the same table with a
//! different fingerprint, the live one wins. Every record set aside this
//! way is logged with `tracing::warn!` and reported in
//! [`QueryPlan::skipped`], so one bad historical record never blocks
//! discovery of the rest. A catalog that cannot be read degrades the plan
//! to the live subset; that is logged too and reported in
//! [`QueryPlan::degraded`].
//!
//! Component columns: the descriptor of a table is its full logical
//! schema. A top-level column whose name is one of the signature's
//! components holds that component; every other top-level column is a
//! *key* column (an entity id, a tick) and is read with any component.
//! [`projection`] applies that rule, so a cold reader names only the
//! components it asks for and the durable descriptor supplies the rest.

use std::collections::BTreeMap;

use custos_core::world::{ControlCatalog, Signature, SignatureRecord};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::IcebergError;

/// The table identity of a signature: `t_` and the first 32 hex digits of
/// SHA-256 over a version tag, the length-prefixed sorted components and
/// the fingerprint. A valid Iceberg table name.
pub fn table_identity(components: &[String], fingerprint: &str) -> String {
    let mut sorted: Vec<&String> = components.iter().collect();
    sorted.sort();
    sorted.dedup();
    let mut h = Sha256::new();
    h.update(b"custos-table/v1");
    h.update((sorted.len() as u64).to_be_bytes());
    for c in sorted {
        h.update((c.len() as u64).to_be_bytes());
        h.update(c.as_bytes());
    }
    h.update((fingerprint.len() as u64).to_be_bytes());
    h.update(fingerprint.as_bytes());
    let digest = h.finalize();
    format!("t_{}", custos_core::hex::encode(&digest[..16]))
}

/// The top-level columns a read of `components` projects from `signature`'s
/// descriptor: every key column and every requested component's column,
/// in descriptor order. A requested component the signature does not have,
/// or one without a column, is `InvalidDescriptor`.
pub fn projection(
    signature: &Signature,
    components: &[String],
) -> Result<Vec<String>, IcebergError> {
    for c in components {
        if !signature.components.contains(c) {
            return Err(IcebergError::InvalidDescriptor {
                table_id: signature.table_id.clone(),
                detail: format!("component {c:?} is not one of {:?}", signature.components),
            });
        }
        if !signature.schema.fields.iter().any(|f| &f.name == c) {
            return Err(IcebergError::InvalidDescriptor {
                table_id: signature.table_id.clone(),
                detail: format!("the descriptor has no column for component {c:?}"),
            });
        }
    }
    Ok(signature
        .schema
        .fields
        .iter()
        .filter(|f| !signature.components.contains(&f.name) || components.contains(&f.name))
        .map(|f| f.name.clone())
        .collect())
}

/// Where a planned table came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Source {
    /// A signature this process registered (possibly also in the catalog).
    Live,
    /// Discovered in the control catalog, recorded under these worlds.
    Catalog {
        /// The worlds whose records name the table, sorted.
        worlds: Vec<String>,
    },
}

/// One table a query reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedTable {
    /// The durable (or live) descriptor.
    pub signature: Signature,
    /// Where it came from.
    pub source: Source,
}

/// Why a catalog record was set aside.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum SkipReason {
    /// The record's fingerprint is not its descriptor's.
    Drifted {
        /// The validation failure.
        detail: String,
    },
    /// The record's `table_id` is not the identity recomputed from it.
    IdentityMismatch {
        /// The recomputed identity.
        expected: String,
    },
    /// A live signature holds the same table with another fingerprint.
    LiveMismatch {
        /// The live signature's fingerprint.
        live_fingerprint: String,
    },
}

/// A catalog record that was not used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The world it was recorded under.
    pub world_id: String,
    /// Its table.
    pub table_id: String,
    /// Why it was skipped.
    pub reason: SkipReason,
}

/// The tables a query reads, and what was left out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct QueryPlan {
    /// Tables covering the request, by table id.
    pub tables: Vec<PlannedTable>,
    /// Catalog records set aside (each also logged).
    pub skipped: Vec<Skipped>,
    /// Set when the catalog could not be read and the plan is the live
    /// subset only (also logged).
    pub degraded: Option<String>,
}

fn covers(sig: &Signature, requested: &[String]) -> bool {
    requested.iter().all(|c| sig.components.contains(c))
}

/// Why a catalog record is set aside, if it is: it disagrees with the live
/// signature of its table, or (with none) fails validation or its identity.
fn skip_verdict(
    rec: &SignatureRecord,
    live_by_table: &BTreeMap<&str, &Signature>,
) -> Option<Skipped> {
    let sig = &rec.signature;
    let skip = |reason: SkipReason| Skipped {
        world_id: rec.world_id.clone(),
        table_id: sig.table_id.clone(),
        reason,
    };
    if let Some(live) = live_by_table.get(sig.table_id.as_str()) {
        if live.fingerprint == sig.fingerprint && live.components == sig.components {
            None
        } else {
            Some(skip(SkipReason::LiveMismatch {
                live_fingerprint: live.fingerprint.clone(),
            }))
        }
    } else if let Err(e) = sig.validate() {
        Some(skip(SkipReason::Drifted {
            detail: e.to_string(),
        }))
    } else {
        let expected = table_identity(&sig.components, &sig.fingerprint);
        (expected != sig.table_id).then(|| skip(SkipReason::IdentityMismatch { expected }))
    }
}

/// Plans a query of `requested` components over `live` signatures and the
/// records of `catalog` (see the module documentation for the rules).
pub fn query_components(
    requested: &[String],
    live: &[Signature],
    catalog: &dyn ControlCatalog,
) -> QueryPlan {
    let mut plan = QueryPlan::default();
    let mut tables: BTreeMap<String, PlannedTable> = BTreeMap::new();
    for sig in live.iter().filter(|s| covers(s, requested)) {
        tables.insert(
            sig.table_id.clone(),
            PlannedTable {
                signature: sig.clone(),
                source: Source::Live,
            },
        );
    }
    let live_by_table: BTreeMap<&str, &Signature> =
        live.iter().map(|s| (s.table_id.as_str(), s)).collect();
    let records = match catalog.list_signatures() {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(
                error = %e,
                live_tables = tables.len(),
                "control catalog unavailable: the query plan is the live subset only"
            );
            plan.degraded = Some(e.to_string());
            plan.tables = tables.into_values().collect();
            return plan;
        }
    };
    for rec in records {
        let verdict = skip_verdict(&rec, &live_by_table);
        let sig = rec.signature;
        if let Some(s) = verdict {
            tracing::warn!(
                world_id = %s.world_id,
                table_id = %s.table_id,
                reason = ?s.reason,
                "control catalog: skipping a signature record"
            );
            plan.skipped.push(s);
            continue;
        }
        if !covers(&sig, requested) {
            continue;
        }
        let entry = tables
            .entry(sig.table_id.clone())
            .or_insert_with(|| PlannedTable {
                signature: sig.clone(),
                source: Source::Catalog { worlds: vec![] },
            });
        if let Source::Catalog { worlds } = &mut entry.source {
            if !worlds.contains(&rec.world_id) {
                worlds.push(rec.world_id.clone());
                worlds.sort();
            }
        }
    }
    plan.tables = tables.into_values().collect();
    plan
}

#[cfg(test)]
mod tests {
    use custos_core::control_memory::MemoryControlCatalog;
    use custos_core::schema::{Field, LogicalType, Schema};
    use custos_core::world::{
        Outcome, Request, SignatureRecord, WorldError, WorldIdentity, WorldInfo, WorldRecord,
        WriterMode,
    };

    use super::*;

    fn schema(score: LogicalType) -> Schema {
        Schema::new(vec![
            Field::new(
                "entity",
                LogicalType::Int {
                    bits: 64,
                    signed: true,
                },
                false,
            ),
            Field::new(
                "Position",
                LogicalType::Struct(vec![
                    Field::new("x", LogicalType::Float { bits: 64 }, true),
                    Field::new("y", LogicalType::Float { bits: 64 }, true),
                ]),
                true,
            ),
            Field::new("Score", score, true),
        ])
    }

    fn sig(score: LogicalType) -> Signature {
        let s = schema(score);
        let comps = vec!["Position".to_string(), "Score".to_string()];
        let id = table_identity(&comps, &custos_core::schema::fingerprint(&s));
        Signature::new(comps, s, id)
    }

    fn catalog_with(worlds: &[(&str, Signature)]) -> MemoryControlCatalog {
        let c = MemoryControlCatalog::new();
        for (w, s) in worlds {
            let _ = c.register(&WorldRecord::active(
                WorldIdentity::new(*w, *w),
                WriterMode::Resumable,
            ));
            c.apply(&Request::RegisterSignature {
                world_id: (*w).to_string(),
                signature: s.clone(),
            })
            .unwrap();
        }
        c
    }

    /// A catalog whose records are returned verbatim (drifted ones included).
    struct Verbatim(Vec<SignatureRecord>);
    impl ControlCatalog for Verbatim {
        fn apply(&self, _: &Request) -> Result<Outcome, WorldError> {
            unreachable!()
        }
        fn discover_worlds(&self) -> Result<Vec<WorldRecord>, WorldError> {
            Ok(vec![])
        }
        fn open_world_readonly(&self, w: &str) -> Result<WorldInfo, WorldError> {
            Err(WorldError::NotFound { world_id: w.into() })
        }
        fn list_signatures(&self) -> Result<Vec<SignatureRecord>, WorldError> {
            Ok(self.0.clone())
        }
    }

    struct Down;
    impl ControlCatalog for Down {
        fn apply(&self, _: &Request) -> Result<Outcome, WorldError> {
            Err(WorldError::BackendFault {
                reason: "down".into(),
            })
        }
        fn discover_worlds(&self) -> Result<Vec<WorldRecord>, WorldError> {
            Err(WorldError::BackendFault {
                reason: "down".into(),
            })
        }
        fn open_world_readonly(&self, _: &str) -> Result<WorldInfo, WorldError> {
            Err(WorldError::BackendFault {
                reason: "down".into(),
            })
        }
        fn list_signatures(&self) -> Result<Vec<SignatureRecord>, WorldError> {
            Err(WorldError::BackendFault {
                reason: "disk I/O error".into(),
            })
        }
    }

    fn req(cs: &[&str]) -> Vec<String> {
        cs.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn table_identity_is_order_insensitive_and_fingerprint_sensitive() {
        let a = table_identity(&req(&["A", "B"]), "f1");
        assert_eq!(a, table_identity(&req(&["B", "A"]), "f1"));
        assert_ne!(a, table_identity(&req(&["A", "B"]), "f2"));
        assert_ne!(a, table_identity(&req(&["AB"]), "f1"));
        assert_eq!(a.len(), 34);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    }

    #[test]
    fn catalog_tables_are_discovered_and_deduplicated_across_worlds() {
        let s = sig(LogicalType::Int {
            bits: 64,
            signed: true,
        });
        let c = catalog_with(&[("w2", s.clone()), ("w1", s.clone())]);
        let plan = query_components(&req(&["Score"]), &[], &c);
        assert_eq!(plan.tables.len(), 1);
        assert_eq!(plan.tables[0].signature, s);
        assert_eq!(
            plan.tables[0].source,
            Source::Catalog {
                worlds: vec!["w1".into(), "w2".into()]
            }
        );
        assert!(plan.skipped.is_empty() && plan.degraded.is_none());
        // A request the signature does not cover reads nothing.
        assert!(query_components(&req(&["Velocity"]), &[], &c)
            .tables
            .is_empty());
    }

    #[test]
    fn live_and_catalog_union_by_fingerprint_and_identity_never_by_name() {
        let old = sig(LogicalType::Int {
            bits: 64,
            signed: true,
        });
        let new = sig(LogicalType::Float { bits: 64 });
        // Same component names, different schemas: two different tables.
        assert_eq!(old.components, new.components);
        assert_ne!(old.table_id, new.table_id);
        let c = catalog_with(&[("w1", old.clone()), ("w2", new.clone())]);
        let plan = query_components(&req(&["Position", "Score"]), std::slice::from_ref(&new), &c);
        assert_eq!(plan.tables.len(), 2, "{plan:?}");
        let by_id: BTreeMap<_, _> = plan
            .tables
            .iter()
            .map(|t| (t.signature.table_id.clone(), t))
            .collect();
        assert_eq!(
            by_id[&new.table_id].source,
            Source::Live,
            "live takes precedence"
        );
        assert_eq!(
            by_id[&old.table_id].source,
            Source::Catalog {
                worlds: vec!["w1".into()]
            }
        );
    }

    #[test]
    fn drifted_and_identity_mismatched_records_are_skipped_not_fatal() {
        let good = sig(LogicalType::Int {
            bits: 64,
            signed: true,
        });
        let mut drifted = sig(LogicalType::Bool);
        drifted.fingerprint = "00".repeat(32);
        let mut misnamed = sig(LogicalType::Float { bits: 32 });
        misnamed.table_id = "t_elsewhere".into();
        let c = Verbatim(vec![
            SignatureRecord {
                world_id: "old".into(),
                signature: drifted.clone(),
            },
            SignatureRecord {
                world_id: "odd".into(),
                signature: misnamed.clone(),
            },
            SignatureRecord {
                world_id: "w".into(),
                signature: good.clone(),
            },
        ]);
        let plan = query_components(&req(&["Score"]), &[], &c);
        assert_eq!(plan.tables.len(), 1);
        assert_eq!(plan.tables[0].signature, good);
        assert_eq!(plan.skipped.len(), 2);
        assert!(matches!(plan.skipped[0].reason, SkipReason::Drifted { .. }));
        assert_eq!(plan.skipped[0].world_id, "old");
        assert_eq!(
            plan.skipped[1].reason,
            SkipReason::IdentityMismatch {
                expected: table_identity(&misnamed.components, &misnamed.fingerprint)
            }
        );
    }

    #[test]
    fn a_live_signature_wins_over_a_conflicting_catalog_record() {
        let live = sig(LogicalType::Int {
            bits: 64,
            signed: true,
        });
        let mut forged = sig(LogicalType::Bool);
        forged.table_id = live.table_id.clone();
        let c = Verbatim(vec![SignatureRecord {
            world_id: "w".into(),
            signature: forged,
        }]);
        let plan = query_components(&req(&["Score"]), std::slice::from_ref(&live), &c);
        assert_eq!(
            plan.tables,
            vec![PlannedTable {
                signature: live.clone(),
                source: Source::Live
            }]
        );
        assert_eq!(
            plan.skipped[0].reason,
            SkipReason::LiveMismatch {
                live_fingerprint: live.fingerprint
            }
        );
    }

    #[test]
    fn an_unavailable_catalog_degrades_to_the_live_subset() {
        let live = sig(LogicalType::Int {
            bits: 64,
            signed: true,
        });
        let plan = query_components(&req(&["Score"]), std::slice::from_ref(&live), &Down);
        assert_eq!(plan.tables.len(), 1);
        assert_eq!(plan.tables[0].source, Source::Live);
        assert!(plan
            .degraded
            .as_deref()
            .is_some_and(|d| d.contains("disk I/O error")));
    }

    #[test]
    fn projection_keeps_key_columns_and_the_requested_components_only() {
        let s = sig(LogicalType::Int {
            bits: 64,
            signed: true,
        });
        assert_eq!(
            projection(&s, &req(&["Score"])).unwrap(),
            req(&["entity", "Score"])
        );
        assert_eq!(
            projection(&s, &req(&["Position", "Score"])).unwrap(),
            req(&["entity", "Position", "Score"])
        );
        assert!(matches!(
            projection(&s, &req(&["Velocity"])),
            Err(IcebergError::InvalidDescriptor { .. })
        ));
    }
}
