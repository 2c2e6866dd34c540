//! Model of the deployment catalog (`custos_core::deployment`).
//!
//! Two writers and one reader share one repository. A writer reads the live
//! catalog (its read may be stale by the time it commits), forms a managed
//! request — a conditional or unconditional apply, a delete, or a batch
//! apply — whose precondition is the object version it read, decides it
//! outside the writer mutex, then commits under the mutex by deciding the
//! same request again against the live catalog
//! ([`custos_core::deployment::state::decide_with_ring`]). A stale route
//! generation sends it back to recompile with its original precondition.
//! At the commit point the record is renamed into place; the directory sync
//! after it may fail (`commit-durability-uncertain`), and the state is
//! installed either way. A reply may be lost, and the writer retries the
//! same operation id. Writer 1 also writes as a second tenant, `u`: its
//! deployment `c` over its own release or over tenant `t`'s, which the
//! publication's compilation must refuse
//! ([`custos_core::deployment::route::compile_admitting`]). The reader
//! resolves each tenant's default route — each must resolve only to that
//! tenant's own release — and reads pages of one entry with continuation
//! tokens, concurrently with all of it.
//!
//! The receipt ring holds one entry, so a retried operation can find its
//! receipt evicted. Every decision, compilation, resolution and page goes
//! through the real core functions; a mutant wraps one of those calls or
//! leaves out a shell step. Ghost flags (`broken`, `seen`) record what the
//! properties read.

use custos_core::deployment::manifest::{DeploymentManifest, RevisionId};
use custos_core::deployment::page::{self, PageIndex, PageRequest, PageToken};
use std::collections::BTreeSet;

use custos_core::deployment::route::{self, ReleaseFacts, Snapshot, Target};
use custos_core::deployment::state::{
    self, Catalog, Decision, Mutation, Operation, Receipt, Request, VersionedDeployment,
};
use custos_core::deployment::DeploymentError;
use custos_core::release::contract::{Contract, Function, Interface};
use custos_core::release::Sha256;
use stateright::{Model, Property};

use crate::family::MutantModel;
use crate::Bound;

/// The deployment ids in play: `a` and `b` are tenant `t`'s, `c` tenant
/// `u`'s.
pub const IDS: [&str; 3] = ["a", "b", "c"];
/// The tenants: `t` (writer 0's and writer 1's applies of `a` and `b`) and
/// `u` (writer 1's applies of `c`).
pub const TENANTS: [&str; 2] = ["t", "u"];
/// What a writer may intend: conditional applies of `a` at two weights
/// (a reweight), an unconditional apply of `a`, a conditional apply of `b`
/// (an unrelated object), a conditional delete of `a`, and a batch of both.
pub const INTENTS: [Intent; 6] = [
    Intent::Apply {
        id: 0,
        weight: 1,
        conditional: true,
    },
    Intent::Apply {
        id: 0,
        weight: 2,
        conditional: true,
    },
    Intent::Apply {
        id: 0,
        weight: 1,
        conditional: false,
    },
    Intent::Apply {
        id: 1,
        weight: 1,
        conditional: true,
    },
    Intent::Delete { id: 0 },
    Intent::Batch,
];
/// The model's receipt ring: one entry, so eviction is reachable.
pub const RING: usize = 1;
/// The open instance's page-token fingerprint.
const INSTANCE: u64 = 7;

crate::mutants! {
    /// A defect the model can be made to exhibit.
    pub enum Mutant {
        /// The commit installs the decision made before compilation: the
        /// caller's precondition and the route generation are checked only
        /// up front, not under the writer mutex.
        PreconditionOnlyBeforeCompile => "precondition-checked-only-before-compilation",
        /// The receipt is read back from the live catalog after the commit.
        ReceiptReadBack => "receipt-read-back-after-commit",
        /// Object versions count per object (previous + 1, 1 on create), so
        /// a recreated id reuses a stamp.
        StampReusedAfterDelete => "stamp-reused-after-delete",
        /// The shell refreshes an older token's generation, so a
        /// publication does not expire it.
        TokenSurvivesPublication => "token-not-expired-by-publication",
        /// The revision id hashes the whole manifest, weight included.
        WeightInRevision => "weight-included-in-revision-id",
        /// A retried operation whose receipt left the ring is decided
        /// afresh (the expiry floor is ignored).
        ReplayIgnoresFloor => "replay-ignores-receipt-expiry",
        /// A failed directory sync after the rename returns without
        /// installing the renamed state in memory.
        UncertainNotInstalled => "uncertain-commit-not-installed",
        /// The catalog is installed before its routes: a reader can see new
        /// desired state with the old snapshot.
        TornInstall => "catalog-installed-before-routes",
        /// The shell takes a release's owner from the deployments that use
        /// it (the tenant of the first deployment naming it) instead of
        /// from the release catalog, so the owner check passes for a
        /// tenant deploying another tenant's release no one else uses.
        OwnerFromDeployments => "release-owner-taken-from-deployments",
    }
}

