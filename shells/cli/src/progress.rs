//! Progress for long commands, always on stderr, never on stdout (which
//! carries the report a pipe reads): on a terminal one `indicatif` bar over
//! the stages; otherwise one plain line per stage (`demo: 2/5 tables…`), as
//! a log or a CI job shows it. `custos migrate` draws its own richer bars
//! (bytes and objects); this is the shared shape for the others.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A command's stages, counted.
pub struct Stages {
    label: &'static str,
    total: u64,
    done: u64,
    bar: Option<ProgressBar>,
}

impl Stages {
    /// `total` stages of the command `label`; a bar when stderr is a
    /// terminal, plain lines otherwise.
    pub fn new(label: &'static str, total: u64) -> Self {
        Self::to(label, total, std::io::stderr().is_terminal())
    }

    /// As [`Stages::new`], the choice of a bar made by the caller.
    pub fn to(label: &'static str, total: u64, terminal: bool) -> Self {
        let bar = terminal.then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            // A literal template: it always parses; the default style else.
            if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:24}] {pos}/{len} {msg}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_prefix(label);
            bar
        });
        Stages {
            label,
            total,
            done: 0,
            bar,
        }
    }

    /// The next stage begins: `what` it does.
    pub fn stage(&mut self, what: impl Into<String>) {
        let what = what.into();
        self.done += 1;
        match &self.bar {
            Some(bar) => {
                bar.set_position(self.done.saturating_sub(1));
                bar.set_message(what);
            }
            None => crate::out::err(format_args!(
                "{}: {}/{} {what}",
                self.label, self.done, self.total
            )),
        }
    }

    /// Every stage is done: the bar is cleared (plain lines need nothing).
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
