//! The deployment catalog's rules: deployment identity, logical
//! revisions, route compilation, deterministic weighted selection,
//! versioned desired state with generation preconditions, and bounded
//! tenant pages with continuation tokens.
//!
//! Everything here is pure: the filesystem shell (`custos-fs`) reads the
//! catalog record, asks these functions and writes what they decide. The
//! release catalog is reached only through the [`route::ReleaseSource`]
//! port. What a repository offers its callers is the port
//! [`DeploymentCatalog`]; [`memory::MemoryDeployments`] is the reference
//! built on these functions, and `custos-conformance::deployment_suite!`
//! says what a correct implementation does.
//!
//! - [`manifest`] — [`DeploymentManifest`]: validation, the bounded decoder,
//!   the canonical (RFC 8785) form and [`RevisionId`].
//! - [`state`] — [`state::Catalog`], the versioned desired state, and its
//!   one decision [`state::decide`] (apply, batch apply, delete, snapshot
//!   publication; managed operations replayed from a bounded receipt ring).
//! - [`route`] — compilation into an immutable [`route::Snapshot`],
//!   resolution of an invocation target into an owned
//!   [`route::ResolvedRevision`], and [`route::select`].
//! - [`page`] — the ordered tenant / service indexes, page requests and
//!   their fixed-size tokens.
//! - [`memory`] — [`memory::MemoryDeployments`], the port over these rules
//!   behind one lock.
//!
//! Every refusal is a [`DeploymentError`]: its [`class`](DeploymentError::class)
//! is the class a caller retries or reports on, its
//! [`reason`](DeploymentError::reason) the stable reason string.

pub mod manifest;
pub mod memory;
pub mod page;
pub mod record;
pub mod route;
pub mod state;
#[cfg(test)]
mod tests;

use thiserror::Error;

pub use crate::class::Class;

pub use manifest::{DeploymentManifest, RevisionId};

use crate::release::Sha256;
use page::{Page, PageRequest};
use route::{PinnedRoutes, ResolvedRevision, Target};
use state::{Receipt, Request, VersionedDeployment};

/// The deployment catalog port: one mutation (decided by [`state::decide`]
/// and published, or refused with nothing changed) and the readers of the
/// installed generation. Implemented by [`memory::MemoryDeployments`] and
/// the filesystem repository (`custos_fs::deployment::DeploymentRepository`);
/// `custos-conformance::deployment_suite!` checks an implementation.
///
/// Every method takes `&self`: an implementation serializes its writers
/// itself. A failure is the implementation's own [`Self::Error`], which
/// carries the rule's refusal ([`Refusal::refusal`]) when a rule refused
/// and the backend's own failure (an I/O error, an uncertain commit)
/// otherwise.
pub trait DeploymentCatalog {
    /// What a call fails with.
    type Error: Refusal + std::error::Error;

    /// Decides `req` against the live catalog (the implementation sets
    /// [`Request::compiled_at`]) and publishes the result; answers the
    /// decision's own receipt.
    fn mutate(&self, req: Request) -> Result<Receipt, Self::Error>;
    /// The deployment `id` in `tenant`'s scope, `None` when absent there.
    fn get(&self, tenant: &str, id: &str) -> Result<Option<VersionedDeployment>, Self::Error>;
    /// One page of `req.tenant`'s deployments ([`page::page`]).
    fn page(&self, req: &PageRequest) -> Result<Page, Self::Error>;
    /// Resolves `target` against the installed generation.
    fn resolve(
        &self,
        target: &Target,
        routing_key: Option<&str>,
    ) -> Result<ResolvedRevision, Self::Error>;
    /// Pins the installed generation's routes.
    fn pin(&self) -> Result<PinnedRoutes, Self::Error>;
    /// The installed catalog generation.
    fn generation(&self) -> Result<u64, Self::Error>;
}

