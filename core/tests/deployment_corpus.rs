//! Replays the checked-in deployment-catalog fuzz corpus
//! (`fuzz/corpus/deployment/`) through the checker the fuzz target runs, so
//! CI covers it where libFuzzer cannot run; runs random streams through it
//! as a property test; and shows the checker catches broken deciders.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use custos_core::deployment::state::{decide, Catalog, Decision, Request};
use custos_core::deployment::DeploymentError;
use custos_testkit::streams::deployment::{
    check_deployment_bytes, check_deployment_stream, check_deployment_stream_with, DeploymentOp,
    Pick,
};
use proptest::prelude::*;

#[test]
fn deployment_corpus_replays_clean() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/deployment");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        if let Err(v) = check_deployment_bytes(&data) {
            panic!("{}: {v}", path.display());
        }
        files += 1;
    }
    assert!(files >= 8, "corpus deployment has only {files} inputs");
}

fn pick() -> impl Strategy<Value = Pick> {
    (0u8..6, 0u8..2, 0u8..4, 0u8..2, 0u8..6, 0u8..7, 0u8..8).prop_map(
        |(id, tenant, namespace, service, release, weight, grants)| Pick {
            id,
            tenant,
            namespace,
            service,
            release,
            weight,
            grants,
        },
    )
}

fn managed() -> impl Strategy<Value = u8> {
    prop_oneof![2 => Just(0u8), 1 => 128u8..=255]
}

fn op() -> impl Strategy<Value = DeploymentOp> {
    prop_oneof![
        4 => (pick(), 0u8..4, 0u8..3, proptest::bool::weighted(0.2), managed()).prop_map(
            |(pick, expected, scope, stale, managed)| DeploymentOp::Apply {
                pick,
                expected,
                scope,
                stale,
                managed
            }
        ),
        2 => (pick(), 0u8..32, any::<bool>(), 0u8..3, proptest::bool::weighted(0.2), managed())
            .prop_map(|(pick, mask, empty, scope, stale, managed)| DeploymentOp::ApplyMany {
                pick,
                mask,
                empty,
                scope,
                stale,
                managed
            }),
        3 => (0u8..6, 0u8..4, 0u8..3, proptest::bool::weighted(0.2), managed()).prop_map(
            |(id, expected, scope, stale, managed)| DeploymentOp::Delete {
                id,
                expected,
                scope,
                stale,
                managed
            }
        ),
        1 => (proptest::bool::weighted(0.2), managed())
            .prop_map(|(stale, managed)| DeploymentOp::Publish { stale, managed }),
        1 => (0u8..8).prop_map(|distance| DeploymentOp::Jump { distance }),
        1 => (pick(), any::<u16>(), any::<u8>())
            .prop_map(|(pick, at, byte)| DeploymentOp::Decode { pick, at, byte }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn random_deployment_streams_hold_every_rule(ops in proptest::collection::vec(op(), 0..64)) {
        if let Err(v) = check_deployment_stream(&ops) {
            panic!("{v}");
        }
    }

    #[test]
    fn arbitrary_bytes_hold_every_rule(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Err(v) = check_deployment_bytes(&data) {
            panic!("{v}");
        }
    }
}

fn blue() -> Pick {
    Pick::default()
}

fn apply(pick: Pick, expected: u8, scope: u8, stale: bool, managed: u8) -> DeploymentOp {
    DeploymentOp::Apply {
        pick,
        expected,
        scope,
        stale,
        managed,
    }
}

/// Commits whatever the precondition says.
fn ignores_precondition(c: &Catalog, r: &Request) -> Result<Decision, DeploymentError> {
    let mut r = r.clone();
    if let custos_core::deployment::state::Mutation::Apply { expected, .. }
    | custos_core::deployment::state::Mutation::Delete { expected, .. } = &mut r.mutation
    {
        *expected = None;
    }
    decide(c, &r)
}

/// Commits a compilation of any generation.
fn ignores_compiled_at(c: &Catalog, r: &Request) -> Result<Decision, DeploymentError> {
    decide(
        c,
        &Request {
            compiled_at: c.generation,
            ..r.clone()
        },
    )
}

/// Forgets managed operations: a retry runs again.
fn forgets_operations(c: &Catalog, r: &Request) -> Result<Decision, DeploymentError> {
    decide(
        c,
        &Request {
            operation: None,
            ..r.clone()
        },
    )
}

/// Decides every request unscoped.
fn ignores_tenant(c: &Catalog, r: &Request) -> Result<Decision, DeploymentError> {
    decide(
        c,
        &Request {
            tenant: None,
            ..r.clone()
        },
    )
}

/// Publishes a deletion without advancing the generation.
fn delete_keeps_generation(c: &Catalog, r: &Request) -> Result<Decision, DeploymentError> {
    let mut d = decide(c, r)?;
    if let (custos_core::deployment::state::Mutation::Delete { .. }, Some(next)) =
        (&r.mutation, d.next.as_mut())
    {
        next.generation = c.generation;
    }
    Ok(d)
}

fn killed_at(
    decide: custos_testkit::streams::deployment::DeploymentDecide,
    ops: &[DeploymentOp],
) -> (usize, &'static str) {
    check_deployment_stream(ops).unwrap();
    let v = check_deployment_stream_with(decide, ops).unwrap_err();
    (v.step, v.invariant)
}

#[test]
fn the_checker_catches_broken_deciders() {
    // A stale precondition (live stamp + 1).
    let ops = [apply(blue(), 0, 1, false, 0), apply(blue(), 3, 1, false, 0)];
    assert_eq!(
        killed_at(ignores_precondition, &ops),
        (1, "a stale precondition never commits")
    );
    // A stale compilation.
    let ops = [apply(blue(), 0, 1, false, 0), apply(blue(), 0, 1, true, 0)];
    assert_eq!(
        killed_at(ignores_compiled_at, &ops),
        (1, "a stale compilation never commits")
    );
    // A managed retry (observed generation 0) after its commit.
    let ops = [
        apply(blue(), 0, 1, false, 136),
        apply(blue(), 0, 1, false, 136),
    ];
    assert_eq!(
        killed_at(forgets_operations, &ops),
        (1, "a managed operation commits at most once")
    );
    // Another tenant's delete.
    let del = DeploymentOp::Delete {
        id: 0,
        expected: 0,
        scope: 2,
        stale: false,
        managed: 0,
    };
    let ops = [apply(blue(), 0, 1, false, 0), del];
    assert_eq!(
        killed_at(ignores_tenant, &ops),
        (1, "a scoped request touches only its tenant")
    );
    // A deletion that does not publish a generation.
    let del = DeploymentOp::Delete {
        id: 0,
        expected: 0,
        scope: 0,
        stale: false,
        managed: 0,
    };
    let ops = [apply(blue(), 0, 1, false, 0), del];
    assert_eq!(
        killed_at(delete_keeps_generation, &ops),
        (1, "a publication advances the generation by exactly one")
    );
}
