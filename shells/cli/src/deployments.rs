//! `custos deployments …`: the local deployment catalog over a release
//! catalog.
//!
//! - `apply <root> --releases <release-root> --tenant T --manifest F
//!   [--expected-generation G]` applies (creates or updates) one deployment;
//!   `--expected-generation 0` requires it to be absent, `G > 0` requires
//!   exactly that object version. Prints the receipt: the installed record
//!   and the catalog generation that published it.
//! - `delete <root> --releases R --tenant T <id> [--expected-generation G]`.
//! - `get <root> --releases R --tenant T <id>` and `list <root> --releases
//!   R --tenant T [--service S] [--page-size N] [--page-token TOKEN]` read
//!   only (shared locks; nothing is created or synced). A list's
//!   continuation is a durable cursor: it names the last id returned and
//!   the catalog's content at its generation, so the next invocation
//!   continues exactly after it, and any publication in between expires it
//!   (exit 4) rather than skip or repeat a row.
//! - `resolve <root> --releases R --tenant T --service S [--route NAME]
//!   --contract C --function F [--routing-key K]` prints the selected
//!   revision and release.
//! - `revision --manifest F` prints a manifest's revision id and the
//!   canonical bytes it hashes (no catalog needed).
//!
//! Every command takes `--json`. Exit codes: 0 success; 1 a damaged
//! catalog or a filesystem failure; 2 bad input (an invalid manifest, a
//! limit, a bad page size, scope or token, a directory that is not a
//! catalog); 3 not found (no catalog, no such deployment, no such route or
//! endpoint, an unknown release); 4 a conflict (a stale expected
//! generation, an expired page token, another tenant's deployment); 5
//! unavailable (a live owner, an uncertain commit: committed, durability
//! unknown).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Subcommand;
use custos_core::deployment::manifest::{DeploymentManifest, MAX_MANIFEST_BYTES};
use custos_core::deployment::memory::MemoryDeployments;
use custos_core::deployment::page::PageRequest;
use custos_core::deployment::route::{ReleaseSource, Target};
use custos_core::deployment::state::{Mutation, Receipt, Request, MAX_DEPLOYMENTS};
use custos_core::deployment::DeploymentCatalog;
use custos_core::release::bounds::Bounds;
use custos_fs::deployment::{DeploymentRepoError, DeploymentRepository, ReleaseCatalog};
use custos_fs::release::{ReleaseError, ReleaseRepository};
use custos_fs::{Access, RealFs};
use serde_json::json;

use crate::out::Out;
use crate::releases::{
    code_of, inspector, is_locked, print_json, read_input, refused, retry_locked, Failure,
};

/// The catalogs and the tenant every catalog command names.
#[derive(clap::Args, Debug)]
pub struct Catalogs {
    /// The deployment catalog root.
    root: PathBuf,
    /// The release catalog root.
    #[arg(long)]
    releases: PathBuf,
    /// The authenticated tenant: every deployment read or changed is its
    /// own (`apply` refuses a manifest of another tenant).
    #[arg(long)]
    tenant: String,
}