/// A failure that may be a rule's refusal.
pub trait Refusal {
    /// The rule's refusal this failure is, `None` for a backend's own
    /// failure (nothing about the request was decided).
    fn refusal(&self) -> Option<&DeploymentError>;
}

impl Refusal for DeploymentError {
    fn refusal(&self) -> Option<&DeploymentError> {
        Some(self)
    }
}

/// Why a deployment request was refused. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
pub enum DeploymentError {
    /// A document longer than the manifest decoder's bound.
    #[error("ResourceExhausted: deployment manifest is {len} bytes, over the {limit}-byte bound")]
    ManifestTooLarge {
        /// Its length.
        len: u64,
        /// The bound.
        limit: u64,
    },
    /// Not a JSON manifest.
    #[error("InvalidArgument: malformed deployment manifest: {0}")]
    MalformedManifest(String),
    /// A field breaking its rule.
    #[error("InvalidArgument: deployment field {field} {rule}")]
    InvalidManifest {
        /// The field.
        field: &'static str,
        /// The rule.
        rule: &'static str,
    },
    /// A route weight outside 1..=10,000.
    #[error("InvalidArgument: route weight {0} is outside 1..=10000")]
    InvalidWeight(u32),
    /// The id `default` names the default route.
    #[error("InvalidArgument: the deployment id \"default\" is reserved for the default route")]
    ReservedId,
    /// A batch naming one id twice.
    #[error("InvalidArgument: deployment {0:?} appears twice in one batch")]
    DuplicateId(String),
    /// An update changing an existing deployment's tenant, namespace or
    /// service.
    #[error("InvalidArgument: deployment {id:?} cannot change its {field}")]
    ScopeChange {
        /// The deployment.
        id: String,
        /// `namespace` or `service`.
        field: &'static str,
    },
    /// A manifest whose tenant is not the caller's, or an id owned by
    /// another tenant.
    #[error("PermissionDenied: deployment {id:?} is outside tenant {tenant:?}")]
    TenantMismatch {
        /// The deployment.
        id: String,
        /// The caller's tenant.
        tenant: String,
    },
    /// No such deployment in the caller's scope.
    #[error("NotFound: no deployment {0:?}")]
    NotFound(String),
    /// The caller's expected object generation is not the live one.
    #[error("StateConflict: deployment {id:?} expected generation {expected}, live generation {}", live_text(*.live))]
    GenerationConflict {
        /// The deployment.
        id: String,
        /// The caller's expectation.
        expected: u64,
        /// The live generation, `None` when absent.
        live: Option<u64>,
    },
    /// The catalog moved since the compilation began: recompile with the
    /// caller's original precondition.
    #[error("StateConflict: compiled at generation {compiled}, catalog is at {live}")]
    StaleRouteGeneration {
        /// The generation compiled from.
        compiled: u64,
        /// The live generation.
        live: u64,
    },
    /// The catalog generation would pass `u64::MAX`.
    #[error("ResourceExhausted: the catalog generation is exhausted")]
    GenerationExhausted,
    /// More deployments than the catalog holds.
    #[error("ResourceExhausted: more than {0} deployments")]
    TooManyDeployments(usize),
    /// Deployments of one tenant and service disagree on the namespace.
    #[error("PermissionDenied: tenant {tenant:?} service {service:?} has deployments in more than one namespace")]
    AmbiguousNamespace {
        /// The tenant.
        tenant: String,
        /// The service.
        service: String,
    },
    /// A release exporting a contract (interface) id twice.
    #[error("InvalidArgument: release {release} exports contract {contract:?} twice")]
    DuplicateContract {
        /// The release.
        release: Sha256,
        /// The contract id.
        contract: String,
    },
    /// A contract exporting a function id twice.
    #[error("InvalidArgument: release {release} contract {contract:?} exports function {function:?} twice")]
    DuplicateFunction {
        /// The release.
        release: Sha256,
        /// The contract.
        contract: String,
        /// The function.
        function: String,
    },
    /// An exported contract without function metadata.
    #[error("InvalidArgument: release {release} exports contract {contract:?} without functions")]
    IncompleteContract {
        /// The release.
        release: Sha256,
        /// The contract.
        contract: String,
    },
    /// Two deployments of one tenant and service with different schemas
    /// for one contract id.
    #[error("InvalidArgument: tenant {tenant:?} service {service:?} has two schemas for contract {contract:?}")]
    SchemaConflict {
        /// The tenant.
        tenant: String,
        /// The service.
        service: String,
        /// The contract.
        contract: String,
    },
    /// A compilation bound (endpoint entries, retained metadata).
    #[error("ResourceExhausted: route compilation exceeds its {what} bound of {limit}")]
    CompileLimit {
        /// Which bound.
        what: &'static str,
        /// The bound.
        limit: u64,
    },
    /// The deploying tenant sees no release of that digest: none exists,
    /// or it is another tenant's or a trusted-local one (one answer for
    /// all three, so no tenant learns of another's digests).
    #[error("NotFound: no release {release} in the deploying tenant's scope")]
    ReleaseNotFound {
        /// The release the manifest names.
        release: Sha256,
    },
    /// The deploying tenant's release was revoked: it is never served
    /// again, so no deployment may newly use it.
    #[error("FailedPrecondition: release {release} is revoked and is never deployed again")]
    ReleaseRevoked {
        /// The release.
        release: Sha256,
    },
    /// The deploying tenant's release was retired.
    #[error("FailedPrecondition: release {release} is retired and is never deployed again")]
    ReleaseRetired {
        /// The release.
        release: Sha256,
    },
    /// The release source could not supply a release.
    #[error("Unavailable: release {release} could not be read: {detail}")]
    ReleaseUnavailable {
        /// The release.
        release: Sha256,
        /// Why.
        detail: String,
    },
    /// No route of that name.
    #[error("RouteUnavailable: no route {route:?} for tenant {tenant:?} service {service:?}")]
    RouteUnavailable {
        /// The tenant.
        tenant: String,
        /// The service.
        service: String,
        /// The route.
        route: String,
    },
    /// The route exports no such contract and function.
    #[error("IncompatibleContract: route {route:?} exports no {contract:?}.{function:?}")]
    IncompatibleContract {
        /// The route.
        route: String,
        /// The contract.
        contract: String,
        /// The function.
        function: String,
    },
    /// An invocation target or routing key outside its bounds.
    #[error("InvalidArgument: invocation {field} {rule}")]
    InvalidTarget {
        /// The field.
        field: &'static str,
        /// The rule.
        rule: &'static str,
    },
    /// A page size outside 1..=max.
    #[error("InvalidArgument: page size {0} is outside 1..=max_page_size")]
    PageSize(u32),
    /// A page's tenant or service is not an identifier.
    #[error("InvalidArgument: invalid page scope")]
    PageScope,
    /// A token that does not decode, or is bound to another scope or
    /// repository instance.
    #[error("InvalidArgument: invalid page token")]
    PageToken,
    /// A token from an older catalog generation of this instance.
    #[error("StateConflict: the page token expired with a publication; restart the listing")]
    PageTokenExpired,
    /// The first record alone exceeds the page's byte budget.
    #[error("ResourceExhausted: a record of {len} bytes exceeds the {limit}-byte page budget")]
    PageByteLimit {
        /// The record's encoded length.
        len: u64,
        /// The budget.
        limit: u64,
    },
    /// A managed operation id reused by the same actor for another request.
    #[error("StateConflict: operation {0:?} was already used for another request")]
    OperationConflict(String),
    /// A managed operation whose receipt may have left the ring: its
    /// outcome cannot be told, so it is not run again.
    #[error("StateConflict: operation {0:?} is older than the retained receipts")]
    OperationExpired(String),
    /// A snapshot that is not the exact next generation compiled from the
    /// current desired state.
    #[error("StateConflict: snapshot is not the next generation of the current catalog")]
    StaleSnapshot,
}