/// What a writer intends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Intent {
    /// Apply `IDS[id]` with `weight`; conditional on the version read or not.
    Apply {
        /// Index into [`IDS`].
        id: u8,
        /// Route weight (1 or 2).
        weight: u8,
        /// Conditional on the object version read.
        conditional: bool,
    },
    /// Delete `IDS[id]`, conditional on the version read.
    Delete {
        /// Index into [`IDS`].
        id: u8,
    },
    /// Apply both ids at weight 1 in one batch.
    Batch,
    /// Tenant `u` applies `c` over its own release (`own`) or over tenant
    /// `t`'s release (a deployment that must be refused).
    Foreign {
        /// `c` names `u`'s own release.
        own: bool,
    },
}

/// An action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Writer `w` reads the live catalog, forms its request and decides it
    /// outside the mutex.
    Prepare(u8, Intent),
    /// Writer `w` commits under the mutex; `sync_fails`: the directory
    /// sync after the rename fails.
    Commit(u8, bool),
    /// Writer `w` returns its receipt to its caller.
    Return(u8),
    /// Writer `w`'s reply is lost: it retries the same operation.
    Retry(u8),
    /// The routes of the installed catalog are installed (only reachable
    /// under [`Mutant::TornInstall`]).
    InstallRoutes,
    /// The reader resolves the default route.
    Resolve,
    /// The reader reads the first page (one entry).
    FirstPage,
    /// The reader continues with its token.
    NextPage,
}

/// A writer's phase.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Nothing in flight.
    Idle,
    /// A request decided outside the mutex; `early` is that decision's next
    /// state (what the mutant installs).
    Prepared {
        /// The request.
        req: Box<Request>,
        /// The decision made outside the mutex.
        early: Option<Box<Catalog>>,
        /// This is a retry after a lost reply.
        retry: bool,
    },
    /// Committed (or replayed); the receipt waits to be returned.
    Committed {
        /// The request (for a retry).
        req: Box<Request>,
        /// The receipt the decision produced.
        receipt: Box<Receipt>,
        /// Already retried once.
        retried: bool,
    },
}

/// One writer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Writer {
    /// Its phase.
    pub phase: Phase,
    /// Operations finished.
    pub done: u8,
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The durable record (what a restart would load).
    pub disk: Catalog,
    /// The installed in-memory catalog.
    pub memory: Catalog,
    /// The installed routes.
    pub routes: Snapshot,
    /// The writers.
    pub writers: [Writer; 2],
    /// The reader's continuation token and the generation it was issued at.
    pub token: Option<(String, u64)>,
    /// Reader actions left.
    pub reader_budget: u8,
    /// Highest object stamp ever installed, per id.
    pub max_stamp: [u64; 3],
    /// First revision published, per id.
    pub revision: [Option<RevisionId>; 3],
    /// Operations committed (bit `2 * writer + seq`).
    pub committed_ops: u8,
    /// Broken rules (bits of [`rule`]).
    pub broken: u16,
    /// Outcomes reached (bits of [`seen`]).
    pub seen: u16,
}

