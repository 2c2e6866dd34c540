//! `custos` — the command line of the custos toolkit.
//!
//! - `custos check [--deep] [--format text|json|junit] [--model A,B]` runs
//!   every registered model (or the ones named) to its bound, with its
//!   mutants, and prints one table, one JSON document or JUnit XML
//!   ([`junit`]); exits non-zero if a property fails, a mutant survives or a
//!   search was not exhaustive.
//! - `custos explore <model> [--port P] [--mutant NAME]` serves stateright's
//!   Explorer for a model on 127.0.0.1.
//! - `custos models` lists the registered models and their mutants.
//! - `custos demo <dir>` makes a complete sample to try every other command
//!   on (feature `demo`; see `demo`).
//! - `custos completions <shell>` prints a completion script (clap_complete)
//!   and `custos man` the manual page in roff (clap_mangen).
//! - `custos schema <kind>` prints the JSON Schema of a document a user
//!   writes or reads (release manifest, contract, deployment manifest,
//!   migration plan, receipt); checked in under `docs/schemas/` ([`schema`]).
//! - `custos deployments apply|delete|get|list|resolve|revision …` manages
//!   a local deployment catalog over a release catalog (feature `fs`).
//! - `custos releases publish|list|show|verify <root> …` publishes to, lists,
//!   shows and verifies a local release catalog (feature `fs`).
//! - `custos catalog discover <uri> [--namespace N] [--backend B] [--json]`
//!   lists every world ever registered in the control catalog of that
//!   storage identity, destroyed ones included; `custos catalog show <uri>
//!   <world-id> …` prints one world's durable descriptor and signatures
//!   (feature `sqlite`). Both only read, through a read-only open that
//!   creates and writes nothing: a storage identity without a control
//!   catalog (or whose catalog file is not one), or an unrecorded world,
//!   exits with code 3; a catalog whose killed writer left a hot rollback
//!   journal exits 6 naming `custos catalog recover <uri> …`, which rolls
//!   that transaction back and changes nothing else.
//!
//! - `custos migrate plan|run|verify --source URI --dest URI
//!   --migration-id ID …` migrates a whole storage identity — Iceberg
//!   tables, Artifact objects, the control catalog with its writer-fence
//!   floors — to an empty destination and answers a cold-verified receipt
//!   (feature `migrate`; see `migrate`).
//!
//! Output never panics ([`out`]): a command whose stdout is a closed pipe
//! ends quietly with 141 (128 + SIGPIPE); one whose stdout cannot be
//! written otherwise (a full device) prints one line to stderr and exits 1.
//! `--threads` is bounded to 1..=[`MAX_THREADS`] by the parser (exit 2).

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use custos_models::{registry, Bound, ModelReport};

mod exit;
// Every command that fails with it is a shell's (`make check` builds none).
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
mod fail;
mod junit;
mod out;
mod progress;
mod schema;
use out::Out;

/// The most checker threads `custos check` starts.
const MAX_THREADS: u64 = 256;

#[cfg(feature = "fs")]
mod deployments;
#[cfg(feature = "fs")]
mod releases;

#[cfg(feature = "sqlite")]
mod catalog;

#[cfg(feature = "migrate")]
mod migrate;

#[cfg(feature = "demo")]
mod demo;