crate::reasons! {
    /// The stable reason string.
    DeploymentError {
        ManifestTooLarge => "deployment-manifest-too-large",
        MalformedManifest => "invalid-deployment",
        InvalidManifest => "invalid-deployment",
        InvalidWeight => "invalid-route-weight",
        ReservedId => "reserved-deployment-id",
        DuplicateId => "duplicate-deployment-id",
        ScopeChange => "deployment-scope-immutable",
        TenantMismatch => "deployment-tenant-mismatch",
        NotFound => "deployment-not-found",
        GenerationConflict => "deployment-generation-conflict",
        StaleRouteGeneration => "stale-route-generation",
        GenerationExhausted => "deployment-generation-exhausted",
        TooManyDeployments => "deployment-limit",
        AmbiguousNamespace => "ambiguous-deployment-namespace",
        DuplicateContract => "duplicate-contract-id",
        DuplicateFunction => "duplicate-function-id",
        IncompleteContract => "incomplete-contract-metadata",
        SchemaConflict => "contract-schema-conflict",
        CompileLimit => "route-compile-limit",
        ReleaseNotFound => "release-not-found",
        ReleaseRevoked => "release-revoked",
        ReleaseRetired => "release-retired",
        ReleaseUnavailable => "release-unavailable",
        RouteUnavailable => "route-unavailable",
        IncompatibleContract => "incompatible-contract",
        InvalidTarget => "invalid-invocation-target",
        PageSize => "invalid-deployment-page-size",
        PageScope => "invalid-deployment-page-scope",
        PageToken => "invalid-deployment-page-token",
        PageTokenExpired => "expired-deployment-page-token",
        PageByteLimit => "deployment-page-byte-limit",
        OperationConflict => "deployment-operation-conflict",
        OperationExpired => "deployment-operation-expired",
        StaleSnapshot => "stale-route-snapshot",
    }
}

