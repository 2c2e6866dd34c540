//! Route compilation, resolution and deterministic weighted selection.
//!
//! [`compile`] turns the desired state plus each release's facts — its
//! owner, its lifecycle standing and its verified contract metadata,
//! fetched through the [`ReleaseSource`] port once per distinct release, in
//! (release digest, deployment id) order — into an immutable [`Snapshot`].
//! A route of tenant T resolves only to T's own eligible releases
//! ([`admit`]). Every deployment contributes to its service's
//! `default` route and to a named route equal to its id. A [`Snapshot`]
//! answers [`Snapshot::resolve`] with an owned [`ResolvedRevision`]: no
//! fetch, no I/O, no compilation. [`PinnedRoutes`] keeps one whole
//! generation alive for several lookups.
//!
//! Selection: candidates sorted by ascending [`RevisionId`], checked `u64`
//! cumulative weights, bucket = the first eight bytes of
//! SHA-256(`custos-route-selection-v1\0` ‖ for each of tenant, service,
//! route, contract, function, routing key: its length as a big-endian
//! `u64` ‖ its UTF-8 bytes) read big-endian, modulo the total weight; the
//! first cumulative weight strictly greater than the bucket wins.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest as _, Sha256 as Hasher};

use super::manifest::{RevisionId, MAX_IDENTIFIER_BYTES, RESERVED_ID};
use super::state::Catalog;
use super::DeploymentError;
use crate::release::contract::{Contract, Interface};
use crate::release::Sha256;

/// The domain tag of the selection hash.
pub const SELECTION_DOMAIN: &[u8] = b"custos-route-selection-v1\0";
/// The most weighted endpoint index entries one snapshot holds.
pub const MAX_ENDPOINT_ENTRIES: u64 = 1_000_000;
/// The longest routing key, in bytes.
pub const MAX_ROUTING_KEY_BYTES: usize = 4096;
/// The attribute holding a resolved revision's canonical deployment.
pub const ATTR_DEPLOYMENT: &str = "custos.deployment";
/// The attribute holding a resolved revision's exported endpoints.
pub const ATTR_EXPORTS: &str = "custos.exports";

/// A release's lifecycle standing, as its catalog reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Neither revoked nor retired: the release's verified contract.
    Eligible(Contract),
    /// Revoked: never served again.
    Revoked,
    /// Retired.
    Retired,
    /// Eligible, but its contract could not be read: why.
    Unreadable(String),
}

/// What a release catalog holds under one component digest, gathered for
/// a compilation before anything is decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseFacts {
    /// The tenant that published the release; `None` for a trusted-local
    /// release (published without a tenant).
    pub owner: Option<String>,
    /// Its lifecycle standing.
    pub standing: Standing,
}

impl ReleaseFacts {
    /// An eligible release of `owner` exporting `contract`.
    pub fn eligible(owner: &str, contract: Contract) -> Self {
        ReleaseFacts {
            owner: Some(owner.to_owned()),
            standing: Standing::Eligible(contract),
        }
    }
}

/// The port a release catalog implements for compilation: what it holds
/// under a component digest, whoever published it (the owner is a fact
/// the compiler checks, never a filter the port applies). Called at most
/// once per distinct release per compilation.
pub trait ReleaseSource {
    /// The facts of the release whose component digest is `release`:
    /// `Ok(None)` when the catalog holds no such release, `Err` when it
    /// could not be read.
    fn release(&self, release: &Sha256) -> Result<Option<ReleaseFacts>, String>;
}

impl<F> ReleaseSource for F
where
    F: Fn(&Sha256) -> Result<Option<ReleaseFacts>, String>,
{
    fn release(&self, release: &Sha256) -> Result<Option<ReleaseFacts>, String> {
        self(release)
    }
}

