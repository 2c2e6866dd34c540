//! `custos releases publish|list|show|verify`: the local release catalog
//! from the command line, through custos-fs's
//! `ReleaseRepository` on the real filesystem with the default bounds.
//!
//! The component inspector is the Wasm shell's (`WasmInspector`) when the
//! `wasm` feature is on: the component is validated and its contract
//! extracted, which a declared contract must equal (and which is used when
//! none is declared). Without it, it is the trusted-local one core provides
//! (`MagicOnly`: the bytes must start with the Wasm magic; nothing is
//! extracted, so the declared contract is taken as given).
//!
//! Opening a catalog is its full verification: every completed release is
//! read back and checked (digests, completion record, manifest, contract).
//! The read commands (`list`, `show`, `verify`) open it **read-only**: they
//! need an initialized catalog (its `INITIALIZED` marker), share the lock
//! with other readers, and create, clean, sync or recover nothing. The
//! writing commands (`publish`, `revoke`, `retire`) take the exclusive lock;
//! `publish` initializes a nonexistent or empty directory, and no command
//! adopts a non-empty directory that is not a catalog — it is refused and
//! left byte-untouched. `upgrade` adopts a catalog written before the
//! marker existed, after verifying it.
//!
//! Every input file is read through a limit on the bytes actually read
//! (the limit plus one), never on the size the file reports: a pipe or a
//! device (`/dev/zero`) is refused at the limit.
//!
//! Names from stored manifests are printed escaped (control characters as
//! `\n`, `\u{1b}`), so a release cannot forge table rows or terminal
//! sequences.
//!
//! Exit codes: 0 success; 1 a damaged catalog or a filesystem failure;
//! 2 bad input (an unreadable file, an invalid manifest or contract, a
//! limit, a directory that is not a catalog); 3 not found (no catalog, no
//! such release); 4 a conflict or an ineligible release; 5 the catalog is
//! unavailable (owned by a live process, a replaced lock file, a pending
//! publication).

use custos_core::Class;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Subcommand;
use custos_core::release::bounds::Bounds;
use custos_core::release::contract::{ComponentInspector, Contract};
use custos_core::release::lifecycle::{Membership, Outcome, OutcomeKind};
use custos_core::release::metadata::Descriptor;
use custos_core::release::protocol::{Plan, ProtocolError};
use custos_core::release::Sha256;
use custos_core::root::printable;
use custos_fs::release::{CatalogPage, ReleaseError, ReleaseRepository};
use custos_fs::{Access, FsError, OpenPlan, RealFs, LOCK_MISSING, LOCK_REPLACED, ROOT_LOCKED};

pub(crate) use crate::fail::{read_input, refused, Failure};
use crate::out::Out;

/// What `show` says of an argument that names no release.
const NOT_A_RELEASE: &str = "neither a digest (sha256:<64 hex>) nor a reference (name@version)";

/// The largest manifest or contract file the command reads.
const MAX_INPUT_FILE: u64 = 4 * 1024 * 1024;

/// One release of a catalog, as `show`, `revoke` and `retire` name it.
#[derive(clap::Args, Debug)]
pub struct Named {
    /// The catalog root.
    root: PathBuf,
    /// A digest or a reference.
    release: String,
    /// The tenant whose reference `release` is (references are per
    /// tenant); omit it for a trusted-local release's. A digest needs
    /// none.
    #[arg(long)]
    tenant: Option<String>,
}