/// Bits of [`State::broken`].
pub mod rule {
    /// A commit whose caller precondition did not hold at the commit.
    pub const STALE_COMMIT: u16 = 1;
    /// A returned receipt differs from what its decision installed.
    pub const RECEIPT: u16 = 1 << 1;
    /// A reader saw desired state and routes of different generations, or
    /// a resolution whose object version is not the catalog's.
    pub const TORN_READ: u16 = 1 << 2;
    /// An object or catalog stamp did not grow.
    pub const STAMP: u16 = 1 << 3;
    /// A token of an older generation yielded a page.
    pub const OLD_TOKEN: u16 = 1 << 4;
    /// A managed operation committed twice.
    pub const TWICE: u16 = 1 << 5;
    /// A deployment's revision changed with its weight.
    pub const REVISION: u16 = 1 << 6;
    /// The durable record went backwards.
    pub const DURABLE: u16 = 1 << 7;
    /// A route of one tenant resolved to another tenant's release.
    pub const FOREIGN_RELEASE: u16 = 1 << 8;
}

/// Bits of [`State::seen`].
pub mod seen {
    /// A stale precondition was refused.
    pub const STALE_REFUSED: u16 = 1;
    /// A receipt was returned after another writer committed.
    pub const RECEIPT_AFTER_OTHER: u16 = 1 << 1;
    /// The reader resolved a deployment.
    pub const RESOLVED: u16 = 1 << 2;
    /// A deleted id was recreated.
    pub const RECREATED: u16 = 1 << 3;
    /// An older token was refused as expired.
    pub const TOKEN_EXPIRED: u16 = 1 << 4;
    /// A retried operation was replayed from the ring.
    pub const REPLAYED: u16 = 1 << 5;
    /// A deployment was reweighted.
    pub const REWEIGHTED: u16 = 1 << 6;
    /// A directory sync failed after the rename.
    pub const UNCERTAIN: u16 = 1 << 7;
    /// A stale route generation sent a writer back to recompile.
    pub const RECOMPILED: u16 = 1 << 8;
    /// A retried operation was refused because its receipt expired.
    pub const EXPIRED_OP: u16 = 1 << 9;
    /// An apply of another tenant's release was refused.
    pub const FOREIGN_REFUSED: u16 = 1 << 10;
    /// Tenant `u`'s route resolved to its own release.
    pub const OTHER_TENANT_RESOLVED: u16 = 1 << 11;
}

/// The model: its bound and, optionally, the defect it exhibits.
#[derive(Clone, Debug)]
pub struct DeploymentModel {
    /// Operations per writer.
    pub ops: [u8; 2],
    /// Reader actions.
    pub reader_actions: u8,
    /// The defect applied, if any.
    pub mutant: Option<Mutant>,
}

/// Tenant `tenant`'s release (index into [`TENANTS`]).
fn release(tenant: usize) -> Sha256 {
    Sha256::of(&[b'r', tenant as u8])
}

/// The tenant that published `r`, as the release catalog records it.
fn owner(r: &Sha256) -> Option<&'static str> {
    (0..TENANTS.len())
        .find(|t| release(*t) == *r)
        .map(|t| TENANTS[t])
}

fn contract() -> Contract {
    Contract {
        interfaces: vec![Interface {
            docs: None,
            name: "api".into(),
            functions: vec![Function {
                docs: None,
                name: "run".into(),
                params: vec![],
                results: vec![],
            }],
        }],
    }
}

/// The release catalog: each release with its real owner.
fn source(r: &Sha256) -> Result<Option<ReleaseFacts>, String> {
    Ok(owner(r).map(|o| ReleaseFacts::eligible(o, contract())))
}

/// Tenant `t`'s deployment `IDS[id]` (`a` or `b`) of its own release.
fn manifest(id: u8, weight: u8) -> DeploymentManifest {
    DeploymentManifest {
        id: IDS[usize::from(id) % 2].into(),
        tenant: TENANTS[0].into(),
        namespace: None,
        service: "s".into(),
        release: release(0),
        route_weight: u32::from(weight),
        grants: vec![],
        budgets: Default::default(),
        placement: Default::default(),
        availability: Default::default(),
        labels: Default::default(),
        annotations: Default::default(),
    }
}

/// Tenant `u`'s deployment `c`, of its own release or of `t`'s.
fn foreign(own: bool) -> DeploymentManifest {
    DeploymentManifest {
        id: IDS[2].into(),
        tenant: TENANTS[1].into(),
        release: release(usize::from(own)),
        ..manifest(0, 1)
    }
}

