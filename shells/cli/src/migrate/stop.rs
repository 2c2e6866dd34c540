//! SIGINT and SIGTERM during `custos migrate run`: the first asks the run
//! to stop at the next step boundary (the workflow asks
//! [`custos_core::migration::workflow::Progress::interrupted`] before
//! every step, and a run that stops there has stored every step it took),
//! so the run exits with the resumable status and says how to resume. A
//! second signal ends the process at once (128 + the signal), as a kill
//! would — which the migration also survives: a retry resumes.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the first SIGINT or SIGTERM.
static ASKED: AtomicBool = AtomicBool::new(false);

/// Installs the handlers (once per process; a failure to install leaves
/// the default behaviour, a kill, which a retry survives).
pub fn install() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM] {
        // The order matters: the shutdown is checked before the flag is
        // set, so only a signal that finds it set already ends the process.
        let _ = signal_hook::flag::register_conditional_shutdown(signal, 128 + signal, &ASKED);
        let _ = signal_hook::flag::register(signal, &ASKED);
    }
}

/// Whether a stop was asked.
pub fn asked() -> bool {
    ASKED.load(Ordering::SeqCst)
}
