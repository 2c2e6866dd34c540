//! What `custos migrate` shows: progress on stderr (bars on a terminal,
//! plain lines otherwise, nothing with `--json`) and the plan, receipt or
//! evidence on stdout.

use std::io::Write;
use std::sync::Mutex;

use custos_core::migration::workflow::{Progress, WorkflowError};
use custos_core::migration::{
    ColdEvidence, MigrationError, Next, Plan, Resume, StoredReceipt, VerifyMode,
};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::out::{self, Out};

/// Progress display of one run.
pub struct Bars {
    mode: Mode,
    /// Rows copied so far, and the plan's table names by index.
    plan: Mutex<(u64, Vec<String>)>,
}

enum Mode {
    /// `--json`: nothing on stderr but failures.
    Silent,
    /// Not a terminal: one line per step.
    Lines,
    /// A terminal: bars for objects (bytes) and tables (rows).
    Bars {
        _multi: MultiProgress,
        objects: ProgressBar,
        tables: ProgressBar,
        step: ProgressBar,
    },
}

fn bar(multi: &MultiProgress, template: &str) -> ProgressBar {
    let b = multi.add(ProgressBar::new(0));
    if let Ok(style) = ProgressStyle::with_template(template) {
        b.set_style(style.progress_chars("=> "));
    }
    b
}

impl Bars {
    /// The display for this process's stderr.
    pub fn new(json: bool) -> Self {
        let mode = if json {
            Mode::Silent
        } else if super::terminal() {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let objects = bar(&multi, "objects {pos:>3}/{len:3} [{bar:30}] {msg}");
            let tables = bar(&multi, "tables  {pos:>3}/{len:3} [{bar:30}] {msg}");
            let step = multi.add(ProgressBar::new_spinner());
            Mode::Bars {
                _multi: multi,
                objects,
                tables,
                step,
            }
        } else {
            Mode::Lines
        };
        Bars {
            mode,
            plan: Mutex::new((0, Vec::new())),
        }
    }

    /// Ends the bars (leaving them drawn).
    pub fn finish(&self) {
        if let Mode::Bars {
            objects,
            tables,
            step,
            ..
        } = &self.mode
        {
            objects.finish();
            tables.finish();
            step.finish_and_clear();
        }
    }
}

/// A step as a person reads it (`names`: the plan's tables).
fn describe(next: &Next, names: &[String]) -> String {
    let table = |i: &usize| names.get(*i).cloned().unwrap_or_else(|| format!("#{i}"));
    match next {
        Next::Validate => "preflight".into(),
        Next::Plan => "plan: fence the source's active Worlds and freeze".into(),
        Next::Reserve => "reserve the destination".into(),
        Next::CopyObject { .. } => "copy and verify Artifact objects".into(),
        Next::CopyTable { index } => format!("copy table {}", table(index)),
        Next::VerifyTable { index } => format!("verify table {}", table(index)),
        Next::Recheck => "recheck the source against the plan".into(),
        Next::StageControl => "stage the control snapshot".into(),
        Next::Activate => "activate the destination".into(),
        Next::ColdVerify => "cold verification (a fresh process)".into(),
        Next::Complete => "complete: store the receipt".into(),
        Next::Done(_) => "done".into(),
    }
}

impl Progress for Bars {
    fn interrupted(&self) -> bool {
        super::stop::asked()
    }

    fn step(&self, next: &Next) {
        let text = match self.plan.lock() {
            Ok(p) => describe(next, &p.1),
            Err(_) => describe(next, &[]),
        };
        match &self.mode {
            Mode::Silent => {}
            Mode::Lines => out::err(format_args!("migrate: {text}")),
            Mode::Bars { step, .. } => step.set_message(text),
        }
    }

