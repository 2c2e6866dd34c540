//! `custos releases publish|list|show|verify`: the local release catalog
//! (spec 002) from the command line, through custos-fs's
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
//! read back and checked (digests, completion record, manifest, contract)
//! and `.tmp/` debris is cleared, so `verify` is an open that reports what
//! it found. The read commands refuse a directory that is not a catalog
//! (no `releases/`) rather than create one.
//!
//! Exit codes: 0 success; 1 a damaged catalog or a filesystem failure;
//! 2 bad input (an unreadable file, an invalid manifest or contract, a
//! bound); 3 not found; 4 a conflict or an ineligible release; 5 the
//! catalog is unavailable (owned by a live process, or a pending
//! publication).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Subcommand;
use custos_core::release::bounds::Bounds;
use custos_core::release::contract::{ComponentInspector, Contract};
use custos_core::release::lifecycle::Membership;
use custos_core::release::metadata::Descriptor;
use custos_core::release::protocol::Plan;
use custos_core::release::Sha256;
use custos_fs::release::{ReleaseError, ReleaseRepository, RELEASES_DIR};
use custos_fs::RealFs;

/// What `show` says of an argument that names no release.
const NOT_A_RELEASE: &str = "neither a digest (sha256:<64 hex>) nor a reference (name@version)";

/// The largest manifest or contract file the command reads.
const MAX_INPUT_FILE: u64 = 4 * 1024 * 1024;

/// `custos releases …`.
#[derive(Subcommand, Debug)]
pub enum ReleasesCommand {
    /// Publish a release (created if the catalog root does not exist).
    Publish {
        /// The catalog root.
        root: PathBuf,
        /// The manifest (JSON: name, version, tenant, service,
        /// component_digest, exports).
        #[arg(long)]
        manifest: PathBuf,
        /// The component bytes.
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
    /// List a tenant's releases (narrowed to a service), historical ones included.
    List {
        /// The catalog root.
        root: PathBuf,
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The service.
        #[arg(long)]
        service: Option<String>,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one release, fetched and verified, by digest (sha256:…) or reference (name@version).
    Show {
        /// The catalog root.
        root: PathBuf,
        /// A digest or a reference.
        release: String,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Reopen the catalog (full verification) and print what it holds.
    Verify {
        /// The catalog root.
        root: PathBuf,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a releases command.
pub fn run(cmd: ReleasesCommand) -> ExitCode {
    let result = match cmd {
        ReleasesCommand::Publish {
            root,
            manifest,
            component,
            contract,
            json,
        } => publish(&root, &manifest, &component, contract.as_deref(), json),
        ReleasesCommand::List {
            root,
            tenant,
            service,
            json,
        } => list(&root, &tenant, service.as_deref(), json),
        ReleasesCommand::Show {
            root,
            release,
            json,
        } => show(&root, &release, json),
        ReleasesCommand::Verify { root, json } => verify(&root, json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, msg)) => {
            eprintln!("custos releases: {msg}");
            ExitCode::from(code)
        }
    }
}

type Failure = (u8, String);

/// The exit code and message of a repository error.
fn failed(what: &str, e: &ReleaseError) -> Failure {
    let class = e.root_cause().class();
    let code = match class {
        "InvalidArgument" | "ResourceExhausted" => 2,
        "NotFound" => 3,
        "AlreadyExists" | "FailedPrecondition" => 4,
        "Unavailable" => 5,
        _ => 1,
    };
    (code, format!("{what}: {class}: {e}"))
}

fn read_input(path: &Path, limit: u64, what: &str) -> Result<Vec<u8>, Failure> {
    let len = std::fs::metadata(path)
        .map_err(|e| (2, format!("cannot read the {what} {}: {e}", path.display())))?
        .len();
    if len > limit {
        return Err((
            2,
            format!(
                "the {what} {} is {len} bytes, over the {limit}-byte limit",
                path.display()
            ),
        ));
    }
    std::fs::read(path).map_err(|e| (2, format!("cannot read the {what} {}: {e}", path.display())))
}

/// The component inspector this build wires in.
fn inspector() -> Arc<dyn ComponentInspector> {
    #[cfg(feature = "wasm")]
    let inspector = Arc::new(custos_wasm::WasmInspector);
    #[cfg(not(feature = "wasm"))]
    let inspector = Arc::new(custos_core::release::contract::MagicOnly);
    inspector
}

fn open(root: &Path) -> Result<ReleaseRepository<RealFs>, Failure> {
    ReleaseRepository::open(RealFs, root, Bounds::default(), inspector()).map_err(|e| {
        failed(
            &format!("cannot open the catalog at {}", root.display()),
            &e,
        )
    })
}

/// Opens an existing catalog; a directory without `releases/` is not one.
fn open_existing(root: &Path) -> Result<ReleaseRepository<RealFs>, Failure> {
    if !root.join(RELEASES_DIR).is_dir() {
        return Err((
            3,
            format!("NotFound: no release catalog at {}", root.display()),
        ));
    }
    open(root)
}

fn print_json(v: &serde_json::Value) -> Result<(), Failure> {
    let s = serde_json::to_string_pretty(v)
        .map_err(|e| (1, format!("cannot encode the report: {e}")))?;
    println!("{s}");
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
                (
                    2,
                    format!("InvalidContract: {} is not a contract: {e}", path.display()),
                )
            })?
        }
        // None declared: the inspector's extraction, if it extracts.
        None => inspector()
            .inspect(&component_bytes)
            .map_err(|e| (2, format!("the component was refused: {e}")))?
            .unwrap_or_default(),
    };
    let repo = open(root)?;
    let p = repo
        .publish(&manifest_bytes, component_bytes, contract)
        .map_err(|e| failed("publication refused", &e))?;
    let membership = repo.membership(&p.digest);
    if json {
        return print_json(&serde_json::json!({
            "root": repo.root().display().to_string(),
            "digest": p.digest,
            "plan": plan_str(p.plan),
            "membership": membership,
            "outcome_seq": p.outcome.map(|o| o.seq),
        }));
    }
    println!("{} {}", plan_str(p.plan), p.digest);
    if let Some(m) = membership {
        println!("membership {}", m.as_str());
    }
    if let Some(o) = p.outcome {
        println!("outcome seq {}", o.seq);
    }
    Ok(())
}