/// A relative local path is made absolute against the working directory
/// (a uri with a scheme, or an absolute path, is kept as it is).
#[cfg(feature = "sqlite")]
fn absolute(uri: &str) -> String {
    if uri.contains("://") || std::path::Path::new(uri).is_absolute() {
        return uri.to_owned();
    }
    match std::env::current_dir() {
        Ok(cwd) => cwd.join(uri).to_string_lossy().into_owned(),
        Err(_) => uri.to_owned(),
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "custos",
    version,
    about = "The durable control plane toolkit: model checks and tools",
    after_help = exit::TABLE
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check every registered model and its mutants; print one table.
    Check {
        /// Use the deep bound instead of the CI bound.
        #[arg(long)]
        deep: bool,
        /// How to print the reports: a table (`text`), one JSON document
        /// (`json`), or JUnit XML for a CI system (`junit`: one test case
        /// per property and per mutant, the counterexample in a failure's
        /// text).
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Print the reports as JSON (the same as `--format json`).
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// Check only these models (comma-separated, or the option given
        /// more than once); see `custos models`.
        #[arg(long, value_delimiter = ',')]
        model: Vec<String>,
        /// Check this mutant of `--model` in place of the real model: the
        /// properties it breaks fail, each printed with its shortest
        /// counterexample (what a failing check looks like).
        #[arg(long, requires = "model")]
        mutant: Option<String>,
        /// Checker threads for the real models (mutants run on one thread), 1 to 256.
        #[arg(
            long,
            default_value_t = 2,
            value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_THREADS)
        )]
        threads: usize,
    },
    /// Serve stateright's Explorer for one model on 127.0.0.1.
    Explore {
        /// The model's name (see `custos models`).
        model: String,
        /// The port to listen on (0: any free port, announced on stderr).
        #[arg(long, default_value_t = 3000)]
        port: u16,
        /// Explore a mutant instead of the real model.
        #[arg(long)]
        mutant: Option<String>,
        /// Use the deep bound.
        #[arg(long)]
        deep: bool,
    },
    /// List the registered models and their mutants.
    Models {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script for `custos` (e.g.
    /// `custos completions bash > /etc/bash_completion.d/custos`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Make a complete sample under a new or empty directory — a storage
    /// identity with Worlds, Iceberg tables and Artifacts, a release
    /// catalog with a real component, a deployment catalog — and print the
    /// commands to try on it.
    #[cfg(feature = "demo")]
    Demo {
        /// The directory (nonexistent or empty).
        dir: std::path::PathBuf,
    },
    /// Print the `custos(1)` manual page in roff (e.g. `custos man |
    /// man -l -`).
    Man,
    /// Print the JSON Schema (draft 2020-12) of a document a user writes or
    /// reads (the same as `docs/schemas/<kind>.schema.json`).
    Schema {
        /// The document.
        #[arg(value_enum)]
        kind: schema::SchemaKind,
    },
    /// Read the control catalog of a storage identity (worlds, signatures).
    #[cfg(feature = "sqlite")]
    Catalog {
        #[command(subcommand)]
        command: catalog::CatalogCommand,
    },
    /// Migrate a whole storage identity to an empty destination (plan, run, verify).
    #[cfg(feature = "migrate")]
    Migrate {
        #[command(subcommand)]
        command: migrate::MigrateCommand,
    },
    /// Apply, delete, get, list and resolve deployments over a release
    /// catalog; print a manifest's revision.
    #[cfg(feature = "fs")]
    Deployments {
        /// Wait up to this many seconds for another process's lock on a
        /// catalog (default 0: a locked catalog fails at once, exit 5;
        /// `revision` opens no catalog and ignores it).
        #[arg(long, global = true, value_name = "SECONDS", default_value_t = 0,
              value_parser = clap::value_parser!(u64).range(0..=86_400))]
        wait: u64,
        #[command(subcommand)]
        command: deployments::DeploymentsCommand,
    },
    /// Publish to, list, show, verify, revoke, retire and upgrade a local
    /// release catalog.
    #[cfg(feature = "fs")]
    Releases {
        /// Wait up to this many seconds for another process's lock on the
        /// catalog (default 0: a locked catalog fails at once, exit 5).
        #[arg(long, global = true, value_name = "SECONDS", default_value_t = 0,
              value_parser = clap::value_parser!(u64).range(0..=86_400))]
        wait: u64,
        #[command(subcommand)]
        command: releases::ReleasesCommand,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version are output like any other: a closed pipe is 141,
        // a full device 1 with one line — never a silent success.
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            return out::run(|out| {
                out.text(e.render())?;
                Ok(ExitCode::SUCCESS)
            });
        }
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::Check {
            deep,
            format,
            json,
            model,
            mutant,
            threads,
        } => out::run(|out| {
            let only = Only {
                models: &model,
                mutant: mutant.as_deref(),
            };
            let format = if json { Format::Json } else { format };
            check(out, deep, format, only, threads)
        }),
        Command::Explore {
            model,
            port,
            mutant,
            deep,
        } => explore(&model, port, mutant.as_deref(), deep),
        Command::Models { json } => out::run(|out| models(out, json)),
        Command::Completions { shell } => out::run(|out| {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "custos", &mut script);
            out.write_all(&script)?;
            Ok(ExitCode::SUCCESS)
        }),
        Command::Man => out::run(|out| {
            let mut page = Vec::new();
            clap_mangen::Man::new(Cli::command()).render(&mut page)?;
            out.write_all(&page)?;
            Ok(ExitCode::SUCCESS)
        }),
        Command::Schema { kind } => out::run(|out| schema::print(out, kind)),
        #[cfg(feature = "demo")]
        Command::Demo { dir } => demo::run(&dir),
        #[cfg(feature = "fs")]
        Command::Releases { wait, command } => {
            releases::set_wait(wait);
            releases::run(command)
        }
        #[cfg(feature = "fs")]
        Command::Deployments { wait, command } => {
            releases::set_wait(wait);
            deployments::run(command)
        }
        #[cfg(feature = "sqlite")]
        Command::Catalog { command } => catalog::run(command),
        #[cfg(feature = "migrate")]
        Command::Migrate { command } => migrate::run(command),
    }
}

