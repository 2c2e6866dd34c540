//! [`MemoryDeployments`]: the deployment catalog port over core's pure
//! desired state ([`state::decide`](super::state::decide)), compiled routes ([`route::compile`])
//! and page indexes ([`PageIndex`]), behind one lock. The reference the
//! conformance suite is written against, and a catalog for tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::page::{self, Page, PageIndex, PageRequest, MAX_PAGE_BYTES};
use super::route::{self, PinnedRoutes, ReleaseSource, ResolvedRevision, Snapshot, Target};
use super::state::{Catalog, Receipt, Request, VersionedDeployment};
use super::{DeploymentCatalog, DeploymentError};

/// One installed generation: the catalog, its compiled routes and its
/// page index, replaced whole by each publication.
#[derive(Debug)]
struct Installed {
    catalog: Catalog,
    routes: Arc<Snapshot>,
    index: PageIndex,
}

/// Distinct page-token fingerprints per instance, so that a token of one
/// catalog is refused by another.
static INSTANCES: AtomicU64 = AtomicU64::new(1);

/// The reference deployment catalog, in memory, over a release source.
/// Readers take the installed generation under the lock and read it after
/// releasing it; a mutation decides, compiles and installs under the lock.
pub struct MemoryDeployments {
    source: Arc<dyn ReleaseSource + Send + Sync>,
    live: Arc<Mutex<Arc<Installed>>>,
    instance: u64,
}

impl std::fmt::Debug for MemoryDeployments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryDeployments")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl MemoryDeployments {
    /// An empty catalog (generation 0) over `source`.
    pub fn over(source: Arc<dyn ReleaseSource + Send + Sync>) -> Self {
        let catalog = Catalog::default();
        MemoryDeployments {
            source,
            live: Arc::new(Mutex::new(Arc::new(Installed {
                index: PageIndex::build(&catalog),
                routes: Arc::new(Snapshot::empty(0)),
                catalog,
            }))),
            instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// A second handle over this catalog's installed state, as a new open
    /// instance: the memory backend's stand-in for reopening a catalog. It
    /// keeps the state across the "reopen" (nothing survives a process
    /// exit), and page tokens of other instances are invalid to it.
    #[must_use]
    pub fn reopen(&self) -> Self {
        MemoryDeployments {
            source: Arc::clone(&self.source),
            live: Arc::clone(&self.live),
            instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
        }
    }

    fn installed(&self) -> Arc<Installed> {
        Arc::clone(&self.live.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl DeploymentCatalog for MemoryDeployments {
    type Error = DeploymentError;

    fn mutate(&self, mut req: Request) -> Result<Receipt, DeploymentError> {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        let decided = route::decide_live(&live.catalog, &mut req, self.source.as_ref())?;
        if let Some((next, routes)) = decided.next {
            *live = Arc::new(Installed {
                index: PageIndex::build(&next),
                routes: Arc::new(routes),
                catalog: next,
            });
        }
        Ok(decided.receipt)
    }
    fn get(&self, tenant: &str, id: &str) -> Result<Option<VersionedDeployment>, DeploymentError> {
        Ok(self.installed().catalog.get(Some(tenant), id).cloned())
    }
    fn page(&self, req: &PageRequest) -> Result<Page, DeploymentError> {
        let live = self.installed();
        page::page(
            &live.catalog,
            &live.index,
            req,
            self.instance,
            MAX_PAGE_BYTES,
        )
    }
    fn resolve(
        &self,
        target: &Target,
        routing_key: Option<&str>,
    ) -> Result<ResolvedRevision, DeploymentError> {
        self.installed().routes.resolve(target, routing_key)
    }
    fn pin(&self) -> Result<PinnedRoutes, DeploymentError> {
        Ok(PinnedRoutes::pin(&self.installed().routes))
    }
    fn generation(&self) -> Result<u64, DeploymentError> {
        Ok(self.installed().catalog.generation)
    }
}
