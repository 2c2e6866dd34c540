//! The deployment conformance suite against its memory reference
//! (`custos_core::deployment::memory::MemoryDeployments`, core's pure
//! deployment state behind one lock, over the suite's fixture releases).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

custos_conformance::deployment_suite!(
    memory_deployment,
    custos_conformance::deployment::memory,
    reopen: custos_conformance::deployment::memory_place
);

#[test]
fn deployment_case_table_names_every_case() {
    let n = custos_conformance::deployment::DEPLOYMENT_CASES.len();
    println!("memory: {n} deployment cases");
    assert!(n >= 12);
}