/// How `custos check` prints its reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// The summary table, then each failure with its counterexample.
    Text,
    /// One JSON document: the bound, the verdict and every report.
    Json,
    /// JUnit XML, for a CI system's test view.
    Junit,
}

/// What `custos check` was asked to check.
#[derive(Clone, Copy)]
struct Only<'a> {
    /// The models named (none: every model).
    models: &'a [String],
    mutant: Option<&'a str>,
}

fn check(
    out: &mut Out,
    deep: bool,
    format: Format,
    only: Only<'_>,
    threads: usize,
) -> std::io::Result<ExitCode> {
    let bound = if deep { Bound::Deep } else { Bound::Ci };
    let registered = registry();
    if let Some(unknown) = only
        .models
        .iter()
        .find(|n| !registered.iter().any(|m| m.name() == n.as_str()))
    {
        out::err(format_args!(
            "custos check: no model named {unknown:?}; try `custos models`"
        ));
        return Ok(ExitCode::from(2));
    }
    if only.mutant.is_some() && only.models.len() != 1 {
        out::err(format_args!(
            "custos check: --mutant names a mutant of one model; give exactly one --model"
        ));
        return Ok(ExitCode::from(2));
    }
    let models: Vec<_> = registered
        .into_iter()
        .filter(|m| only.models.is_empty() || only.models.iter().any(|n| n == m.name()))
        .collect();
    let mut reports = Vec::new();
    // Progress on stderr in every format (stdout is the report's).
    let mut stages = progress::Stages::new("check", models.len() as u64);
    for m in &models {
        stages.stage(format!("{} ({:?} bound)", m.name(), bound));
        match only.mutant {
            None => reports.push(m.check(bound, threads)),
            Some(name) => match m.check_as_model(bound, threads, name) {
                Some(r) => reports.push(r),
                None => {
                    out::err(format_args!(
                        "custos check: model {} has no mutant named {name:?}; try `custos models`",
                        m.name()
                    ));
                    return Ok(ExitCode::from(2));
                }
            },
        }
    }
    stages.finish();
    let passed = reports.iter().all(ModelReport::passed);
    if !report(out, format, bound, passed, &reports)? {
        return Ok(ExitCode::from(2));
    }
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Writes the check's report in `format`; `false` when it could not be
/// encoded (said on stderr).
fn report(
    out: &mut Out,
    format: Format,
    bound: Bound,
    passed: bool,
    reports: &[ModelReport],
) -> std::io::Result<bool> {
    if format == Format::Junit {
        match junit::render(reports) {
            Ok(xml) => out.text(xml)?,
            Err(e) => {
                out::err(format_args!("custos check: cannot encode the report: {e}"));
                return Ok(false);
            }
        }
    } else if format == Format::Json {
        let doc = serde_json::json!({ "bound": bound, "passed": passed, "models": reports });
        match serde_json::to_string_pretty(&doc) {
            Ok(s) => out.line(s)?,
            Err(e) => {
                out::err(format_args!("custos check: cannot encode the report: {e}"));
                return Ok(false);
            }
        }
    } else {
        out.text(table(reports))?;
        for r in reports {
            for p in r.properties.iter().filter(|p| !p.held) {
                writeln!(out, "FAILED {}: {} `{}`", r.model, p.kind, p.name)?;
                if let Some(t) = &p.trace {
                    out.text(t.render())?;
                }
            }
            for m in r.mutants.iter().filter(|m| !m.killed) {
                writeln!(out, "SURVIVED {}: mutant `{}`", r.model, m.name)?;
            }
            if !r.exhaustive {
                writeln!(out, "INCOMPLETE {}: the search did not finish", r.model)?;
            }
        }
        out.line(if passed {
            "all models passed"
        } else {
            "model check FAILED"
        })?;
    }
    Ok(true)
}

/// Renders the summary table and, under it, each mutant's killer.
fn table(reports: &[ModelReport]) -> String {
    let header = [
        "model",
        "states",
        "unique",
        "depth",
        "seconds",
        "properties held",
        "mutants killed",
    ];
    let rows: Vec<[String; 7]> = reports
        .iter()
        .map(|r| {
            let (ph, pt) = r.properties_held();
            let (mk, mt) = r.mutants_killed();
            [
                r.model.clone(),
                r.states.to_string(),
                r.unique_states.to_string(),
                r.max_depth.to_string(),
                format!("{:.2}", r.seconds),
                format!("{ph}/{pt}"),
                format!("{mk}/{mt}"),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i == 0 {
                s.push_str(&format!("{cell:<w$}"));
            } else {
                s.push_str(&format!("  {cell:>w$}"));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(&header.map(String::from));
    out.push_str(&line(&widths.map(|w| "-".repeat(w))));
    for row in &rows {
        out.push_str(&line(row));
    }
    out.push('\n');
    for r in reports {
        out.push_str(&format!("{} — {}\n", r.model, r.bound_detail));
        for m in &r.mutants {
            match (&m.killed_by, m.counterexample_len) {
                (Some(p), Some(n)) => out.push_str(&format!(
                    "  mutant {:<40} killed in {n} steps by `{p}`\n",
                    m.name
                )),
                _ => out.push_str(&format!("  mutant {:<40} SURVIVED\n", m.name)),
            }
        }
    }
    out
}

/// Serves the Explorer. The address is bound here first, so that a port
/// that cannot be bound is refused (exit 2) before anything is announced,
/// and port 0 is resolved to the port the system chose; the listener is
/// then dropped and the concrete address handed to the model. Stateright
/// binds its own server from an address, so a window remains: another
/// process taking the port in the instant after the drop is refused by the
/// model's own pre-bind (exit 2), and only one taking it between that
/// pre-bind and stateright's bind would still reach stateright's panic.
fn explore(name: &str, port: u16, mutant: Option<&str>, deep: bool) -> ExitCode {
    let Some(model) = registry().into_iter().find(|m| m.name() == name) else {
        out::err(format_args!(
            "custos explore: no model named {name:?}; try `custos models`"
        ));
        return ExitCode::from(2);
    };
    if let Some(m) = mutant {
        if !model.mutant_names().contains(&m) {
            out::err(format_args!(
                "custos explore: model {name} has no mutant named {m:?}; try `custos models`"
            ));
            return ExitCode::from(2);
        }
    }
    let wanted = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let addr = match TcpListener::bind(wanted).and_then(|l| l.local_addr()) {
        Ok(addr) => addr,
        Err(e) => {
            out::err(format_args!(
                "custos explore: cannot listen on {wanted}: {e}"
            ));
            return ExitCode::from(2);
        }
    };
    // The listener is dropped by now; the model binds `addr` itself.
    out::err(format_args!(
        "serving the Explorer for {name} on http://{addr}/ (Ctrl-C to stop)"
    ));
    let bound = if deep { Bound::Deep } else { Bound::Ci };
    match model.explore(bound, mutant, addr) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            out::err(format_args!("custos explore: {e}"));
            ExitCode::from(2)
        }
    }
}

fn models(out: &mut Out, json: bool) -> std::io::Result<ExitCode> {
    let list: Vec<_> = registry()
        .iter()
        .map(|m| serde_json::json!({"name": m.name(), "summary": m.summary(), "mutants": m.mutant_names()}))
        .collect();
    if json {
        out.line(serde_json::Value::Array(list))?;
    } else {
        for m in registry() {
            writeln!(out, "{:<10} {}", m.name(), m.summary())?;
            for mutant in m.mutant_names() {
                writeln!(out, "           mutant {mutant}")?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