    fn planned(&self, plan: &Plan) {
        let total_rows: u64 = plan.tables.iter().map(|t| t.source.rows).sum();
        let bytes = plan.artifacts.total_bytes();
        match &self.mode {
            Mode::Silent => {}
            Mode::Lines => out::err(format_args!(
                "migrate: plan {}: {} tables, {total_rows} rows, {} objects, {bytes} bytes, {} worlds",
                plan.digest().hex(),
                plan.tables.len(),
                plan.artifacts.objects.len(),
                plan.worlds.len()
            )),
            Mode::Bars {
                objects, tables, ..
            } => {
                objects.set_length(plan.artifacts.objects.len() as u64);
                objects.set_message(format!("0/{bytes} bytes"));
                tables.set_length(plan.tables.len() as u64);
                tables.set_message(format!("0/{total_rows} rows"));
            }
        }
        if let Ok(mut p) = self.plan.lock() {
            *p = (0, plan.tables.iter().map(|t| t.name.to_string()).collect());
        }
    }

    fn objects(&self, copied: u64, reused: u64, bytes: u64) {
        match &self.mode {
            Mode::Silent => {}
            Mode::Lines => out::err(format_args!(
                "migrate: objects: {copied} copied, {reused} reused, {bytes} bytes verified"
            )),
            Mode::Bars { objects, .. } => {
                objects.set_position(copied + reused);
                objects.set_message(format!("{bytes} bytes verified ({reused} reused)"));
            }
        }
    }

    fn table(&self, index: usize, rows: u64) {
        let (done, name) = match self.plan.lock() {
            Ok(mut p) => {
                p.0 += rows;
                let name =
                    p.1.get(index)
                        .cloned()
                        .unwrap_or_else(|| format!("#{index}"));
                (p.0, name)
            }
            Err(_) => (rows, format!("#{index}")),
        };
        match &self.mode {
            Mode::Silent => {}
            Mode::Lines => out::err(format_args!("migrate: table {name}: {rows} rows copied")),
            Mode::Bars { tables, .. } => {
                tables.inc(1);
                tables.set_message(format!("{done} rows"));
            }
        }
    }
}

fn json_line(out: &mut Out, value: &impl serde::Serialize) -> std::io::Result<()> {
    match serde_json::to_string_pretty(value) {
        Ok(s) => out.line(s),
        Err(e) => {
            out::err(format_args!("custos migrate: cannot encode: {e}"));
            Ok(())
        }
    }
}

/// Prints a frozen plan.
pub fn plan(out: &mut Out, plan: &Plan, json: bool) -> std::io::Result<()> {
    if json {
        return json_line(out, plan);
    }
    writeln!(
        out,
        "plan {} for migration {}",
        plan.digest().hex(),
        plan.migration_id
    )?;
    writeln!(out, "source      {}", plan.source.uri())?;
    writeln!(out, "destination {}", plan.destination.uri())?;
    for w in &plan.worlds {
        writeln!(
            out,
            "world {:<24} fenced at epoch {}{}",
            w.world,
            w.source_epoch,
            if w.resumable { " (resumable)" } else { "" }
        )?;
    }
    for t in &plan.tables {
        writeln!(
            out,
            "table {:<34} {:>10} rows  {:?}",
            t.name, t.source.rows, t.classification
        )?;
    }
    writeln!(
        out,
        "artifacts: {} occurrences, {} objects, {} bytes",
        plan.artifacts.occurrences,
        plan.artifacts.objects.len(),
        plan.artifacts.total_bytes()
    )?;
    writeln!(out, "control: {} records", plan.control.records)
}

fn resume_text(r: &Resume) -> String {
    match r {
        Resume::NotApplicable => "not applicable (no active resumable World)".into(),
        Resume::NotExercised => {
            "not exercised (read-only; --resume-and-tick resumes the World and commits a tick)"
                .into()
        }
        Resume::Resumed { world, epoch, tick } => {
            format!("world {world} resumed at epoch {epoch}, tick {tick} committed")
        }
    }
}