/// The rule between the release and the deployment catalogs: a deployment
/// of `tenant` may use only a release that tenant sees through the release
/// catalog's scoped reads — one published under that same tenant — and
/// only while it is eligible.
///
/// - A release that does not exist, another tenant's release and a
///   trusted-local release (published without a tenant, so outside every
///   tenant's scoped reads) are all [`DeploymentError::ReleaseNotFound`],
///   with the same text: the answer is no oracle for another tenant's
///   digests. A trusted-local release is therefore deployable by nobody;
///   publish it under the tenant that deploys it.
/// - A visible release that was revoked or retired is
///   [`DeploymentError::ReleaseRevoked`] or
///   [`DeploymentError::ReleaseRetired`]; a visible one whose contract
///   could not be read is [`DeploymentError::ReleaseUnavailable`].
///
/// Returns the visible, eligible release's contract.
pub fn admit<'f>(
    tenant: &str,
    release: &Sha256,
    facts: Option<&'f ReleaseFacts>,
) -> Result<&'f Contract, DeploymentError> {
    let not_found = || DeploymentError::ReleaseNotFound { release: *release };
    let facts = facts.ok_or_else(not_found)?;
    if facts.owner.as_deref() != Some(tenant) {
        return Err(not_found());
    }
    match &facts.standing {
        Standing::Eligible(contract) => Ok(contract),
        Standing::Revoked => Err(DeploymentError::ReleaseRevoked { release: *release }),
        Standing::Retired => Err(DeploymentError::ReleaseRetired { release: *release }),
        Standing::Unreadable(detail) => Err(DeploymentError::ReleaseUnavailable {
            release: *release,
            detail: detail.clone(),
        }),
    }
}

/// One exported contract of a compiled deployment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Export {
    /// The contract (interface) id.
    pub contract: String,
    /// SHA-256 of the contract's full canonical metadata.
    pub fingerprint: Sha256,
    /// Its function ids, sorted.
    pub functions: Vec<String>,
}

/// One compiled deployment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    /// The deployment id.
    pub id: String,
    /// Its tenant.
    pub tenant: String,
    /// Its service.
    pub service: String,
    /// Its logical revision.
    pub revision: RevisionId,
    /// Its release.
    pub release: Sha256,
    /// Its object generation.
    pub generation: u64,
    /// Its default-route weight.
    pub weight: u32,
    /// The canonical deployment (RFC 8785).
    pub deployment: String,
    /// The exports, as canonical JSON.
    pub exports: String,
}

/// (tenant, service, route, contract, function).
type EndpointKey = (String, String, String, String, String);

/// One endpoint's candidates in ascending revision order: record indexes
/// and their checked cumulative weights.
#[derive(Clone, Debug, Default)]
struct Candidates {
    records: Vec<usize>,
    cumulative: Vec<u64>,
}

/// An immutable compiled generation of routes.
///
/// Its indexes are ordered maps (no hasher seed: core draws no randomness) keyed by the length-prefixed bytes of
/// (tenant, service, route) and (…, contract, function), so one lookup
/// builds one key buffer; they are a function of the
/// records, so equality and hashing look at the generation and the records
/// only.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The catalog generation compiled.
    pub generation: u64,
    /// Compiled deployments, by id order.
    pub records: Vec<Record>,
    /// Route keys (tenant, service, route) that exist.
    routes: BTreeSet<Vec<u8>>,
    /// Endpoint candidates by endpoint key.
    endpoints: BTreeMap<Vec<u8>, Candidates>,
}

impl PartialEq for Snapshot {
    fn eq(&self, other: &Self) -> bool {
        self.generation == other.generation && self.records == other.records
    }
}

impl Eq for Snapshot {}

impl std::hash::Hash for Snapshot {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.generation.hash(state);
        self.records.hash(state);
    }
}

/// Appends each part, prefixed by its length as a big-endian `u32`, to
/// `buf`: an unambiguous packed key.
fn pack(buf: &mut Vec<u8>, parts: &[&str]) {
    for p in parts {
        buf.extend_from_slice(&u32::try_from(p.len()).unwrap_or(u32::MAX).to_be_bytes());
        buf.extend_from_slice(p.as_bytes());
    }
}

/// What an invocation asks for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Target {
    /// The tenant.
    pub tenant: String,
    /// The service.
    pub service: String,
    /// The route; `None` is `default`.
    pub route: Option<String>,
    /// The contract.
    pub contract: String,
    /// The function.
    pub function: String,
}

/// An owned resolution: nothing later done to the catalog changes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ResolvedRevision {
    /// The deployment id.
    pub deployment_id: String,
    /// Its logical revision.
    pub revision: RevisionId,
    /// Its release.
    pub release: Sha256,
    /// Its object generation.
    pub generation: u64,
    /// The catalog generation resolved against.
    pub catalog_generation: u64,
    /// [`ATTR_DEPLOYMENT`] and [`ATTR_EXPORTS`].
    pub attributes: BTreeMap<String, String>,
}

