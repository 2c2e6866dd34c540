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

/// The fewest items for which a plain (non-terminal) count prints lines.
pub const PLAIN_FROM: u64 = 100;

/// Progress through `total` items of one stage: a bar on a terminal;
/// otherwise, for a stage of at least [`PLAIN_FROM`] items, a plain line
/// when it starts and at each further tenth done (at most eleven lines,
/// whatever the count). A short stage prints no plain line.
pub struct Count {
    quiet: bool,
    label: &'static str,
    what: &'static str,
    total: u64,
    printed_tenths: u64,
    bar: Option<ProgressBar>,
}

// Only the filesystem catalogs' commands count (`make check` builds
// without them).
#[cfg_attr(not(feature = "fs"), allow(dead_code))]
impl Count {
    /// `total` items of `what` for the command `label`.
    pub fn new(label: &'static str, what: &'static str, total: u64) -> Self {
        Self::to(label, what, total, std::io::stderr().is_terminal())
    }

    /// As [`Count::new`], the choice of a bar made by the caller.
    pub fn to(label: &'static str, what: &'static str, total: u64, terminal: bool) -> Self {
        let bar = terminal.then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:24}] {pos}/{len} {msg}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_prefix(label);
            bar.set_message(what);
            bar
        });
        let quiet = bar.is_none() && total < PLAIN_FROM;
        if bar.is_none() && !quiet {
            crate::out::err(format_args!("{label}: 0/{total} {what}"));
        }
        Count {
            quiet,
            label,
            what,
            total,
            printed_tenths: 0,
            bar,
        }
    }

    /// `done` items are done.
    pub fn set(&mut self, done: u64) {
        match &self.bar {
            Some(bar) => bar.set_position(done),
            None if self.quiet => {}
            None => {
                let tenths = done.saturating_mul(10) / self.total.max(1);
                if tenths > self.printed_tenths {
                    self.printed_tenths = tenths;
                    crate::out::err(format_args!(
                        "{}: {done}/{} {}",
                        self.label, self.total, self.what
                    ));
                }
            }
        }
    }

    /// The stage is over: the bar is cleared.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_progress_is_bounded_whatever_the_count() {
        // Without a terminal, at most one line per tenth (eleven with the
        // first); the lines go to stderr, so here only the bound on
        // decisions is observable: tenths never exceed ten and never go
        // back.
        let mut c = Count::to("t", "items", 100_000, false);
        let mut seen = Vec::new();
        for done in 0..=100_000u64 {
            let before = c.printed_tenths;
            c.set(done);
            if c.printed_tenths != before {
                seen.push(c.printed_tenths);
            }
        }
        assert_eq!(seen, (1..=10).collect::<Vec<_>>());
        c.finish();
        let mut short = Count::to("t", "items", PLAIN_FROM - 1, false);
        for done in 0..PLAIN_FROM {
            short.set(done);
        }
        assert_eq!(short.printed_tenths, 0, "a short stage prints nothing");
        let mut empty = Count::to("t", "items", 0, false);
        empty.set(0);
        assert_eq!(empty.printed_tenths, 0);
    }
}