fn id_index(id: &str) -> usize {
    IDS.iter().position(|i| *i == id).unwrap_or(0)
}

impl DeploymentModel {
    fn mutant(&self, m: Mutant) -> bool {
        self.mutant == Some(m)
    }

    /// The request writer `w` forms for `intent` after reading `live`.
    fn request(&self, w: u8, seq: u8, intent: Intent, live: &Catalog) -> Request {
        let observed = |id: u8| {
            live.objects
                .get(IDS[usize::from(id)])
                .map_or(0, |d| d.generation)
        };
        let mutation = match intent {
            Intent::Apply {
                id,
                weight,
                conditional,
            } => Mutation::Apply {
                manifest: Box::new(manifest(id, weight)),
                expected: conditional.then(|| observed(id)),
            },
            Intent::Delete { id } => Mutation::Delete {
                id: IDS[usize::from(id)].into(),
                expected: Some(observed(id)),
            },
            Intent::Batch => Mutation::ApplyMany {
                manifests: vec![manifest(0, 1), manifest(1, 1)],
            },
            Intent::Foreign { own } => Mutation::Apply {
                manifest: Box::new(foreign(own)),
                expected: None,
            },
        };
        let tenant = TENANTS[usize::from(matches!(intent, Intent::Foreign { .. }))];
        Request {
            tenant: Some(tenant.into()),
            mutation,
            compiled_at: live.generation,
            operation: Some(Operation {
                actor: format!("w{w}"),
                id: format!("op{seq}"),
                observed: live.generation,
            }),
        }
    }

    /// The real decision, or the mutant's variation of it.
    fn decide(&self, live: &Catalog, req: &Request) -> Result<Decision, DeploymentError> {
        let mut req = req.clone();
        if self.mutant(Mutant::ReplayIgnoresFloor) {
            if let Some(op) = req.operation.as_mut() {
                op.observed = op.observed.max(live.receipts.floor);
            }
        }
        let mut d = state::decide_with_ring(live, &req, RING)?;
        if self.mutant(Mutant::StampReusedAfterDelete) {
            restamp_per_object(live, &mut d);
        }
        Ok(d)
    }

    /// The real compilation of `c` admitting `admitted`, over the real
    /// release catalog or the mutant's.
    fn compile_admitting(
        &self,
        c: &Catalog,
        admitted: &BTreeSet<String>,
    ) -> Result<Snapshot, DeploymentError> {
        if self.mutant(Mutant::OwnerFromDeployments) {
            let by_use = |r: &Sha256| {
                Ok(c.objects
                    .values()
                    .find(|d| d.manifest.release == *r)
                    .map(|d| ReleaseFacts::eligible(&d.manifest.tenant, contract())))
            };
            return route::compile_admitting(c, &by_use, admitted);
        }
        route::compile_admitting(c, &source, admitted)
    }

    /// The real compilation of a stored generation, or the mutant's.
    fn compile(&self, c: &Catalog) -> Snapshot {
        let mut s = self
            .compile_admitting(c, &BTreeSet::new())
            .unwrap_or_else(|_| Snapshot::empty(c.generation));
        if self.mutant(Mutant::WeightInRevision) {
            for r in &mut s.records {
                if let Some(d) = c.objects.get(&r.id) {
                    r.revision = RevisionId(Sha256::of(&d.manifest.canonical()));
                }
            }
        }
        s
    }
}

/// The mutant's per-object version counter.
fn restamp_per_object(live: &Catalog, d: &mut Decision) {
    let (Some(next), Receipt::Applied { deployments, .. }) = (d.next.as_mut(), &mut d.receipt)
    else {
        return;
    };
    for r in deployments.iter_mut() {
        let g = live
            .objects
            .get(&r.manifest.id)
            .map_or(1, |o| o.generation + 1);
        r.generation = g;
        if let Some(o) = next.objects.get_mut(&r.manifest.id) {
            o.generation = g;
        }
    }
}

