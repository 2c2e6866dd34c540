//! The deployment conformance suite against its memory reference
//! (`custos_conformance::deployment::MemoryDeployments`, core's pure
//! deployment state behind one lock).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_conformance::deployment::MemoryDeployments;

custos_conformance::deployment_suite!(memory_deployment, MemoryDeployments::new);

#[test]
fn deployment_case_table_names_every_case() {
    let n = custos_conformance::deployment::DEPLOYMENT_CASES.len();
    println!("memory: {n} deployment cases");
    assert!(n >= 12);
}
