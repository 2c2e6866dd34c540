//! The command line's one failure type and its one bounded-input reader,
//! shared by every command group.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

/// Why a command stopped: a refusal (exit status and message), or a failed
/// write of its own output.
pub(crate) enum Failure {
    /// Refused or failed with this exit status; the message goes to stderr.
    Refused(u8, String),
    /// The command's own output could not be written.
    Output(std::io::Error),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Output(e)
    }
}

impl Failure {
    /// A refusal with exit status `code`.
    pub(crate) fn new(code: u8, message: impl std::fmt::Display) -> Self {
        Failure::Refused(code, message.to_string())
    }

    /// The message a person reads.
    pub(crate) fn message(&self) -> String {
        match self {
            Failure::Refused(_, message) => message.clone(),
            Failure::Output(e) => format!("cannot write the report: {e}"),
        }
    }

    /// The same failure with its message rewritten by `f` (the status
    /// kept; an output failure unchanged).
    pub(crate) fn map_message(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            Failure::Refused(code, message) => Failure::Refused(code, f(message)),
            output => output,
        }
    }

    /// Runs `body`, the command `custos <group> <name>`: its report to
    /// stdout through [`crate::out::Out`] (a closed pipe or a full device
    /// ends it without a panic), a refusal's message to stderr under the
    /// command's name, with its exit status.
    pub(crate) fn run(
        group: &str,
        name: &str,
        body: impl FnOnce(&mut crate::out::Out) -> Result<(), Failure>,
    ) -> ExitCode {
        crate::out::run(|out| match body(out) {
            Ok(()) => Ok(ExitCode::SUCCESS),
            Err(Failure::Output(e)) => Err(e),
            Err(Failure::Refused(code, msg)) => {
                crate::out::err(format_args!("custos {group} {name}: {msg}"));
                Ok(ExitCode::from(code))
            }
        })
    }

    /// Ends a command of `group` (`custos <group> …`): the message on
    /// stderr, the exit status answered. An output failure is a fault (1).
    pub(crate) fn exit(self, group: &str) -> ExitCode {
        match self {
            Failure::Refused(code, message) => {
                crate::out::err(format_args!("custos {group}: {message}"));
                ExitCode::from(code)
            }
            Failure::Output(e) => {
                crate::out::err(format_args!("custos {group}: cannot write the report: {e}"));
                ExitCode::from(1)
            }
        }
    }
}

/// A refusal with exit status `code`.
pub(crate) fn refused(code: u8, msg: impl Into<String>) -> Failure {
    Failure::Refused(code, msg.into())
}

/// Reads at most `limit` bytes from `r`, through a limit on the bytes
/// actually read (the limit plus one), so a pipe or a device that reports
/// no size is bounded too: the buffer never grows past the limit plus one
/// byte, and more than `limit` is an error.
pub(crate) fn read_bounded_from(r: &mut dyn Read, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    r.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("ResourceExhausted: over the {limit}-byte limit (reading stopped there)"),
        ));
    }
    Ok(bytes)
}

/// Reads the input file `path` (the `what` of the command) through
/// [`read_bounded_from`]; any failure is a usage refusal (2) naming the
/// file.
pub(crate) fn read_input(path: &Path, limit: u64, what: &str) -> Result<Vec<u8>, Failure> {
    let cannot =
        |e: std::io::Error| refused(2, format!("cannot read the {what} {}: {e}", path.display()));
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    read_bounded_from(&mut file, limit).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => refused(
            2,
            format!(
                "ResourceExhausted: the {what} {} is over the {limit}-byte limit (reading stopped there)",
                path.display()
            ),
        ),
        _ => cannot(e),
    })
}
