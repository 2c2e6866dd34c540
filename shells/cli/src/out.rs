//! Standard output and error that never panic, and the exit code a failed
//! write ends the program with.
//!
//! `println!` panics when stdout is a closed pipe (`custos models | head -1`)
//! or a full device (`> /dev/full`), and `eprintln!` when stderr is; a
//! storage tool must not end with a panic and exit code 101 over its own
//! output. Every command therefore writes its stdout through an [`Out`] and
//! returns the write's `io::Result`; [`run`] (or [`finish`]) turns the
//! outcome into the exit code:
//!
//! | outcome | exit code | stderr |
//! |---|---|---|
//! | the command's own code | that code | whatever the command wrote |
//! | stdout is a closed pipe (`EPIPE`) | [`BROKEN_PIPE`] = 141 (128 + SIGPIPE, what a shell reports for a tool SIGPIPE ended) | nothing |
//! | any other write error (`ENOSPC`, `EIO`, …) | [`WRITE_FAILED`] = 1 | one line, `custos: cannot write output: <error>` |
//!
//! Messages to stderr go through [`err`], which writes one line and ignores
//! a failure (there is nowhere left to report it).
//!
//! ## Adopting it in a command module
//!
//! ```ignore
//! use std::io::Write;
//! use std::process::ExitCode;
//! use crate::out::{self, Out};
//!
//! pub fn run(cmd: Command) -> ExitCode {
//!     out::run(|out| match cmd {
//!         Command::List { json } => list(out, json),
//!     })
//! }
//!
//! fn list(out: &mut Out, json: bool) -> std::io::Result<ExitCode> {
//!     let rows = match load() {
//!         Ok(rows) => rows,
//!         Err(e) => {
//!             out::err(format_args!("custos releases: {e}"));
//!             return Ok(ExitCode::from(3));
//!         }
//!     };
//!     for r in &rows {
//!         writeln!(out, "{:<10} {}", r.name, r.digest)?; // or out.line(..)?
//!     }
//!     out.line(format_args!("{} release(s)", rows.len()))?;
//!     Ok(ExitCode::SUCCESS)
//! }
//! ```
//!
//! Rules: write stdout only through the `Out` you were given (never
//! `print!`/`println!`), propagate its errors with `?`, and return the
//! command's own exit code as `Ok(code)`; write stderr only with [`err`]
//! (never `eprint!`/`eprintln!`). [`run`] flushes before it answers, so a
//! failure in the last buffered line is caught too.
//!
//! A module with its own error type keeps it and converts: an enum with an
//! `Output(io::Error)` case (`From<io::Error>`, so `out.line(..)?` works)
//! is answered as `Err(e)` to [`run`], every other case as `Ok(code)`.

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;

/// The exit code when stdout is a closed pipe: 128 + SIGPIPE (13).
pub const BROKEN_PIPE: u8 = 141;

/// The exit code when stdout cannot be written for any other reason.
pub const WRITE_FAILED: u8 = 1;

/// A command's standard output: the process's stdout, locked for the
/// command's lifetime. Every write answers an `io::Result`; nothing panics.
/// It implements [`Write`], so `write!` / `writeln!` work on it.
pub struct Out {
    inner: io::StdoutLock<'static>,
}

impl Out {
    /// The process's stdout (line-buffered, as `println!` writes it).
    pub fn stdout() -> Out {
        Out {
            inner: io::stdout().lock(),
        }
    }

    /// Writes `text` and a newline.
    pub fn line(&mut self, text: impl fmt::Display) -> io::Result<()> {
        writeln!(self.inner, "{text}")
    }

    /// Writes `text` as it is (no newline added).
    pub fn text(&mut self, text: impl fmt::Display) -> io::Result<()> {
        write!(self.inner, "{text}")
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Runs a command's `body` with stdout, flushes, and answers the exit code
/// ([`finish`] of what the body and the flush answered).
pub fn run(body: impl FnOnce(&mut Out) -> io::Result<ExitCode>) -> ExitCode {
    let mut out = Out::stdout();
    let result = body(&mut out).and_then(|code| out.flush().map(|()| code));
    finish(result)
}

/// Whether this process committed a change (see [`committed`]).
static COMMITTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Marks that the command's change is committed: from here on a report
/// that cannot be written ends with [`crate::exit::Exit::Unreported`], never as
/// if nothing happened.
#[cfg(any(feature = "fs", feature = "sqlite"))]
pub fn committed() {
    COMMITTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The exit code of a command whose output was written with `result`: its
/// own code on success, [`BROKEN_PIPE`] (quietly) when stdout is a closed
/// pipe, [`WRITE_FAILED`] with one line on stderr for any other write error
/// — and, once the command has [`committed`] its change, 8 (committed but
/// unreported) with one line saying so for any write error.
pub fn finish(result: io::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) if COMMITTED.load(std::sync::atomic::Ordering::SeqCst) => {
            err(format_args!(
                "custos: the change IS committed, but its report could not be written: {e}; read the state before deciding anything"
            ));
            crate::exit::Exit::Unreported.into()
        }
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::from(BROKEN_PIPE),
        Err(e) => {
            err(format_args!("custos: cannot write output: {e}"));
            ExitCode::from(WRITE_FAILED)
        }
    }
}

/// Writes `msg` and a newline to stderr, ignoring a failure (never panics).
pub fn err(msg: impl fmt::Display) {
    let _ = writeln!(io::stderr(), "{}", escape_controls(&msg.to_string()));
}

/// `text` with every control character but the line break escaped
/// (`\u{1b}`, `\r`, …): whatever a message quotes — a stored name, a
/// path — cannot write a terminal sequence. Line breaks stay: messages use
/// them for their "what to do" lines.
pub fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}
