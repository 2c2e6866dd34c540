//! Fixtures shared by the tests (and benchmarks) of this shell: release
//! contracts and components, a release catalog of two tiny releases,
//! deployment requests under tenant `acme`, a durable-root layout, and
//! readings of `/proc/self/status` and of a directory. Each test binary
//! includes this module (`mod support;`; a benchmark by `#[path]`) and uses
//! what it needs.

#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;

use custos_core::deployment::manifest::DeploymentManifest;
use custos_core::deployment::page::PageRequest;
use custos_core::deployment::route::ReleaseSource;
use custos_core::deployment::state::{Mutation, Request};
use custos_core::release::bounds::Bounds;
use custos_core::release::contract::{Contract, Function, Interface, MagicOnly, Param, ValType};
use custos_core::release::Sha256;
use custos_core::root::Layout;
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

/// Interface `interface` with one undocumented function `run(params) ->
/// results`.
pub fn contract_of(interface: &str, params: Vec<Param>, results: Vec<ValType>) -> Contract {
    Contract {
        interfaces: vec![Interface {
            docs: None,
            name: interface.into(),
            functions: vec![Function {
                docs: None,
                name: "run".into(),
                params,
                results,
            }],
        }],
    }
}

/// Parameter `name: ty`.
pub fn param(name: &str, ty: ValType) -> Param {
    Param {
        name: name.into(),
        ty,
    }
}

/// Interface `api` with one function `run(x: u32) -> result`.
pub fn contract_returning(result: ValType) -> Contract {
    contract_of("api", vec![param("x", ValType::U32)], vec![result])
}

/// [`contract_returning`] a string: the contract every release here has.
pub fn contract() -> Contract {
    contract_returning(ValType::String)
}

/// The digests of releases 1 and 2, without publishing them.
pub fn digests() -> [Sha256; 2] {
    [Sha256::of(&component(1)), Sha256::of(&component(2))]
}

/// The release catalog at `path` on the real filesystem: default bounds,
/// the magic-only inspector.
pub fn open_releases_at(path: &Path) -> ReleaseRepository<RealFs> {
    ReleaseRepository::open(RealFs, path, Bounds::default(), Arc::new(MagicOnly)).unwrap()
}

/// Publishes tenant `acme`'s release `n` (`app{n}` 1.0.0 exporting `api`,
/// component [`component`]`(n)`) with `contract`; answers its digest.
pub fn publish_app(repo: &ReleaseRepository<RealFs>, n: u32, contract: Contract) -> Sha256 {
    let comp = component(n);
    let manifest = serde_json::json!({
        "name": format!("app{n}"),
        "version": "1.0.0",
        "tenant": "acme",
        "component_digest": Sha256::of(&comp).to_string(),
        "exports": ["api"],
    });
    repo.publish(&serde_json::to_vec(&manifest).unwrap(), comp, contract)
        .unwrap()
        .digest
}

/// Publishes tenant `acme`'s releases 1 and 2 (`app1`, `app2`) into `dir/releases` on the
/// real filesystem (never traced); the repository and the two digests.
pub fn publish_two(dir: &Path) -> (Arc<ReleaseRepository<RealFs>>, [Sha256; 2]) {
    let repo = open_releases_at(&dir.join("releases"));
    let digests = [1u32, 2].map(|n| publish_app(&repo, n, contract()));
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

/// The first page (of at most `page_size` records) of tenant `acme`'s
/// deployments, over every service.
pub fn acme_page(page_size: u32) -> PageRequest {
    PageRequest {
        tenant: "acme".into(),
        service: None,
        page_size,
        page_token: None,
    }
}

/// The names in directory `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// One `/proc/self/status` field (its name with the colon), in KiB.
pub fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// The layout of the durable-root tests' catalog.
pub const LAYOUT: Layout = Layout {
    kind: "test catalog",
    marker: b"custos test catalog 1\n",
    dirs: &[".tmp", "releases"],
    staging: Some(".tmp"),
    files: &[],
    scratch: &[],
    signs: &[],
};