/// Validates a release's contract: every contract has functions, no
/// contract or function id twice. Returns each contract's export.
fn exports_of(release: &Sha256, contract: &Contract) -> Result<Vec<Export>, DeploymentError> {
    let mut out: Vec<Export> = Vec::with_capacity(contract.interfaces.len());
    let mut seen = BTreeSet::new();
    for i in &contract.interfaces {
        if !seen.insert(i.name.as_str()) {
            return Err(DeploymentError::DuplicateContract {
                release: *release,
                contract: i.name.clone(),
            });
        }
        if i.functions.is_empty() {
            return Err(DeploymentError::IncompleteContract {
                release: *release,
                contract: i.name.clone(),
            });
        }
        let mut functions: Vec<String> = i.functions.iter().map(|f| f.name.clone()).collect();
        functions.sort_unstable();
        if let Some(w) = functions.windows(2).find(|w| w.first() == w.get(1)) {
            return Err(DeploymentError::DuplicateFunction {
                release: *release,
                contract: i.name.clone(),
                function: w.first().cloned().unwrap_or_default(),
            });
        }
        out.push(Export {
            contract: i.name.clone(),
            fingerprint: fingerprint(i),
            functions,
        });
    }
    out.sort_by(|a, b| a.contract.cmp(&b.contract));
    Ok(out)
}

/// SHA-256 of a contract's full canonical metadata (RFC 8785 of its JSON):
/// never the claimed digest.
pub fn fingerprint(interface: &Interface) -> Sha256 {
    Sha256::of(&serde_json_canonicalizer::to_vec(interface).unwrap_or_default())
}

/// Compiles a stored generation of `catalog`'s desired state into the
/// snapshot of its generation (what an open rebuilds): a deployment whose
/// release [`admit`] refuses for its tenant (another tenant's, revoked,
/// retired) stays listed for management and contributes no endpoints; a
/// release the catalog does not hold at all fails the compilation
/// ([`DeploymentError::ReleaseUnavailable`]). See [`compile_admitting`].
pub fn compile(catalog: &Catalog, source: &dyn ReleaseSource) -> Result<Snapshot, DeploymentError> {
    compile_admitting(catalog, source, &BTreeSet::new())
}

/// What compilation needs of one release, gathered from its
/// [`ReleaseFacts`]: the owner and the standing, an eligible release's
/// contract already reduced to its exports (or to why its contract is
/// malformed). Gathering keeps this and drops the facts, so it holds a few
/// hundred bytes per release however large the contract's documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatheredRelease {
    /// The tenant that published the release (`None`: trusted-local).
    pub owner: Option<String>,
    /// Its standing.
    pub standing: GatheredStanding,
}

/// A gathered release's standing ([`Standing`] with the contract reduced).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GatheredStanding {
    /// Eligible: its exports, or why its contract cannot be served.
    Eligible(Result<Vec<Export>, DeploymentError>),
    /// Revoked.
    Revoked,
    /// Retired.
    Retired,
    /// Eligible, but its contract could not be read: why.
    Unreadable(String),
}

impl GatheredRelease {
    /// Reduces the facts of `release` to what compilation reads.
    pub fn of(release: &Sha256, facts: ReleaseFacts) -> Self {
        GatheredRelease {
            owner: facts.owner,
            standing: match facts.standing {
                Standing::Eligible(c) => GatheredStanding::Eligible(exports_of(release, &c)),
                Standing::Revoked => GatheredStanding::Revoked,
                Standing::Retired => GatheredStanding::Retired,
                Standing::Unreadable(d) => GatheredStanding::Unreadable(d),
            },
        }
    }
}

/// [`admit`] over a gathered release: the same rule, the same answers.
fn admit_gathered<'g>(
    tenant: &str,
    release: &Sha256,
    gathered: Option<&'g GatheredRelease>,
) -> Result<&'g Result<Vec<Export>, DeploymentError>, DeploymentError> {
    let not_found = || DeploymentError::ReleaseNotFound { release: *release };
    let g = gathered.ok_or_else(not_found)?;
    if g.owner.as_deref() != Some(tenant) {
        return Err(not_found());
    }
    match &g.standing {
        GatheredStanding::Eligible(exports) => Ok(exports),
        GatheredStanding::Revoked => Err(DeploymentError::ReleaseRevoked { release: *release }),
        GatheredStanding::Retired => Err(DeploymentError::ReleaseRetired { release: *release }),
        GatheredStanding::Unreadable(detail) => Err(DeploymentError::ReleaseUnavailable {
            release: *release,
            detail: detail.clone(),
        }),
    }
}