/// Whether `req`'s caller precondition holds on `live`.
fn precondition_holds(live: &Catalog, req: &Request) -> bool {
    let (id, expected, delete) = match &req.mutation {
        Mutation::Apply { manifest, expected } => (manifest.id.as_str(), *expected, false),
        Mutation::Delete { id, expected } => (id.as_str(), *expected, true),
        _ => return true,
    };
    let live = live.objects.get(id).map(|d| d.generation);
    match expected {
        None => !delete || live.is_some(),
        Some(0) => !delete && live.is_none(),
        Some(g) => live == Some(g),
    }
}

impl DeploymentModel {
    fn install(&self, s: &mut State, next: Catalog, sync_fails: bool) {
        if next.generation <= s.disk.generation {
            s.broken |= rule::DURABLE;
        }
        if next.generation <= s.memory.generation {
            s.broken |= rule::STAMP;
        }
        for (id, d) in &next.objects {
            let i = id_index(id);
            let changed = s.memory.objects.get(id) != Some(d);
            if !changed {
                continue;
            }
            if d.generation <= s.max_stamp[i] {
                s.broken |= rule::STAMP;
            }
            if s.max_stamp[i] > 0 && !s.memory.objects.contains_key(id) {
                s.seen |= seen::RECREATED;
            }
            if let Some(old) = s.memory.objects.get(id) {
                if old.manifest.route_weight != d.manifest.route_weight {
                    s.seen |= seen::REWEIGHTED;
                }
            }
            s.max_stamp[i] = s.max_stamp[i].max(d.generation);
        }
        s.disk = next.clone();
        if sync_fails {
            s.seen |= seen::UNCERTAIN;
            if self.mutant(Mutant::UncertainNotInstalled) {
                return;
            }
        }
        if !self.mutant(Mutant::TornInstall) {
            s.routes = self.compile(&next);
            self.note_revisions(s);
        }
        s.memory = next;
    }

    fn note_revisions(&self, s: &mut State) {
        for r in &s.routes.records {
            let i = id_index(&r.id);
            match s.revision[i] {
                None => s.revision[i] = Some(r.revision),
                Some(first) if first != r.revision => s.broken |= rule::REVISION,
                Some(_) => {}
            }
        }
    }

    fn commit(&self, s: &mut State, w: usize, sync_fails: bool) {
        let Phase::Prepared { req, early, retry } = s.writers[w].phase.clone() else {
            return;
        };
        let seq = s.writers[w].done;
        let decided = self.decide_at_commit(&s.memory, &req, early, retry);
        match decided {
            Err(DeploymentError::StaleRouteGeneration { live, .. }) => {
                self.recompile(s, w, &req, live, retry);
            }
            Err(e) => {
                if matches!(e, DeploymentError::GenerationConflict { .. }) {
                    s.seen |= seen::STALE_REFUSED;
                }
                if matches!(e, DeploymentError::OperationExpired(_)) {
                    s.seen |= seen::EXPIRED_OP;
                }
                s.writers[w].phase = Phase::Idle;
                s.writers[w].done += 1;
            }
            Ok(d) => {
                if d.replayed {
                    s.seen |= seen::REPLAYED;
                }
                if let Some(next) = &d.next {
                    // The publication's compilation admits what it applies.
                    if let Err(e) = self.compile_admitting(next, &d.applied()) {
                        if matches!(e, DeploymentError::ReleaseNotFound { .. }) {
                            s.seen |= seen::FOREIGN_REFUSED;
                        }
                        s.writers[w].phase = Phase::Idle;
                        s.writers[w].done += 1;
                        return;
                    }
                }
                if let Some(next) = d.next {
                    if !precondition_holds(&s.memory, &req) {
                        s.broken |= rule::STALE_COMMIT;
                    }
                    let bit = 1u8 << (2 * w + usize::from(seq));
                    if s.committed_ops & bit != 0 {
                        s.broken |= rule::TWICE;
                    }
                    s.committed_ops |= bit;
                    self.install(s, next, sync_fails);
                }
                s.writers[w].phase = Phase::Committed {
                    req,
                    receipt: Box::new(d.receipt),
                    retried: retry,
                };
            }
        }
    }