/// `custos deployments …`.
#[derive(Subcommand, Debug)]
pub enum DeploymentsCommand {
    /// Apply one deployment (a nonexistent or empty directory becomes a new catalog).
    Apply {
        #[command(flatten)]
        at: Catalogs,
        /// The manifest (JSON). Give it more than once to apply several
        /// deployments atomically (all or none, one catalog generation).
        #[arg(long, required = true)]
        manifest: Vec<PathBuf>,
        /// 0: create only; G > 0: require exactly object version G (one
        /// manifest only).
        #[arg(long)]
        expected_generation: Option<u64>,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete one deployment.
    Delete {
        #[command(flatten)]
        at: Catalogs,
        /// The deployment id.
        id: String,
        /// G > 0: require exactly object version G.
        #[arg(long)]
        expected_generation: Option<u64>,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one deployment of a tenant (read-only).
    Get {
        #[command(flatten)]
        at: Catalogs,
        /// The deployment id.
        id: String,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List a tenant's deployments, one page (read-only).
    List {
        #[command(flatten)]
        at: Catalogs,
        /// Only this service.
        #[arg(long)]
        service: Option<String>,
        /// Records per page, 1..=1000.
        #[arg(long, default_value_t = 100)]
        page_size: u32,
        /// The previous page's continuation (printed as `next page:
        /// --page-token …`). It survives between invocations and expires
        /// with any change to the catalog (exit 4): list again from the
        /// first page.
        #[arg(long)]
        page_token: Option<String>,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Resolve an invocation target to a revision (read-only).
    Resolve {
        #[command(flatten)]
        at: Catalogs,
        /// The service.
        #[arg(long)]
        service: String,
        /// The route (a deployment id); the default route when absent.
        #[arg(long)]
        route: Option<String>,
        /// The contract (interface).
        #[arg(long)]
        contract: String,
        /// The function.
        #[arg(long)]
        function: String,
        /// The routing key.
        #[arg(long)]
        routing_key: Option<String>,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a manifest's revision id and the canonical bytes it hashes.
    Revision {
        /// The manifest (JSON).
        #[arg(long)]
        manifest: PathBuf,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
}

impl DeploymentsCommand {
    fn name(&self) -> &'static str {
        match self {
            DeploymentsCommand::Apply { .. } => "apply",
            DeploymentsCommand::Delete { .. } => "delete",
            DeploymentsCommand::Get { .. } => "get",
            DeploymentsCommand::List { .. } => "list",
            DeploymentsCommand::Resolve { .. } => "resolve",
            DeploymentsCommand::Revision { .. } => "revision",
        }
    }
}

/// Runs a deployments command (report to stdout, refusals to stderr).
pub fn run(cmd: DeploymentsCommand) -> ExitCode {
    Failure::run("deployments", cmd.name(), |out| dispatch(cmd, out))
}

fn dispatch(cmd: DeploymentsCommand, out: &mut Out) -> Result<(), Failure> {
    use DeploymentsCommand as C;
    match cmd {
        C::Apply {
            at,
            manifest,
            expected_generation,
            json,
        } => {
            let mutation = apply_mutation(&manifest, expected_generation)?;
            mutate(out, &at, mutation, json)
        }
        C::Delete {
            at,
            id,
            expected_generation,
            json,
        } => {
            let expected = expected_generation;
            mutate(out, &at, Mutation::Delete { id, expected }, json)
        }
        read => dispatch_read(read, out),
    }
}

/// The commands that only read. (A writing command handed here goes back to
/// [`dispatch`], which answers it itself.)
fn dispatch_read(cmd: DeploymentsCommand, out: &mut Out) -> Result<(), Failure> {
    use DeploymentsCommand as C;
    match cmd {
        C::Get { at, id, json } => get(out, &at, &id, json),
        C::List {
            at,
            service,
            page_size,
            page_token,
            json,
        } => {
            let repo = open(&at.root, &at.releases, Access::Read)?;
            let req = PageRequest {
                tenant: at.tenant,
                service,
                page_size,
                page_token,
            };
            list(out, &repo, &req, json)
        }
        C::Resolve {
            at,
            service,
            route,
            contract,
            function,
            routing_key,
            json,
        } => {
            let repo = open(&at.root, &at.releases, Access::Read)?;
            let target = Target {
                tenant: at.tenant,
                service,
                route,
                contract,
                function,
            };
            resolve(out, &repo, &target, routing_key.as_deref(), json)
        }
        C::Revision { manifest, json } => revision(out, &manifest, json),
        write @ (C::Apply { .. } | C::Delete { .. }) => dispatch(write, out),
    }
}

fn get(out: &mut Out, at: &Catalogs, id: &str, json: bool) -> Result<(), Failure> {
    let repo = open(&at.root, &at.releases, Access::Read)?;
    let tenant = &at.tenant;
    let d = repo.get(tenant, id).map_err(|e| failed("get", &e))?;
    let Some(d) = d else {
        return Err(refused(
            3,
            format!("NotFound: deployment-not-found: no deployment {id:?} for tenant {tenant:?}"),
        ));
    };
    if json {
        return print_json(out, &json!(d));
    }
    out.line(format!(
        "{} generation {} release {} weight {}",
        d.manifest.id, d.generation, d.manifest.release, d.manifest.route_weight
    ))?;
    out.line(format!("revision {}", d.manifest.revision_id()))?;
    Ok(())
}

fn list(
    out: &mut Out,
    repo: &DeploymentRepository<RealFs>,
    req: &PageRequest,
    json: bool,
) -> Result<(), Failure> {
    // Every invocation opens the catalog anew, so the continuation is a
    // durable cursor (it names the last id and the catalog's content at
    // its generation), not a token bound to one open.
    let page = repo.page_by_cursor(req).map_err(|e| failed("list", &e))?;
    if json {
        return print_json(out, &json!(page));
    }
    for d in &page.deployments {
        out.line(format!(
            "{}\tgeneration {}\t{}\tweight {}",
            d.manifest.id, d.generation, d.manifest.service, d.manifest.route_weight
        ))?;
    }
    out.line(format!(
        "{} deployment(s) at catalog generation {}",
        page.deployments.len(),
        page.catalog_generation
    ))?;
    if let Some(t) = page.next_page_token {
        out.line(format!("next page: --page-token {t}"))?;
    }
    Ok(())
}

fn resolve(
    out: &mut Out,
    repo: &DeploymentRepository<RealFs>,
    target: &Target,
    key: Option<&str>,
    json: bool,
) -> Result<(), Failure> {
    let r = repo
        .resolve(target, key)
        .map_err(|e| failed("resolve", &e))?;
    if json {
        return print_json(out, &json!(r));
    }
    out.line(format!(
        "{} release {} (deployment {}, generation {}, catalog generation {})",
        r.revision, r.release, r.deployment_id, r.generation, r.catalog_generation
    ))?;
    Ok(())
}

fn revision(out: &mut Out, manifest: &Path, json: bool) -> Result<(), Failure> {
    let m = read_manifest(manifest)?;
    let canonical = String::from_utf8(m.identity().canonical())
        .map_err(|_| refused(1, "the canonical form is not UTF-8"))?;
    if json {
        return print_json(
            out,
            &json!({ "revision": m.revision_id().to_string(), "canonical": canonical }),
        );
    }
    out.line(m.revision_id())?;
    out.line(canonical)?;
    Ok(())
}

/// A request of `tenant` to make `mutation`, as the command line makes it.
pub(crate) fn request(tenant: &str, mutation: Mutation) -> Request {
    Request {
        tenant: Some(tenant.to_owned()),
        mutation,
        compiled_at: 0,
        operation: None,
    }
}

/// The mutation of `deployments apply`: one manifest under an optional
/// precondition, or several applied atomically (no precondition, no more
/// than a catalog holds; checked before any file is read).
fn apply_mutation(manifests: &[PathBuf], expected: Option<u64>) -> Result<Mutation, Failure> {
    let mutation = match manifests {
        [one] => Mutation::Apply {
            manifest: Box::new(read_manifest(one)?),
            expected,
        },
        many if expected.is_some() => {
            return Err(refused(
                2,
                format!(
                    "InvalidArgument: --expected-generation names one deployment's version; {} manifests were given",
                    many.len()
                ),
            ))
        }
        many if many.len() > MAX_DEPLOYMENTS => {
            return Err(refused(
                2,
                format!(
                    "InvalidArgument: {} manifests in one batch; a catalog holds at most {MAX_DEPLOYMENTS} deployments",
                    many.len()
                ),
            ))
        }
        many => Mutation::ApplyMany {
            manifests: read_manifests(many)?,
        },
    };
    Ok(mutation)
}

/// Every manifest of a batch, read and decoded in order (a bad one
/// refuses the batch before anything is opened); progress on stderr for a
/// large batch.
fn read_manifests(paths: &[PathBuf]) -> Result<Vec<DeploymentManifest>, Failure> {
    let mut progress =
        crate::progress::Count::new("deployments apply", "manifests read", paths.len() as u64);
    let mut manifests = Vec::with_capacity(paths.len());
    for (done, path) in (1..).zip(paths) {
        manifests.push(read_manifest(path)?);
        progress.set(done);
    }
    progress.finish();
    Ok(manifests)
}

fn read_manifest(path: &Path) -> Result<DeploymentManifest, Failure> {
    let bytes = read_input(path, MAX_MANIFEST_BYTES as u64, "manifest")?;
    DeploymentManifest::decode(&bytes)
        .map_err(|e| refused(2, format!("{e} ({}: {})", path.display(), e.reason())))
}

fn exit_code(e: &DeploymentRepoError) -> u8 {
    code_of(e.class())
}

fn failed(what: &str, e: &DeploymentRepoError) -> Failure {
    let hint = match e {
        DeploymentRepoError::Uncertain(_) => "\n  what to do: the change IS committed and visible; check the disk, then read the deployment before deciding anything else",
        DeploymentRepoError::Rule(r) if r.reason() == "deployment-generation-conflict" => "\n  what to do: `custos deployments get` shows the current object generation; decide again from it",
        DeploymentRepoError::Rule(r) if r.reason() == "expired-deployment-page-token" => "\n  what to do: a publication expired the token: list again from the first page",
        _ => "",
    };
    refused(exit_code(e), format!("{what}: {e} [{}]{hint}", e.reason()))
}

/// Whether `root` is missing or an empty directory: an open that adds
/// content would create and initialize it.
fn holds_nothing(root: &Path) -> bool {
    match std::fs::read_dir(root) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Refuses one directory named as both catalogs (exit 2): they are two
/// catalogs with a lock each, so opening the second would wait out
/// `--wait` on the first, held by this very command.
fn distinct(root: &Path, releases: &Path) -> Result<(), Failure> {
    let same = matches!(
        (std::fs::canonicalize(root), std::fs::canonicalize(releases)),
        (Ok(a), Ok(b)) if a == b
    );
    if same {
        return Err(refused(
            code_of(custos_core::Class::InvalidArgument),
            format!(
                "InvalidArgument: {} is named as both the deployment catalog and the release catalog (--releases); each is a catalog of its own, in its own directory",
                root.display()
            ),
        ));
    }
    Ok(())
}

/// The release catalog behind a deployment catalog, opened to read.
fn open_releases(releases: &Path) -> Result<ReleaseRepository<RealFs>, Failure> {
    retry_locked(
        || {
            ReleaseRepository::open_as(
                Access::Read,
                RealFs,
                releases,
                Bounds::default(),
                inspector(),
            )
        },
        |e| matches!(e.root_cause(), ReleaseError::Fs(f) if is_locked(f)),
    )
    .map_err(|e| {
        refused(
            code_of(e.root_cause().class()),
            format!(
                "cannot open the release catalog at {}: {e}",
                releases.display()
            ),
        )
    })
}

fn open(
    root: &Path,
    releases: &Path,
    access: Access,
) -> Result<DeploymentRepository<RealFs>, Failure> {
    distinct(root, releases)?;
    let rel = open_releases(releases)?;
    let source: Arc<dyn ReleaseSource + Send + Sync> = Arc::new(ReleaseCatalog(Arc::new(rel)));
    retry_locked(
        || DeploymentRepository::open(RealFs, root, Arc::clone(&source), access),
        |e| matches!(e, DeploymentRepoError::Fs(f) if is_locked(f)),
    )
    .map_err(|e| {
        failed(
            &format!("cannot open the deployment catalog at {}", root.display()),
            &e,
        )
    })
}

fn mutate(out: &mut Out, at: &Catalogs, mutation: Mutation, json: bool) -> Result<(), Failure> {
    let (root, releases) = (&at.root, &at.releases);
    let req = request(&at.tenant, mutation);
    // Only an apply adds content, so only an apply may initialize a root —
    // and only an apply that is accepted: into a root that holds nothing
    // yet, the request is first decided by core's reference catalog over
    // the same releases (an empty catalog, as the new root would be), and a
    // refusal creates nothing.
    distinct(root, releases)?;
    if req.mutation.access() == Access::Write && holds_nothing(root) {
        let rel = open_releases(releases)?;
        let source: Arc<dyn ReleaseSource + Send + Sync> = Arc::new(ReleaseCatalog(Arc::new(rel)));
        MemoryDeployments::over(source)
            .mutate(req.clone())
            .map_err(|e| failed("the change was refused", &DeploymentRepoError::Rule(e)))?;
    }
    let repo = open(root, releases, req.mutation.access())?;
    let receipt = repo
        .mutate(req)
        .map_err(|e| failed("the change was refused", &e))?;
    if !matches!(receipt, Receipt::Unchanged { .. }) {
        crate::out::committed();
    }
    if json {
        return print_json(out, &json!(receipt));
    }
    match &receipt {
        Receipt::Applied {
            deployments,
            catalog_generation,
        } => {
            for d in deployments {
                out.line(format!("applied {} generation {} revision {} (catalog generation {catalog_generation})", d.manifest.id, d.generation, d.manifest.revision_id()))?;
            }
        }
        Receipt::Deleted {
            deployment,
            catalog_generation,
        } => {
            out.line(format!(
                "deleted {} (was generation {}; catalog generation {catalog_generation})",
                deployment.manifest.id, deployment.generation
            ))?;
        }
        other => out.line(format!("catalog generation {}", other.catalog_generation()))?,
    }
    Ok(())
}