fn list(root: &Path, tenant: &str, service: Option<&str>, json: bool) -> Result<(), Failure> {
    let repo = open_existing(root)?;
    let mut rows = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = repo
            .list_catalog_entries(tenant, service, token.as_deref())
            .map_err(|e| failed("listing failed", &e))?;
        rows.extend(page.entries);
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    if json {
        let rows: Vec<_> = rows
            .iter()
            .map(|r| serde_json::json!({"descriptor": r.descriptor, "membership": r.membership}))
            .collect();
        return print_json(
            &serde_json::json!({ "tenant": tenant, "service": service, "releases": rows }),
        );
    }
    println!(
        "{:<71}  {:<8}  {:<16}  {:>10}  reference",
        "digest", "state", "service", "bytes"
    );
    for r in &rows {
        let d = &r.descriptor;
        println!(
            "{:<71}  {:<8}  {:<16}  {:>10}  {}",
            d.component_digest.to_string(),
            r.membership.as_str(),
            d.service.as_deref().unwrap_or("-"),
            d.component_size_bytes,
            d.reference()
        );
    }
    println!("{} release(s)", rows.len());
    Ok(())
}

fn show(root: &Path, target: &str, json: bool) -> Result<(), Failure> {
    let repo = open_existing(root)?;
    let digest = match Sha256::parse(target) {
        Some(d) => d,
        None if target.contains('@') => match repo.resolve(target) {
            Ok(d) => d.component_digest,
            Err(ReleaseError::NotEligible { digest, .. }) => digest,
            Err(e) => return Err(failed(&format!("cannot resolve {target}"), &e)),
        },
        None => return Err((2, format!("{target:?} is {NOT_A_RELEASE}"))),
    };
    let release = match repo.fetch(&digest) {
        Ok(r) => r,
        Err(ReleaseError::NotEligible { membership, .. }) => {
            return ineligible(&digest, membership, json);
        }
        Err(e) => return Err(failed(&format!("cannot fetch {digest}"), &e)),
    };
    let membership = repo.membership(&digest).unwrap_or(Membership::Member);
    if json {
        return print_json(&serde_json::json!({
            "descriptor": release.descriptor,
            "membership": membership,
            "manifest": release.manifest,
            "contract": release.contract,
            "verified_component_bytes": release.component.len(),
        }));
    }
    print_descriptor(&release.descriptor, membership);
    println!(
        "verified        {} component bytes",
        release.component.len()
    );
    for i in &release.contract.interfaces {
        println!("interface       {}", i.name);
        for f in &i.functions {
            let params: Vec<String> = f
                .params
                .iter()
                .map(|p| format!("{}: {:?}", p.name, p.ty))
                .collect();
            println!(
                "  func {}({}) -> {:?}",
                f.name,
                params.join(", "),
                f.results
            );
        }
    }
    Ok(())
}