/// The releases a catalog names, as its [`ReleaseSource`] answered: one
/// answer per distinct release (`Err` when it could not be read). What
/// [`gather`] fetches and [`compile_gathered`] decides over.
pub type Gathered = BTreeMap<Sha256, Result<Option<GatheredRelease>, String>>;

/// One release's answer, reduced ([`GatheredRelease::of`]).
pub type Answer = Result<Option<GatheredRelease>, String>;

/// Asks `source` for `release` and reduces the answer: the port's part of a
/// compilation, one release at a time.
pub fn ask(source: &dyn ReleaseSource, release: &Sha256) -> Answer {
    source
        .release(release)
        .map(|f| f.map(|f| GatheredRelease::of(release, f)))
}

/// Asks `source` once for each distinct release `catalog`'s deployments
/// name, in digest order, reducing each answer before the next is asked
/// (one release's full facts held at a time).
pub fn gather(catalog: &Catalog, source: &dyn ReleaseSource) -> Gathered {
    let named: BTreeSet<Sha256> = catalog
        .objects
        .values()
        .map(|d| d.manifest.release)
        .collect();
    named
        .into_iter()
        .map(|r| {
            let answer = ask(source, &r);
            (r, answer)
        })
        .collect()
}

/// A request decided against the live catalog: its receipt, and the
/// next catalog with the routes it compiles to (`None` when nothing is
/// published).
#[derive(Debug)]
pub struct Decided {
    /// The decision's own receipt.
    pub receipt: super::state::Receipt,
    /// The catalog to publish and its compiled routes.
    pub next: Option<(Catalog, Snapshot)>,
}

/// Decides `req` against `live` (its `compiled_at` set to the live
/// generation) and compiles the routes of the catalog it publishes,
/// admitting the releases it applies from `source`: the one step every
/// deployment catalog runs under its writer lock, before it installs (and
/// a durable one writes) the result.
pub fn decide_live(
    live: &Catalog,
    req: &mut super::state::Request,
    source: &dyn ReleaseSource,
) -> Result<Decided, DeploymentError> {
    req.compiled_at = live.generation;
    let decision = super::state::decide(live, req)?;
    let applied = decision.applied();
    let next = match decision.next {
        Some(next) => {
            let routes = compile_admitting(&next, source, &applied)?;
            Some((next, routes))
        }
        None => None,
    };
    Ok(Decided {
        receipt: decision.receipt,
        next,
    })
}

/// Compiles with `source`: each release is asked ([`ask`]) and then fed to
/// the pure [`Compilation`] before the next is asked, so a refusal stops
/// the asking (a compilation refused at its first release costs one
/// question), and deciding never calls the port. An ambiguous namespace
/// refuses before the port is asked anything.
pub fn compile_admitting(
    catalog: &Catalog,
    source: &dyn ReleaseSource,
    admitted: &BTreeSet<String>,
) -> Result<Snapshot, DeploymentError> {
    let mut c = Compilation::new(catalog, admitted)?;
    for r in c.releases() {
        c.feed(&r, &ask(source, &r))?;
    }
    c.finish()
}

/// [`Compilation`] over answers gathered beforehand (pure: it calls no
/// port); a release `gathered` lacks is `ReleaseUnavailable`.
pub fn compile_gathered(
    catalog: &Catalog,
    gathered: &Gathered,
    admitted: &BTreeSet<String>,
) -> Result<Snapshot, DeploymentError> {
    let mut c = Compilation::new(catalog, admitted)?;
    for r in c.releases() {
        let answer = gathered
            .get(&r)
            .cloned()
            .unwrap_or_else(|| Err("not gathered before compilation".into()));
        c.feed(&r, &answer)?;
    }
    c.finish()
}

/// The pure part of a compilation of `catalog`'s desired state into the
/// snapshot of its generation: fed each release's answer in digest order
/// ([`Compilation::releases`]), it compiles that release's deployments in
/// id order, admitting the deployments named in `admitted` (those the
/// publication being compiled writes: [`super::state::Decision::applied`]):
/// each must pass [`admit`], or the whole compilation is refused with its
/// answer. It also refuses the namespace and schema-consistency rules,
/// malformed contract metadata, an unreadable release, and the endpoint
/// bound (charged before each insertion).
pub struct Compilation<'c> {
    catalog: &'c Catalog,
    admitted: &'c BTreeSet<String>,
    /// Deployments in (release digest, deployment id) order.
    order: Vec<&'c super::state::VersionedDeployment>,
    /// How many of `order` are compiled.
    done: usize,
    schemas: BTreeMap<(String, String, String), Sha256>,
    compiled: BTreeMap<String, (Record, Vec<Export>)>,
}