/// `custos releases …`.
#[derive(Subcommand, Debug)]
pub enum ReleasesCommand {
    /// Publish a release (a nonexistent or empty directory becomes a new catalog).
    Publish {
        /// The catalog root.
        root: PathBuf,
        /// The manifest (JSON: name, version, tenant, service,
        /// component_digest, exports).
        #[arg(long)]
        manifest: PathBuf,
        /// The component bytes (a file, or a pipe such as /dev/stdin).
        #[arg(long)]
        component: PathBuf,
        /// The contract metadata (JSON); by default the one the inspector
        /// extracts (with the `wasm` feature), else none (no exports).
        #[arg(long)]
        contract: Option<PathBuf>,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List a tenant's releases (narrowed to a service), historical ones
    /// included; without --tenant, the trusted-local releases (published
    /// without a tenant).
    List {
        /// The catalog root.
        root: PathBuf,
        /// The tenant; omit it for the tenant-less trusted-local releases.
        #[arg(long)]
        tenant: Option<String>,
        /// The service (requires --tenant).
        #[arg(long, requires = "tenant")]
        service: Option<String>,
        /// Releases per page, 1..=1000.
        #[arg(long, default_value_t = 1000,
              value_parser = clap::value_parser!(u64).range(1..=1000))]
        page_size: u64,
        /// The previous page's continuation (printed as `next page:
        /// --page-token c1-…`). It survives between invocations and expires
        /// with any publication, revocation or retirement (exit 4): list
        /// again from the first page.
        #[arg(long)]
        page_token: Option<String>,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one release, fetched and verified, by digest (sha256:…) or reference (name@version).
    Show {
        #[command(flatten)]
        named: Named,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Verify the catalog in full (read-only) and print what it holds.
    Verify {
        /// The catalog root.
        root: PathBuf,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a release: never served again, never undone by republication.
    Revoke {
        #[command(flatten)]
        named: Named,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Retire a release: no longer served (a revoked one stays revoked).
    Retire {
        #[command(flatten)]
        named: Named,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Adopt a catalog written before the INITIALIZED marker existed:
    /// verify every release, add lifecycle state if it has none (every
    /// release a member), then write the marker. Stop every process that
    /// uses the catalog first.
    Upgrade {
        /// The catalog root.
        root: PathBuf,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
}

impl ReleasesCommand {
    fn name(&self) -> &'static str {
        match self {
            ReleasesCommand::Publish { .. } => "publish",
            ReleasesCommand::List { .. } => "list",
            ReleasesCommand::Show { .. } => "show",
            ReleasesCommand::Verify { .. } => "verify",
            ReleasesCommand::Revoke { .. } => "revoke",
            ReleasesCommand::Retire { .. } => "retire",
            ReleasesCommand::Upgrade { .. } => "upgrade",
        }
    }
}

/// Runs a releases command: its report to stdout through [`Out`] (a closed
/// pipe or a full device ends it without a panic), refusals to stderr.
pub fn run(cmd: ReleasesCommand) -> ExitCode {
    Failure::run("releases", cmd.name(), |out| dispatch(cmd, out))
}

/// Runs one releases command.
fn dispatch(cmd: ReleasesCommand, out: &mut Out) -> Result<(), Failure> {
    match cmd {
        ReleasesCommand::Publish {
            root,
            manifest,
            component,
            contract,
            json,
        } => publish(out, &root, &manifest, &component, contract.as_deref(), json),
        ReleasesCommand::List {
            root,
            tenant,
            service,
            page_size,
            page_token,
            json,
        } => {
            let page = PageAsk {
                size: page_size,
                token: page_token.as_deref(),
            };
            list(
                out,
                &root,
                tenant.as_deref(),
                service.as_deref(),
                page,
                json,
            )
        }
        ReleasesCommand::Show { named, json } => show(out, &named, json),
        ReleasesCommand::Verify { root, json } => verify(out, &root, json),
        ReleasesCommand::Revoke { named, json } => change(out, &named, Change::Revoke, json),
        ReleasesCommand::Retire { named, json } => change(out, &named, Change::Retire, json),
        ReleasesCommand::Upgrade { root, json } => upgrade(out, &root, json),
    }
}

/// The exit code of an error class.
pub(crate) fn code_of(class: Class) -> u8 {
    crate::exit::Exit::of(class).code()
}

/// What a person can do about an error, when its message does not say.
fn remedy(e: &ReleaseError) -> Option<&'static str> {
    let unavailable = |reason: &str| {
        match reason {
        ROOT_LOCKED => Some("another process has the catalog open; wait for it to finish or stop it, then run the command again (or give --wait <seconds>)"),
        LOCK_REPLACED | LOCK_MISSING => Some("never delete .catalog.lock while a process uses the catalog"),
        _ => Some("make the path durable (check the disk and its permissions), then run the command again"),
    }
    };
    match e.root_cause() {
        // A refused root says what to do in its own message.
        ReleaseError::Fs(FsError::Refused { .. }) => None,
        ReleaseError::Fs(FsError::Unavailable { reason, .. }) => unavailable(reason),
        ReleaseError::Fs(FsError::SyncFailed { .. } | FsError::Poisoned) => {
            Some("the disk reported a failed fsync; check it, then run the command again (opening re-verifies everything)")
        }
        ReleaseError::Fs(FsError::Io { source, .. })
            if matches!(source.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded) =>
        {
            Some("the disk or a quota is full: free space, then retry the same command (a publication cut off mid-way is reconciled by its exact retry)")
        }
        ReleaseError::Fs(FsError::Io { .. }) => Some("check the path and its permissions"),
        ReleaseError::Protocol(ProtocolError::Unavailable { .. }) => {
            Some("a publication is pending: retry exactly the same publication to reconcile it")
        }
        ReleaseError::Protocol(_) => Some("a release's digest and reference are immutable: publish a new version"),
        ReleaseError::NotFound(_) => Some("`custos releases list` shows what the catalog holds; references (name@version) are per tenant: give --tenant for a tenant's release"),
        e if e.class() == Class::CorruptArtifact => Some(
            "the catalog is damaged: preserve the directory, stop every process using it, and restore the named entry from a backup or trusted source",
        ),
        _ => None,
    }
}

/// The exit code and message of a repository error: what was being done,
/// the error (which names its class, object and rule) and, where the
/// message does not say it, what to do.
fn failed(what: &str, e: &ReleaseError) -> Failure {
    let code = code_of(e.root_cause().class());
    let msg = match remedy(e) {
        Some(r) => format!("{what}: {e}\n  what to do: {r}"),
        None => format!("{what}: {e}"),
    };
    refused(code, msg)
}

/// The component inspector this build wires in.
pub(crate) fn inspector() -> Arc<dyn ComponentInspector> {
    #[cfg(feature = "wasm")]
    let inspector = Arc::new(custos_wasm::WasmInspector);
    #[cfg(not(feature = "wasm"))]
    let inspector = Arc::new(custos_core::release::contract::MagicOnly);
    inspector
}

/// How long an open waits for another process's lock on a catalog
/// (`--wait`); unset: it fails at once.
static WAIT: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();

/// Sets the `--wait` bound for this process (the first call wins).
pub(crate) fn set_wait(seconds: u64) {
    let _ = WAIT.set(std::time::Duration::from_secs(seconds));
}

/// Runs `attempt` until it answers anything but a refusal `locked` says is
/// another process's lock, or until the `--wait` bound passes (checked
/// every 100 ms); then answers its last result.
pub(crate) fn retry_locked<T, E>(
    mut attempt: impl FnMut() -> Result<T, E>,
    locked: impl Fn(&E) -> bool,
) -> Result<T, E> {
    let wait = WAIT.get().copied().unwrap_or_default();
    let deadline = std::time::Instant::now() + wait;
    loop {
        match attempt() {
            Err(e) if locked(&e) => {
                let now = std::time::Instant::now();
                if now >= deadline {
                    return Err(e);
                }
                std::thread::sleep((deadline - now).min(std::time::Duration::from_millis(100)));
            }
            other => return other,
        }
    }
}

/// Whether `e` is another process's lock on the root.
pub(crate) fn is_locked(e: &FsError) -> bool {
    matches!(e, FsError::Unavailable { reason, .. } if *reason == ROOT_LOCKED)
}

fn open(root: &Path, access: Access) -> Result<ReleaseRepository<RealFs>, Failure> {
    open_with(root, access, Bounds::default())
}

fn open_with(
    root: &Path,
    access: Access,
    bounds: Bounds,
) -> Result<ReleaseRepository<RealFs>, Failure> {
    retry_locked(
        || ReleaseRepository::open_as(access, RealFs, root, bounds, inspector()),
        |e| matches!(e.root_cause(), ReleaseError::Fs(f) if is_locked(f)),
    )
    .map_err(|e| {
        failed(
            &format!("cannot open the release catalog at {}", root.display()),
            &e,
        )
    })
}

pub(crate) fn print_json(out: &mut Out, v: &serde_json::Value) -> Result<(), Failure> {
    let s = serde_json::to_string_pretty(v)
        .map_err(|e| refused(1, format!("cannot encode the report: {e}")))?;
    out.line(s)?;
    Ok(())
}

fn plan_str(p: Plan) -> &'static str {
    match p {
        Plan::New => "new",
        Plan::Noop => "identical",
        Plan::Reconcile => "reconciled",
    }
}

fn publish(
    out: &mut Out,
    root: &Path,
    manifest: &Path,
    component: &Path,
    contract: Option<&Path>,
    json: bool,
) -> Result<(), Failure> {
    let bounds = Bounds::default();
    let manifest_bytes = read_input(manifest, MAX_INPUT_FILE, "manifest")?;
    let component_bytes = read_input(component, bounds.max_component_bytes, "component")?;
    let contract = match contract {
        Some(path) => {
            let bytes = read_input(path, MAX_INPUT_FILE, "contract")?;
            serde_json::from_slice::<Contract>(&bytes).map_err(|e| {
                refused(
                    2,
                    format!("InvalidContract: {} is not a contract: {e}", path.display()),
                )
            })?
        }
        // None declared: the inspector's extraction, if it extracts.
        None => inspector()
            .inspect(&component_bytes)
            .map_err(|e| {
                refused(
                    2,
                    format!("the component {} was refused: {e}", component.display()),
                )
            })?
            .unwrap_or_default(),
    };
    // A refused publication creates nothing: the input is checked before
    // the catalog is opened (which would create and initialize a new root).
    ReleaseRepository::<RealFs>::check_publication(
        &bounds,
        inspector().as_ref(),
        &manifest_bytes,
        &component_bytes,
        contract.clone(),
    )
    .map_err(|e| failed("publication refused", &e))?;
    let repo = open(root, Access::Write)?;
    let p = repo
        .publish(&manifest_bytes, component_bytes, contract)
        .map_err(|e| failed("publication refused", &e))?;
    if p.outcome.is_some_and(|o| o.kind == OutcomeKind::Applied) || p.plan != Plan::Noop {
        crate::out::committed();
    }
    let membership = repo.membership(&p.digest);
    if json {
        return print_json(
            out,
            &serde_json::json!({
                "root": repo.root().display().to_string(),
                "digest": p.digest,
                "plan": plan_str(p.plan),
                "membership": membership,
                "outcome_seq": p.outcome.map(|o| o.seq),
            }),
        );
    }
    out.line(format!("{} {}", plan_str(p.plan), p.digest))?;
    if let Some(m) = membership {
        out.line(format!("membership {}", m.as_str()))?;
    }
    if let Some(o) = p.outcome {
        out.line(format!("outcome seq {}", o.seq))?;
    }
    Ok(())
}

/// One page of a listing: its size and the previous page's cursor.
#[derive(Clone, Copy)]
struct PageAsk<'a> {
    size: u64,
    token: Option<&'a str>,
}

fn list(
    out: &mut Out,
    root: &Path,
    tenant: Option<&str>,
    service: Option<&str>,
    ask: PageAsk<'_>,
    json: bool,
) -> Result<(), Failure> {
    let bounds = Bounds {
        max_page_rows: ask.size,
        ..Bounds::default()
    };
    let repo = open_with(root, Access::Read, bounds)?;
    // Every invocation opens the catalog anew, so the continuation is a
    // durable cursor (it names the catalog's content), not a token bound
    // to one open.
    let page: CatalogPage = match tenant {
        Some(t) => repo.list_catalog_entries_by_cursor(t, service, ask.token),
        None => repo.list_local_entries_by_cursor(ask.token),
    }
    .map_err(|e| failed("listing failed", &e))?;
    let rows = page.entries;
    let next = page.next_page_token;
    if json {
        let rows: Vec<_> = rows
            .iter()
            .map(|r| serde_json::json!({"descriptor": r.descriptor, "membership": r.membership}))
            .collect();
        let scope = if tenant.is_some() {
            "tenant"
        } else {
            "trusted-local"
        };
        return print_json(
            out,
            &serde_json::json!({ "scope": scope, "tenant": tenant, "service": service, "releases": rows, "next_page_token": next }),
        );
    }
    if tenant.is_none() {
        out.line(
            "trusted-local releases (published without a tenant; no tenant's listing shows them)",
        )?;
    }
    out.line(format!(
        "{:<71}  {:<8}  {:<16}  {:>10}  reference",
        "digest", "state", "service", "bytes"
    ))?;
    for r in &rows {
        let d = &r.descriptor;
        out.line(format!(
            "{:<71}  {:<8}  {:<16}  {:>10}  {}",
            d.component_digest.to_string(),
            r.membership.as_str(),
            printable(d.service.as_deref().unwrap_or("-")),
            d.component_size_bytes,
            printable(&d.reference())
        ))?;
    }
    match tenant {
        Some(_) => out.line(format!("{} release(s)", rows.len()))?,
        None => out.line(format!(
            "{} trusted-local release(s) (no tenant)",
            rows.len()
        ))?,
    }
    if let Some(t) = next {
        out.line(format!("next page: --page-token {t}"))?;
    }
    Ok(())
}

/// The digest `target` names: a digest as given, or a reference resolved
/// in `tenant`'s scope (an ineligible release's too).
fn digest_of(repo: &ReleaseRepository<RealFs>, named: &Named) -> Result<Sha256, Failure> {
    let (tenant, target) = (named.tenant.as_deref(), named.release.as_str());
    match Sha256::parse(target) {
        // A digest with --tenant names that tenant's release only: another
        // tenant's answers exactly as one that does not exist.
        Some(d) => match tenant {
            Some(t) => repo
                .get_catalog_entry(t, &d)
                .map(|_| d)
                .map_err(|e| failed(&format!("cannot find {d}"), &e)),
            None => Ok(d),
        },
        None if target.contains('@') => match repo.resolve(tenant, target) {
            Ok(d) => Ok(d.component_digest),
            Err(ReleaseError::NotEligible { digest, .. }) => Ok(digest),
            Err(e) => match repo.orphan_holding(tenant, target) {
                // Not served, yet it holds the reference: say so, rather
                // than "not found" beside a publication told it is held.
                Some(hidden) => Err(refused(
                    crate::exit::Exit::NotFound.code(),
                    format!(
                        "{} is not served: it is reserved by the hidden completed release {hidden}, whose publication was interrupted before its lifecycle record; publish exactly that release again to reconcile it (no other release may take the reference until then)",
                        printable(target)
                    ),
                )),
                None => Err(failed(&format!("cannot resolve {}", printable(target)), &e)),
            },
        },
        None => Err(refused(
            2,
            format!("{:?} is {NOT_A_RELEASE}", printable(target)),
        )),
    }
}

fn show(out: &mut Out, named: &Named, json: bool) -> Result<(), Failure> {
    let repo = open(&named.root, Access::Read)?;
    let digest = digest_of(&repo, named)?;
    let release = match repo.fetch(&digest) {
        Ok(r) => r,
        Err(ReleaseError::NotEligible { membership, .. }) => {
            return ineligible(out, &digest, membership, json);
        }
        Err(e) => return Err(failed(&format!("cannot fetch {digest}"), &e)),
    };
    let membership = repo.membership(&digest).unwrap_or(Membership::Member);
    if json {
        return print_json(
            out,
            &serde_json::json!({
                "descriptor": release.descriptor,
                "membership": membership,
                "manifest": release.manifest,
                "contract": release.contract,
                "verified_component_bytes": release.component.len(),
            }),
        );
    }
    print_descriptor(out, &release.descriptor, membership)?;
    out.line(format!(
        "verified        {} component bytes",
        release.component.len()
    ))?;
    for i in &release.contract.interfaces {
        out.line(format!("interface       {}", printable(&i.name)))?;
        for f in &i.functions {
            let params: Vec<String> = f
                .params
                .iter()
                .map(|p| format!("{}: {:?}", printable(&p.name), p.ty))
                .collect();
            out.line(format!(
                "  func {}({}) -> {:?}",
                printable(&f.name),
                params.join(", "),
                f.results
            ))?;
        }
    }
    Ok(())
}

/// A revoked or retired release: its standing, not its content.
fn ineligible(out: &mut Out, digest: &Sha256, m: Membership, json: bool) -> Result<(), Failure> {
    if json {
        return print_json(
            out,
            &serde_json::json!({ "digest": digest, "membership": m, "eligible": false }),
        );
    }
    out.line(format!("digest          {digest}"))?;
    out.line(format!(
        "membership      {} (not served by resolve or fetch)",
        m.as_str()
    ))?;
    Ok(())
}

fn print_descriptor(out: &mut Out, d: &Descriptor, m: Membership) -> Result<(), Failure> {
    out.line(format!("digest          {}", d.component_digest))?;
    out.line(format!("reference       {}", printable(&d.reference())))?;
    out.line(format!("membership      {}", m.as_str()))?;
    out.line(format!(
        "tenant          {}",
        printable(d.tenant.as_deref().unwrap_or("-"))
    ))?;
    out.line(format!(
        "service         {}",
        printable(d.service.as_deref().unwrap_or("-"))
    ))?;
    out.line(format!("size            {} bytes", d.component_size_bytes))?;
    out.line(format!("manifest_digest {}", d.manifest_digest))?;
    let exports: Vec<String> = d.exports.iter().map(|e| printable(e)).collect();
    out.line(format!("exports         {}", exports.join(", ")))?;
    Ok(())
}

/// Opens the catalog for reading (the open verifies every release), with
/// progress over its directories on stderr.
fn open_verifying(root: &Path) -> Result<ReleaseRepository<RealFs>, Failure> {
    // The open verifies every release: progress over the directories.
    let progress = std::cell::RefCell::new(None::<crate::progress::Count>);
    let observe = |done: u64, total: u64| {
        let mut p = progress.borrow_mut();
        p.get_or_insert_with(|| {
            crate::progress::Count::new("releases verify", "release directories", total)
        })
        .set(done);
    };
    let repo = retry_locked(
        || {
            ReleaseRepository::open_observed(
                Access::Read,
                RealFs,
                root,
                Bounds::default(),
                inspector(),
                &observe,
            )
        },
        |e| matches!(e.root_cause(), ReleaseError::Fs(f) if is_locked(f)),
    )
    .map_err(|e| {
        failed(
            &format!("cannot open the release catalog at {}", root.display()),
            &e,
        )
    });
    if let Some(p) = progress.into_inner() {
        p.finish();
    }
    repo
}

fn verify(out: &mut Out, root: &Path, json: bool) -> Result<(), Failure> {
    let repo = open_verifying(root)?;
    let usage = repo.usage();
    let counters = repo.verification_snapshot();
    let orphans = repo.orphans();
    // Completed directories (adopted and orphans) are charged as entries;
    // every other directory under releases/ is incomplete debris.
    let debris = usage.recovery_directories.saturating_sub(usage.entries);
    if json {
        return print_json(
            out,
            &serde_json::json!({
                "root": repo.root().display().to_string(),
                "releases": repo.len(),
                "orphans": orphans,
                "recovery_directories": usage.recovery_directories,
                "incomplete_directories": debris,
                "index_bytes": usage.index_bytes,
                "components_verified": counters.component_verification_attempts,
                "component_bytes_hashed": counters.component_bytes_hashed,
                "metadata_fingerprints_checked": counters.metadata_fingerprint_attempts,
            }),
        );
    }
    out.line(format!(
        "catalog {} verified (read-only)",
        repo.root().display()
    ))?;
    out.line(format!("releases                {}", repo.len()))?;
    out.line(format!("orphans                 {}", orphans.len()))?;
    for o in &orphans {
        out.line(format!(
            "  orphan {o} (completed, no lifecycle record: invisible)"
        ))?;
    }
    out.line(format!("incomplete directories  {debris}"))?;
    out.line(format!(
        "recovery directories    {}",
        usage.recovery_directories
    ))?;
    out.line(format!("accounted index bytes   {}", usage.index_bytes))?;
    out.line(format!(
        "components verified     {} ({} bytes hashed, {} metadata fingerprints)",
        counters.component_verification_attempts,
        counters.component_bytes_hashed,
        counters.metadata_fingerprint_attempts
    ))?;
    Ok(())
}

#[derive(Clone, Copy)]
enum Change {
    Revoke,
    Retire,
}

fn change(out: &mut Out, named: &Named, what: Change, json: bool) -> Result<(), Failure> {
    // Revoking and retiring add nothing: a mistyped root is not created.
    let repo = open(&named.root, Access::Modify)?;
    let digest = digest_of(&repo, named)?;
    let (verb, result): (&str, Result<Outcome, ReleaseError>) = match what {
        Change::Revoke => ("revoked", repo.revoke(&digest)),
        Change::Retire => ("retired", repo.retire(&digest)),
    };
    let o = result.map_err(|e| failed(&format!("cannot change {digest}"), &e))?;
    let changed = o.kind == OutcomeKind::Applied;
    if changed {
        crate::out::committed();
    }
    if json {
        return print_json(
            out,
            &serde_json::json!({
                "digest": digest,
                "changed": changed,
                "membership": o.after,
                // An unchanged operation writes nothing and uses no number.
                "outcome_seq": changed.then_some(o.seq),
            }),
        );
    }
    if changed {
        out.line(format!("{verb} {digest}"))?;
    } else {
        out.line(format!("unchanged {digest} (already so; nothing written)"))?;
    }
    out.line(format!("membership {}", o.after.as_str()))?;
    if changed {
        out.line(format!("outcome seq {}", o.seq))?;
    }
    Ok(())
}

fn upgrade(out: &mut Out, root: &Path, json: bool) -> Result<(), Failure> {
    let repo = open(root, Access::Upgrade)?;
    let plan = repo.open_plan();
    if plan == OpenPlan::Upgrade {
        crate::out::committed();
    }
    if json {
        return print_json(
            out,
            &serde_json::json!({
                "root": repo.root().display().to_string(),
                "upgraded": plan == OpenPlan::Upgrade,
                "releases": repo.len(),
            }),
        );
    }
    if plan == OpenPlan::Open {
        out.line(format!(
            "catalog {} is already initialized; nothing to upgrade ({} releases)",
            repo.root().display(),
            repo.len()
        ))?;
    } else {
        out.line(format!(
            "catalog {} upgraded: {} releases verified, INITIALIZED written",
            repo.root().display(),
            repo.len()
        ))?;
    }
    Ok(())
}
