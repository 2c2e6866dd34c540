//! Fixtures shared by the deployment tests of this shell: a release
//! catalog of two tiny releases, and deployment requests under tenant
//! `acme`. Each test binary includes this module (`mod support;`) and uses
//! what it needs.

#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use custos_core::deployment::manifest::DeploymentManifest;
use custos_core::deployment::route::ReleaseSource;
use custos_core::deployment::state::{Mutation, Request};
use custos_core::release::bounds::Bounds;
use custos_core::release::contract::{Contract, Function, Interface, MagicOnly, Param, ValType};
use custos_core::release::Sha256;
use custos_fs::deployment::ReleaseCatalog;
use custos_fs::release::ReleaseRepository;
use custos_fs::RealFs;

/// The release catalog a deployment repository resolves against.
pub type Source = Arc<dyn ReleaseSource + Send + Sync>;

/// Release `n`'s component: the wasm magic and version, then `n`.
pub fn component(n: u32) -> Vec<u8> {
    let mut c = b"\0asm\x0d\0\x01\0".to_vec();
    c.extend_from_slice(&n.to_le_bytes());
    c
}

/// Interface `api` with one function `run(x: u32) -> result`.
pub fn contract_returning(result: ValType) -> Contract {
    Contract {
        interfaces: vec![Interface {
            docs: None,
            name: "api".into(),
            functions: vec![Function {
                docs: None,
                name: "run".into(),
                params: vec![Param {
                    name: "x".into(),
                    ty: ValType::U32,
                }],
                results: vec![result],
            }],
        }],
    }
}

/// [`contract_returning`] a string: the contract every release here has.
pub fn contract() -> Contract {
    contract_returning(ValType::String)
}

/// The digests of releases 1 and 2, without publishing them.
pub fn digests() -> [Sha256; 2] {
    [Sha256::of(&component(1)), Sha256::of(&component(2))]
}

/// Publishes tenant `acme`'s releases 1 and 2 (`app1`, `app2`) into `dir/releases` on the
/// real filesystem (never traced); the repository and the two digests.
pub fn publish_two(dir: &Path) -> (Arc<ReleaseRepository<RealFs>>, [Sha256; 2]) {
    let repo = ReleaseRepository::open(
        RealFs,
        &dir.join("releases"),
        Bounds::default(),
        Arc::new(MagicOnly),
    )
    .unwrap();
    let mut digests = [Sha256::default(); 2];
    for (i, n) in [1u32, 2].into_iter().enumerate() {
        let comp = component(n);
        let manifest = serde_json::json!({
            "name": format!("app{n}"),
            "version": "1.0.0",
            "tenant": "acme",
            "component_digest": Sha256::of(&comp).to_string(),
            "exports": ["api"],
        });
        digests[i] = repo
            .publish(&serde_json::to_vec(&manifest).unwrap(), comp, contract())
            .unwrap()
            .digest;
    }
    (Arc::new(repo), digests)
}

/// `repo` as the release source of a deployment repository.
pub fn source(repo: &Arc<ReleaseRepository<RealFs>>) -> Source {
    Arc::new(ReleaseCatalog(Arc::clone(repo)))
}

/// [`publish_two`] as a release source, and the two digests.
pub fn releases(dir: &Path) -> (Source, [Sha256; 2]) {
    let (repo, digests) = publish_two(dir);
    (source(&repo), digests)
}

/// `mutation` as tenant `acme`, compiled at 0, unmanaged.
pub fn request(mutation: Mutation) -> Request {
    Request {
        tenant: Some("acme".into()),
        mutation,
        compiled_at: 0,
        operation: None,
    }
}

/// Deployment `id` of service `api` on `release` with route weight `weight`.
pub fn manifest(id: &str, release: Sha256, weight: u32) -> DeploymentManifest {
    DeploymentManifest::decode(
        format!(
            r#"{{"id":"{id}","tenant":"acme","service":"api","release":"{release}","route_weight":{weight}}}"#
        )
        .as_bytes(),
    )
    .unwrap()
}

/// An apply of `m`, conditional on generation `expected` when given.
pub fn apply_manifest(m: DeploymentManifest, expected: Option<u64>) -> Request {
    request(Mutation::Apply {
        manifest: Box::new(m),
        expected,
    })
}

/// An apply of [`manifest`]`(id, release, weight)`.
pub fn apply(id: &str, release: Sha256, weight: u32, expected: Option<u64>) -> Request {
    apply_manifest(manifest(id, release, weight), expected)
}

/// A delete of `id`, conditional on generation `expected` when given.
pub fn delete(id: &str, expected: Option<u64>) -> Request {
    request(Mutation::Delete {
        id: id.into(),
        expected,
    })
}