impl<'c> Compilation<'c> {
    /// Starts a compilation; an ambiguous namespace refuses at once.
    pub fn new(
        catalog: &'c Catalog,
        admitted: &'c BTreeSet<String>,
    ) -> Result<Self, DeploymentError> {
        check_namespaces(catalog)?;
        let mut order: Vec<_> = catalog.objects.values().collect();
        order.sort_by(|a, b| {
            (a.manifest.release, &a.manifest.id).cmp(&(b.manifest.release, &b.manifest.id))
        });
        Ok(Compilation {
            catalog,
            admitted,
            order,
            done: 0,
            schemas: BTreeMap::new(),
            compiled: BTreeMap::new(),
        })
    }

    /// The distinct releases still to feed, in digest order.
    pub fn releases(&self) -> Vec<Sha256> {
        let mut out: Vec<Sha256> = self
            .order
            .iter()
            .skip(self.done)
            .map(|d| d.manifest.release)
            .collect();
        out.dedup();
        out
    }

    /// Compiles the deployments of `release` (the next in digest order)
    /// over its answer.
    pub fn feed(&mut self, release: &Sha256, answer: &Answer) -> Result<(), DeploymentError> {
        while let Some(d) = self.order.get(self.done).copied() {
            if d.manifest.release != *release {
                break;
            }
            self.compile_one(d, answer)?;
            self.done += 1;
        }
        Ok(())
    }

    /// The snapshot, once every release was fed; a release never fed is
    /// `ReleaseUnavailable`.
    pub fn finish(self) -> Result<Snapshot, DeploymentError> {
        if let Some(d) = self.order.get(self.done) {
            return Err(DeploymentError::ReleaseUnavailable {
                release: d.manifest.release,
                detail: "not asked before compilation ended".into(),
            });
        }
        index(self.catalog.generation, self.compiled)
    }

    fn compile_one(
        &mut self,
        d: &super::state::VersionedDeployment,
        answer: &Answer,
    ) -> Result<(), DeploymentError> {
        let m = &d.manifest;
        let facts = match answer {
            Ok(f) => f.as_ref(),
            Err(detail) => {
                return Err(DeploymentError::ReleaseUnavailable {
                    release: m.release,
                    detail: detail.clone(),
                })
            }
        };
        let exports = match admit_gathered(&m.tenant, &m.release, facts) {
            Ok(Ok(e)) => e.clone(),
            Ok(Err(malformed)) => return Err(malformed.clone()),
            Err(refusal)
                if self.admitted.contains(&m.id)
                    || matches!(refusal, DeploymentError::ReleaseUnavailable { .. }) =>
            {
                return Err(refusal)
            }
            Err(_) if facts.is_none() => {
                return Err(DeploymentError::ReleaseUnavailable {
                    release: m.release,
                    detail: "not in the release catalog".into(),
                })
            }
            // A nonauthorizing row: listed, never resolved.
            Err(_) => Vec::new(),
        };
        check_schemas(&mut self.schemas, m, &exports)?;
        let record = Record {
            id: m.id.clone(),
            tenant: m.tenant.clone(),
            service: m.service.clone(),
            revision: m.revision_id(),
            release: m.release,
            generation: d.generation,
            weight: m.route_weight,
            deployment: String::from_utf8(m.canonical()).unwrap_or_default(),
            exports: serde_json_canonicalizer::to_string(&exports).unwrap_or_default(),
        };
        self.compiled.insert(m.id.clone(), (record, exports));
        Ok(())
    }
}

/// One (tenant, service, contract) has one schema fingerprint across every
/// deployment that exports it.
fn check_schemas(
    schemas: &mut BTreeMap<(String, String, String), Sha256>,
    m: &super::manifest::DeploymentManifest,
    exports: &[Export],
) -> Result<(), DeploymentError> {
    for e in exports {
        let key = (m.tenant.clone(), m.service.clone(), e.contract.clone());
        match schemas.get(&key) {
            Some(f) if *f != e.fingerprint => {
                return Err(DeploymentError::SchemaConflict {
                    tenant: m.tenant.clone(),
                    service: m.service.clone(),
                    contract: e.contract.clone(),
                })
            }
            Some(_) => {}
            None => {
                schemas.insert(key, e.fingerprint);
            }
        }
    }
    Ok(())
}