    /// The decision a commit acts on: the real one under the mutex, or the
    /// mutant's, which on a first attempt keeps the state decided outside it.
    fn decide_at_commit(
        &self,
        live: &Catalog,
        req: &Request,
        early: Option<Box<Catalog>>,
        retry: bool,
    ) -> Result<Decision, DeploymentError> {
        if self.mutant(Mutant::PreconditionOnlyBeforeCompile) && !retry {
            match early {
                Some(next) => {
                    let receipt =
                        self.decide(live, req)
                            .map(|d| d.receipt)
                            .unwrap_or(Receipt::Published {
                                catalog_generation: next.generation,
                            });
                    Ok(Decision {
                        next: Some(*next),
                        receipt,
                        replayed: false,
                    })
                }
                None => self.decide(live, req),
            }
        } else {
            self.decide(live, req)
        }
    }

    /// Sends writer `w` back to prepare `req` again, compiled at the live
    /// route generation `live`.
    fn recompile(&self, s: &mut State, w: usize, req: &Request, live: u64, retry: bool) {
        s.seen |= seen::RECOMPILED;
        let mut again = Box::new(req.clone());
        again.compiled_at = live;
        let early = self
            .decide(&s.memory, &again)
            .ok()
            .and_then(|d| d.next)
            .map(Box::new);
        s.writers[w].phase = Phase::Prepared {
            req: again,
            early,
            retry,
        };
    }

    fn give_back(&self, s: &mut State, w: usize) {
        let Phase::Committed { receipt, .. } = s.writers[w].phase.clone() else {
            return;
        };
        let returned = if self.mutant(Mutant::ReceiptReadBack) {
            read_back(&s.memory, &receipt)
        } else {
            (*receipt).clone()
        };
        if returned != *receipt {
            s.broken |= rule::RECEIPT;
        }
        if s.memory.generation > receipt.catalog_generation() {
            s.seen |= seen::RECEIPT_AFTER_OTHER;
        }
        s.writers[w].phase = Phase::Idle;
        s.writers[w].done += 1;
    }

    /// The reader resolves each tenant's default route.
    fn resolve(&self, s: &mut State) {
        if s.routes.generation != s.memory.generation {
            s.broken |= rule::TORN_READ;
        }
        for tenant in TENANTS {
            let target = Target {
                tenant: tenant.into(),
                service: "s".into(),
                route: None,
                contract: "api".into(),
                function: "run".into(),
            };
            let Ok(r) = s.routes.resolve(&target, Some("key")) else {
                continue;
            };
            s.seen |= seen::RESOLVED;
            if tenant != TENANTS[0] {
                s.seen |= seen::OTHER_TENANT_RESOLVED;
            }
            if s.memory.objects.get(&r.deployment_id).map(|d| d.generation) != Some(r.generation) {
                s.broken |= rule::TORN_READ;
            }
            if owner(&r.release) != Some(tenant) {
                s.broken |= rule::FOREIGN_RELEASE;
            }
        }
    }

    fn read_page(&self, s: &mut State, continue_with: Option<(String, u64)>) {
        let index = PageIndex::build(&s.memory);
        let mut token = continue_with.as_ref().map(|(t, _)| t.clone());
        if self.mutant(Mutant::TokenSurvivesPublication) {
            if let Some(t) = token.as_mut() {
                if let Ok(mut decoded) = PageToken::decode(t) {
                    decoded.generation = decoded.generation.max(s.memory.generation);
                    *t = decoded.encode();
                }
            }
        }
        let req = PageRequest {
            tenant: "t".into(),
            service: None,
            page_size: 1,
            page_token: token,
        };
        let result = page::page(&s.memory, &index, &req, INSTANCE, page::MAX_PAGE_BYTES);
        s.token = None;
        match (&continue_with, result) {
            (Some((_, g)), Ok(_)) if *g < s.memory.generation => s.broken |= rule::OLD_TOKEN,
            (Some(_), Err(DeploymentError::PageTokenExpired)) => s.seen |= seen::TOKEN_EXPIRED,
            (None, Ok(p)) => s.token = p.next_page_token.map(|t| (t, p.catalog_generation)),
            _ => {}
        }
    }
}