/// A revoked or retired release: its standing, not its content.
fn ineligible(digest: &Sha256, m: Membership, json: bool) -> Result<(), Failure> {
    if json {
        return print_json(
            &serde_json::json!({ "digest": digest, "membership": m, "eligible": false }),
        );
    }
    println!("digest          {digest}");
    println!(
        "membership      {} (not served by resolve or fetch)",
        m.as_str()
    );
    Ok(())
}

fn print_descriptor(d: &Descriptor, m: Membership) {
    println!("digest          {}", d.component_digest);
    println!("reference       {}", d.reference());
    println!("membership      {}", m.as_str());
    println!("tenant          {}", d.tenant.as_deref().unwrap_or("-"));
    println!("service         {}", d.service.as_deref().unwrap_or("-"));
    println!("size            {} bytes", d.component_size_bytes);
    println!("manifest_digest {}", d.manifest_digest);
    println!("exports         {}", d.exports.join(", "));
}

fn verify(root: &Path, json: bool) -> Result<(), Failure> {
    let repo = open_existing(root)?;
    let usage = repo.usage();
    let counters = repo.verification_snapshot();
    let orphans = repo.orphans();
    // Completed directories (adopted and orphans) are charged as entries;
    // every other directory under releases/ is incomplete debris.
    let debris = usage.recovery_directories.saturating_sub(usage.entries);
    if json {
        return print_json(&serde_json::json!({
            "root": repo.root().display().to_string(),
            "releases": repo.len(),
            "orphans": orphans,
            "recovery_directories": usage.recovery_directories,
            "incomplete_directories": debris,
            "index_bytes": usage.index_bytes,
            "components_verified": counters.component_verification_attempts,
            "component_bytes_hashed": counters.component_bytes_hashed,
            "metadata_fingerprints_checked": counters.metadata_fingerprint_attempts,
        }));
    }
    println!("catalog {} verified", repo.root().display());
    println!("releases                {}", repo.len());
    println!("orphans                 {}", orphans.len());
    for o in &orphans {
        println!("  orphan {o} (completed, no lifecycle record: invisible)");
    }
    println!("incomplete directories  {debris}");
    println!("recovery directories    {}", usage.recovery_directories);
    println!("accounted index bytes   {}", usage.index_bytes);
    println!(
        "components verified     {} ({} bytes hashed, {} metadata fingerprints)",
        counters.component_verification_attempts,
        counters.component_bytes_hashed,
        counters.metadata_fingerprint_attempts
    );
    Ok(())
}