/// All deployments of one (tenant, service) share one namespace (or all
/// have none).
fn check_namespaces(catalog: &Catalog) -> Result<(), DeploymentError> {
    let mut seen: BTreeMap<(&str, &str), &Option<String>> = BTreeMap::new();
    for d in catalog.objects.values() {
        let m = &d.manifest;
        let ns = seen.entry((&m.tenant, &m.service)).or_insert(&m.namespace);
        if **ns != m.namespace {
            return Err(DeploymentError::AmbiguousNamespace {
                tenant: m.tenant.clone(),
                service: m.service.clone(),
            });
        }
    }
    Ok(())
}

fn index(
    generation: u64,
    compiled: BTreeMap<String, (Record, Vec<Export>)>,
) -> Result<Snapshot, DeploymentError> {
    let mut records = Vec::with_capacity(compiled.len());
    let mut routes = BTreeSet::new();
    // (endpoint key) -> [(revision, record index, weight)]
    let mut candidates: BTreeMap<EndpointKey, Vec<(RevisionId, usize, u32)>> = BTreeMap::new();
    let mut entries: u64 = 0;
    for (idx, (_, (record, exports))) in compiled.into_iter().enumerate() {
        let (tenant, service) = (record.tenant.clone(), record.service.clone());
        for route in [RESERVED_ID.to_owned(), record.id.clone()] {
            let mut key = Vec::new();
            pack(&mut key, &[&tenant, &service, &route]);
            routes.insert(key);
            for e in &exports {
                for f in &e.functions {
                    entries += 1;
                    if entries > MAX_ENDPOINT_ENTRIES {
                        return Err(DeploymentError::CompileLimit {
                            what: "weighted endpoint entries",
                            limit: MAX_ENDPOINT_ENTRIES,
                        });
                    }
                    candidates
                        .entry((
                            tenant.clone(),
                            service.clone(),
                            route.clone(),
                            e.contract.clone(),
                            f.clone(),
                        ))
                        .or_default()
                        .push((record.revision, idx, record.weight));
                }
            }
        }
        records.push(record);
    }
    let mut endpoints = BTreeMap::new();
    for ((tenant, service, route, contract, function), mut list) in candidates {
        list.sort_by_key(|(rev, _, _)| *rev);
        let mut total: u64 = 0;
        let mut packed = Candidates::default();
        for (_, idx, w) in list {
            total = total
                .checked_add(u64::from(w))
                .ok_or(DeploymentError::CompileLimit {
                    what: "cumulative weight",
                    limit: u64::MAX,
                })?;
            packed.records.push(idx);
            packed.cumulative.push(total);
        }
        let mut key = Vec::new();
        pack(&mut key, &[&tenant, &service, &route, &contract, &function]);
        endpoints.insert(key, packed);
    }
    Ok(Snapshot {
        generation,
        records,
        routes,
        endpoints,
    })
}

/// The selection bucket hash's first eight bytes, big-endian.
pub fn selection_hash(parts: [&str; 6]) -> u64 {
    let mut h = Hasher::new();
    h.update(SELECTION_DOMAIN);
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(d.get(..8).unwrap_or(&[0; 8]));
    u64::from_be_bytes(first)
}

/// The index of the first cumulative weight strictly greater than
/// `hash % total`; `None` for no candidates.
pub fn pick(cumulative: &[u64], hash: u64) -> Option<usize> {
    let total = *cumulative.last()?;
    if total == 0 {
        return None;
    }
    let bucket = hash % total;
    let i = cumulative.partition_point(|c| *c <= bucket);
    (i < cumulative.len()).then_some(i)
}

/// Weighted selection over candidates in any order: sorted by ascending
/// revision, checked cumulative weights, then [`pick`]. `None` for no
/// candidates or a cumulative weight past `u64::MAX`.
pub fn select(candidates: &[(RevisionId, u32)], parts: [&str; 6]) -> Option<RevisionId> {
    let mut sorted = candidates.to_vec();
    sorted.sort_unstable();
    let mut total: u64 = 0;
    let mut cumulative = Vec::with_capacity(sorted.len());
    for (_, w) in &sorted {
        total = total.checked_add(u64::from(*w))?;
        cumulative.push(total);
    }
    let i = pick(&cumulative, selection_hash(parts))?;
    sorted.get(i).map(|(r, _)| *r)
}