/// The mutant's receipt: the live record of the same id, read after the
/// commit.
fn read_back(live: &Catalog, receipt: &Receipt) -> Receipt {
    match receipt {
        Receipt::Applied { deployments, .. } => Receipt::Applied {
            deployments: deployments
                .iter()
                .map(|d| {
                    live.objects
                        .get(&d.manifest.id)
                        .cloned()
                        .unwrap_or_else(|| VersionedDeployment {
                            manifest: d.manifest.clone(),
                            generation: 0,
                        })
                })
                .collect(),
            catalog_generation: live.generation,
        },
        other => other.clone(),
    }
}

impl Model for DeploymentModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let writer = Writer {
            phase: Phase::Idle,
            done: 0,
        };
        vec![State {
            disk: Catalog::default(),
            memory: Catalog::default(),
            routes: Snapshot::empty(0),
            writers: [writer.clone(), writer],
            token: None,
            reader_budget: self.reader_actions,
            max_stamp: [0; 3],
            revision: [None; 3],
            committed_ops: 0,
            broken: 0,
            seen: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (w, writer) in s.writers.iter().enumerate() {
            let w = w as u8;
            match &writer.phase {
                Phase::Idle if writer.done < self.ops[usize::from(w)] => {
                    // Writer 1 neither reweights nor applies unconditionally;
                    // it alone also writes as tenant `u`.
                    let intents: &[Intent] = if w == 0 { &INTENTS } else { &INTENTS[3..] };
                    for &intent in intents {
                        actions.push(Action::Prepare(w, intent));
                    }
                    if w == 1 {
                        for own in [true, false] {
                            actions.push(Action::Prepare(w, Intent::Foreign { own }));
                        }
                    }
                }
                Phase::Idle => {}
                Phase::Prepared { .. } => {
                    actions.push(Action::Commit(w, false));
                    // The sync failure after the rename is writer 0's.
                    if w == 0 {
                        actions.push(Action::Commit(w, true));
                    }
                }
                Phase::Committed { retried, .. } => {
                    actions.push(Action::Return(w));
                    // Writer 0's replies may be lost.
                    if w == 0 && !retried {
                        actions.push(Action::Retry(w));
                    }
                }
            }
        }
        if s.routes.generation != s.memory.generation {
            actions.push(Action::InstallRoutes);
        }
        if s.reader_budget > 0 {
            actions.push(Action::Resolve);
            actions.push(Action::FirstPage);
            if s.token.is_some() {
                actions.push(Action::NextPage);
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Prepare(w, intent) => {
                let wi = usize::from(w);
                let req = self.request(w, s.writers[wi].done, intent, &s.memory);
                match self.decide(&s.memory, &req) {
                    Ok(d) => {
                        s.writers[wi].phase = Phase::Prepared {
                            req: Box::new(req),
                            early: d.next.map(Box::new),
                            retry: false,
                        }
                    }
                    Err(_) => s.writers[wi].done += 1,
                }
            }
            Action::Commit(w, sync_fails) => self.commit(&mut s, usize::from(w), sync_fails),
            Action::Return(w) => self.give_back(&mut s, usize::from(w)),
            Action::Retry(w) => {
                let wi = usize::from(w);
                let Phase::Committed { req, .. } = s.writers[wi].phase.clone() else {
                    return None;
                };
                let mut again = req;
                again.compiled_at = s.memory.generation;
                s.writers[wi].phase = Phase::Prepared {
                    req: again,
                    early: None,
                    retry: true,
                };
            }
            Action::InstallRoutes => {
                s.routes = self.compile(&s.memory);
                self.note_revisions(&mut s);
            }
            Action::Resolve => {
                s.reader_budget -= 1;
                self.resolve(&mut s);
            }
            Action::FirstPage => {
                s.reader_budget -= 1;
                self.read_page(&mut s, None);
            }
            Action::NextPage => {
                s.reader_budget -= 1;
                let t = s.token.clone();
                self.read_page(&mut s, t);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = safety();
        properties.extend(reachable());
        properties
    }
}

/// The safety rules (`always`), in report order.
fn safety() -> Vec<Property<DeploymentModel>> {
    vec![
        Property::<DeploymentModel>::always("a stale precondition never commits", |_, s| {
            s.broken & rule::STALE_COMMIT == 0
        }),
        Property::<DeploymentModel>::always(
            "a receipt is exactly the state its decision produced",
            |_, s| s.broken & rule::RECEIPT == 0,
        ),
        Property::<DeploymentModel>::always(
            "readers see a complete old or complete new catalog",
            |_, s| s.broken & rule::TORN_READ == 0,
        ),
        Property::<DeploymentModel>::always("object and catalog stamps only grow", |_, s| {
            s.broken & rule::STAMP == 0
        }),
        Property::<DeploymentModel>::always(
            "a token from an older generation never yields a page",
            |_, s| s.broken & rule::OLD_TOKEN == 0,
        ),
        Property::<DeploymentModel>::always("a managed operation commits at most once", |_, s| {
            s.broken & rule::TWICE == 0
        }),
        Property::<DeploymentModel>::always("reweighting never changes a revision id", |_, s| {
            s.broken & rule::REVISION == 0
        }),
        Property::<DeploymentModel>::always("the durable record never goes backwards", |_, s| {
            s.broken & rule::DURABLE == 0
        }),
        Property::<DeploymentModel>::always(
            "a route of tenant T resolves only to T's releases",
            |_, s| s.broken & rule::FOREIGN_RELEASE == 0,
        ),
    ]
}

/// The behaviours the model must reach (`sometimes`), in report order.
fn reachable() -> Vec<Property<DeploymentModel>> {
    vec![
        Property::<DeploymentModel>::sometimes("a stale precondition is refused", |_, s| {
            s.seen & seen::STALE_REFUSED != 0
        }),
        Property::<DeploymentModel>::sometimes(
            "a receipt is returned after another writer committed",
            |_, s| s.seen & seen::RECEIPT_AFTER_OTHER != 0,
        ),
        Property::<DeploymentModel>::sometimes("a reader resolves a deployment", |_, s| {
            s.seen & seen::RESOLVED != 0
        }),
        Property::<DeploymentModel>::sometimes("a deleted id is recreated", |_, s| {
            s.seen & seen::RECREATED != 0
        }),
        Property::<DeploymentModel>::sometimes("an older token is refused as expired", |_, s| {
            s.seen & seen::TOKEN_EXPIRED != 0
        }),
        Property::<DeploymentModel>::sometimes(
            "a retried operation is replayed from the ring",
            |_, s| s.seen & seen::REPLAYED != 0,
        ),
        Property::<DeploymentModel>::sometimes(
            "a retried operation is refused once its receipt expired",
            |_, s| s.seen & seen::EXPIRED_OP != 0,
        ),
        Property::<DeploymentModel>::sometimes("a deployment is reweighted", |_, s| {
            s.seen & seen::REWEIGHTED != 0
        }),
        Property::<DeploymentModel>::sometimes(
            "a directory sync fails after the rename",
            |_, s| s.seen & seen::UNCERTAIN != 0,
        ),
        Property::<DeploymentModel>::sometimes("another tenant's release is refused", |_, s| {
            s.seen & seen::FOREIGN_REFUSED != 0
        }),
        Property::<DeploymentModel>::sometimes(
            "a second tenant resolves its own release",
            |_, s| s.seen & seen::OTHER_TENANT_RESOLVED != 0,
        ),
        Property::<DeploymentModel>::sometimes(
            "a stale route generation sends a writer to recompile",
            |_, s| s.seen & seen::RECOMPILED != 0,
        ),
    ]
}

impl MutantModel for DeploymentModel {
    type Mutant = Mutant;
    const NAME: &'static str = "deployment";
    const SUMMARY: &'static str = "versioned desired state: preconditions at commit, exact receipts, complete readers, growing stamps, expiring tokens, one commit per operation, a tenant's routes only to its own releases";

    fn at(bound: Bound) -> Result<Self, String> {
        let (ops, reader_actions) = match bound {
            Bound::Ci => ([2, 1], 2),
            Bound::Deep => ([2, 2], 2),
        };
        Ok(DeploymentModel {
            ops,
            reader_actions,
            mutant: None,
        })
    }

    fn mutant_slot(&mut self) -> &mut Option<Mutant> {
        &mut self.mutant
    }

    fn describe_bound(&self) -> String {
        format!(
            "writers with {} and {} managed operations, 1 reader x {} actions, receipt ring {RING}",
            self.ops[0], self.ops[1], self.reader_actions
        )
    }
}