fn live_text(live: Option<u64>) -> String {
    live.map_or_else(|| "none (absent)".to_owned(), |g| g.to_string())
}

impl DeploymentError {
    /// The refusal's class.
    pub fn class(&self) -> Class {
        use DeploymentError as E;
        match self {
            E::ManifestTooLarge { .. }
            | E::GenerationExhausted
            | E::TooManyDeployments(_)
            | E::CompileLimit { .. }
            | E::PageByteLimit { .. } => Class::ResourceExhausted,
            E::TenantMismatch { .. } | E::AmbiguousNamespace { .. } => Class::PermissionDenied,
            E::NotFound(_) | E::ReleaseNotFound { .. } => Class::NotFound,
            E::ReleaseRevoked { .. } | E::ReleaseRetired { .. } => Class::FailedPrecondition,
            E::GenerationConflict { .. }
            | E::StaleRouteGeneration { .. }
            | E::PageTokenExpired
            | E::OperationConflict(_)
            | E::OperationExpired(_)
            | E::StaleSnapshot => Class::StateConflict,
            E::ReleaseUnavailable { .. } => Class::Unavailable,
            E::RouteUnavailable { .. } => Class::RouteUnavailable,
            E::IncompatibleContract { .. } => Class::IncompatibleContract,
            E::MalformedManifest(_)
            | E::InvalidManifest { .. }
            | E::InvalidWeight(_)
            | E::ReservedId
            | E::DuplicateId(_)
            | E::ScopeChange { .. }
            | E::DuplicateContract { .. }
            | E::DuplicateFunction { .. }
            | E::IncompleteContract { .. }
            | E::SchemaConflict { .. }
            | E::InvalidTarget { .. }
            | E::PageSize(_)
            | E::PageScope
            | E::PageToken => Class::InvalidArgument,
        }
    }

    /// True for the refusals a caller may retry after re-reading.
    pub fn retryable(&self) -> bool {
        matches!(self.class(), Class::StateConflict | Class::Unavailable)
    }
}