fn check_target(target: &Target, routing_key: Option<&str>) -> Result<(), DeploymentError> {
    let fields = [
        ("tenant", Some(&target.tenant)),
        ("service", Some(&target.service)),
        ("route", target.route.as_ref()),
        ("contract", Some(&target.contract)),
        ("function", Some(&target.function)),
    ];
    for (field, value) in fields {
        if let Some(v) = value {
            if v.is_empty() || v.len() > MAX_IDENTIFIER_BYTES {
                return Err(DeploymentError::InvalidTarget {
                    field,
                    rule: "must be 1..=1024 bytes",
                });
            }
        }
    }
    if routing_key.is_some_and(|k| k.len() > MAX_ROUTING_KEY_BYTES) {
        return Err(DeploymentError::InvalidTarget {
            field: "routing key",
            rule: "is longer than 4096 bytes",
        });
    }
    Ok(())
}

impl Snapshot {
    /// The snapshot of an empty catalog at `generation`.
    pub fn empty(generation: u64) -> Self {
        Snapshot {
            generation,
            records: Vec::new(),
            routes: BTreeSet::new(),
            endpoints: BTreeMap::new(),
        }
    }

    /// Weighted endpoint index entries held.
    pub fn endpoint_entries(&self) -> usize {
        self.endpoints.values().map(|c| c.records.len()).sum()
    }

    /// Resolves `target` with an optional routing key. A missing route is
    /// `RouteUnavailable`; an existing route without the endpoint is
    /// `IncompatibleContract`; never a fallback to another route or tenant.
    pub fn resolve(
        &self,
        target: &Target,
        routing_key: Option<&str>,
    ) -> Result<ResolvedRevision, DeploymentError> {
        check_target(target, routing_key)?;
        let route = target.route.as_deref().unwrap_or(RESERVED_ID);
        let mut key = Vec::with_capacity(
            20 + target.tenant.len()
                + target.service.len()
                + route.len()
                + target.contract.len()
                + target.function.len(),
        );
        pack(&mut key, &[&target.tenant, &target.service, route]);
        if !self.routes.contains(&key) {
            return Err(DeploymentError::RouteUnavailable {
                tenant: target.tenant.clone(),
                service: target.service.clone(),
                route: route.to_owned(),
            });
        }
        pack(&mut key, &[&target.contract, &target.function]);
        let incompatible = || DeploymentError::IncompatibleContract {
            route: route.to_owned(),
            contract: target.contract.clone(),
            function: target.function.clone(),
        };
        let list = self.endpoints.get(&key).ok_or_else(incompatible)?;
        let hash = selection_hash([
            &target.tenant,
            &target.service,
            route,
            &target.contract,
            &target.function,
            routing_key.unwrap_or(""),
        ]);
        let idx = pick(&list.cumulative, hash)
            .and_then(|i| list.records.get(i))
            .and_then(|r| self.records.get(*r))
            .ok_or_else(incompatible)?;
        let mut attributes = BTreeMap::new();
        attributes.insert(ATTR_DEPLOYMENT.to_owned(), idx.deployment.clone());
        attributes.insert(ATTR_EXPORTS.to_owned(), idx.exports.clone());
        Ok(ResolvedRevision {
            deployment_id: idx.id.clone(),
            revision: idx.revision,
            release: idx.release,
            generation: idx.generation,
            catalog_generation: self.generation,
            attributes,
        })
    }
}

/// One whole immutable generation kept for several lookups, including
/// after its deployments are deleted or replaced.
#[derive(Clone, Debug)]
pub struct PinnedRoutes(Arc<Snapshot>);

impl PinnedRoutes {
    /// Pins `snapshot`.
    pub fn pin(snapshot: &Arc<Snapshot>) -> Self {
        PinnedRoutes(Arc::clone(snapshot))
    }

    /// The pinned generation.
    pub fn generation(&self) -> u64 {
        self.0.generation
    }

    /// [`Snapshot::resolve`] on the pinned generation.
    pub fn resolve(
        &self,
        target: &Target,
        routing_key: Option<&str>,
    ) -> Result<ResolvedRevision, DeploymentError> {
        self.0.resolve(target, routing_key)
    }
}