/// Prints a receipt.
pub fn receipt(out: &mut Out, stored: &StoredReceipt, json: bool) -> std::io::Result<()> {
    if json {
        return json_line(out, stored);
    }
    let r = &stored.receipt;
    writeln!(out, "migration {} completed", r.migration_id)?;
    writeln!(out, "receipt digest {}", stored.digest.hex())?;
    writeln!(out, "plan digest    {}", r.plan_digest.hex())?;
    for t in &r.tables {
        writeln!(
            out,
            "table {:<34} {:>10} rows  snapshot {} -> {}",
            t.name, t.rows, t.source_snapshot, t.destination_snapshot
        )?;
    }
    writeln!(
        out,
        "artifacts: {} occurrences, {} objects, {} bytes verified",
        r.artifacts.occurrences, r.artifacts.objects, r.artifacts.verified_bytes
    )?;
    writeln!(
        out,
        "control: {} records, {} worlds, {} fence floors, {:?}",
        r.control.records, r.control.worlds, r.control.fence_floors, r.control.activation
    )?;
    writeln!(
        out,
        "cold verification: {}",
        resume_text(&r.cold_verification.resume)
    )
}

/// Prints re-verification evidence of `mode`.
pub fn evidence(
    out: &mut Out,
    stored: &StoredReceipt,
    e: &ColdEvidence,
    mode: VerifyMode,
    json: bool,
) -> std::io::Result<()> {
    if json {
        return json_line(
            out,
            &serde_json::json!({
                "verified": true,
                "mode": mode,
                "receipt_digest": stored.digest.hex(),
                "plan_digest": stored.receipt.plan_digest.hex(),
                "evidence": e,
            }),
        );
    }
    writeln!(out, "receipt {} verified ({mode})", stored.digest.hex())?;
    writeln!(out, "plan {}", stored.receipt.plan_digest.hex())?;
    writeln!(
        out,
        "{} worlds discovered, {} tables, {} objects verified",
        e.worlds_discovered,
        e.tables.len(),
        e.objects_verified
    )?;
    if mode == VerifyMode::ReadOnly {
        writeln!(out, "nothing written: no fence taken, no tick committed")?;
    }
    writeln!(out, "resume: {}", resume_text(&e.resume))
}

/// Prints, with `--json`, why a re-verification failed: the stable reason,
/// the message, and what differs — each table with its evidence, each
/// object with its address, or the receipt binding that does not hold.
pub fn verify_failure(
    out: &mut Out,
    stored: &StoredReceipt,
    mode: VerifyMode,
    e: &WorkflowError,
) -> std::io::Result<()> {
    let (discrepancies, receipt) = match e {
        WorkflowError::Refused(MigrationError::ColdVerificationFailed(f)) => {
            (f.discrepancies.as_slice(), None)
        }
        WorkflowError::Refused(MigrationError::ReceiptMismatch(m)) => (&[][..], Some(m)),
        _ => (&[][..], None),
    };
    json_line(
        out,
        &serde_json::json!({
            "verified": false,
            "mode": mode,
            "receipt_digest": stored.digest.hex(),
            "reason": e.reason(),
            "message": e.to_string(),
            "discrepancies": discrepancies,
            "receipt_mismatch": receipt,
        }),
    )
}

/// A failed cold verification with more than one difference, as lines: the
/// reason, then each difference on its own line (`None`: one line says it).
pub fn differences(e: &WorkflowError) -> Option<String> {
    let WorkflowError::Refused(MigrationError::ColdVerificationFailed(f)) = e else {
        return None;
    };
    if f.discrepancies.len() < 2 {
        return None;
    }
    let mut text = format!(
        "cold-verification-failed: the destination differs from the receipt's plan in {} ways [{}]",
        f.discrepancies.len(),
        e.reason()
    );
    for d in &f.discrepancies {
        text.push_str("\n  ");
        text.push_str(&d.to_string());
    }
    Some(text)
}
