//! One exit-status contract for every command: what the status tells a
//! script, and whether the change happened. Every command group maps its
//! errors here through their [`Class`] ([`Exit::of`]), never through a
//! reason string; `custos --help` prints [`TABLE`].

use std::process::ExitCode;

use custos_core::Class;

/// The exit statuses of every `custos` command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Exit {
    /// Done.
    Ok = 0,
    /// An unexpected fault (an I/O error, a backend fault, a bug): nothing
    /// was committed unless the message says so; retrying may help.
    Fault = 1,
    /// Usage: bad arguments or invalid input. Fix the request.
    Usage = 2,
    /// What the command names does not exist (or is not the caller's).
    NotFound = 3,
    /// A conflict: it exists already, or the state moved since it was read.
    /// Re-read, then decide again.
    Conflict = 4,
    /// Unavailable: locked by another process, a timeout, a server that
    /// does not answer, a durability not yet certain. Retry later (see
    /// `--wait`).
    Unavailable = 5,
    /// Refused: a rule or the object's state forbids it (revoked, another
    /// tenant's, a limit or a full disk, an endpoint outside what is
    /// supported). An unchanged retry cannot succeed.
    Refused = 6,
    /// Stored state is damaged or does not verify. Preserve it; restore
    /// from a backup or trusted source.
    Corrupt = 7,
    /// The change IS committed, but its report could not be written (a
    /// closed pipe, a full device). Read the state before deciding anything.
    Unreported = 8,
}

/// The table `custos --help` and the README print.
pub const TABLE: &str = "\
Exit status (every command):
  0  done
  1  fault: an unexpected I/O, backend or internal failure; nothing committed unless said
  2  usage: bad arguments or invalid input
  3  not found (or not the caller's to see)
  4  conflict: exists already, or the state moved since it was read; re-read, decide again
  5  unavailable: locked, timed out, no answer, durability uncertain; retry later (--wait)
  6  refused: a rule or the state forbids it (revoked, a limit, a full disk, unsupported endpoint)
  7  corrupt: stored state is damaged or does not verify; preserve it and restore
  8  committed but unreported: the change happened; its report could not be written
141  stdout is a closed pipe (nothing changed)";

impl Exit {
    /// The status of an error's [`Class`]: what the class tells a script
    /// to do next.
    pub fn of(class: Class) -> Exit {
        match class {
            Class::InvalidArgument => Exit::Usage,
            Class::NotFound | Class::RouteUnavailable | Class::IncompatibleContract => {
                Exit::NotFound
            }
            Class::AlreadyExists | Class::StateConflict => Exit::Conflict,
            Class::Unavailable => Exit::Unavailable,
            Class::FailedPrecondition
            | Class::PermissionDenied
            | Class::ResourceExhausted
            | Class::Unsupported => Exit::Refused,
            Class::CorruptArtifact => Exit::Corrupt,
            Class::Internal => Exit::Fault,
        }
    }

    /// The status as a number.
    pub fn code(self) -> u8 {
        self as u8
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_is_in_the_table_once() {
        for e in [
            Exit::Ok,
            Exit::Fault,
            Exit::Usage,
            Exit::NotFound,
            Exit::Conflict,
            Exit::Unavailable,
            Exit::Refused,
            Exit::Corrupt,
            Exit::Unreported,
        ] {
            let row = format!("\n  {}  ", e.code());
            assert_eq!(TABLE.matches(&row).count(), 1, "{e:?}");
        }
        assert_eq!(Exit::of(Class::CorruptArtifact), Exit::Corrupt);
        assert_eq!(Exit::of(Class::Internal), Exit::Fault);
        // Every class has a status other than success and "unreported".
        for c in Class::ALL {
            assert!(!matches!(Exit::of(c), Exit::Ok | Exit::Unreported), "{c}");
        }
    }
}
