//! The host-wide exclusion of migration drivers, one per storage identity.
//!
//! Two drivers of one endpoint at once would fence the source under each
//! other and invalidate each other's plan, so `plan`, `run` and `abandon`
//! hold the lock of each endpoint they touch for their whole lifetime,
//! and a second one is refused at once (`migration-running`).
//!
//! On Linux the lock is a Unix socket bound in the abstract namespace
//! under the identity's fingerprint: the kernel admits one binder per name
//! in a network namespace, whatever the processes' environment (`TMPDIR`,
//! working directory, user), never leaves a file behind, and releases it
//! when the process ends however it ends (SIGKILL included). The socket is
//! close-on-exec, so the cold verifier child never holds it. Processes in
//! different network namespaces (containers) do not exclude each other:
//! local v1 is one host and one namespace. Elsewhere the lock is an
//! exclusive lock file in the system temp directory (named by the same
//! fingerprint), which follows `TMPDIR`.

use custos_core::migration::StorageIdentity;

/// A held lock; released when dropped (or when the process ends).
pub struct HostLock {
    #[cfg(target_os = "linux")]
    _socket: std::os::unix::net::UnixListener,
    #[cfg(not(target_os = "linux"))]
    _file: Box<dyn custos_fs::fs::LockGuard>,
}

/// The lock's name for `identity`.
pub fn name(identity: &StorageIdentity) -> String {
    format!("custos-migrate-{}", identity.fingerprint().hex())
}

/// Takes the lock of `identity`: `Ok(None)` when another process holds it.
#[cfg(target_os = "linux")]
pub fn try_lock(identity: &StorageIdentity) -> std::io::Result<Option<HostLock>> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let addr = SocketAddr::from_abstract_name(name(identity).as_bytes())?;
    match UnixListener::bind_addr(&addr) {
        Ok(socket) => Ok(Some(HostLock { _socket: socket })),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Ok(None),
        Err(e) => Err(e),
    }
}

/// Takes the lock of `identity`: `Ok(None)` when another process holds it.
#[cfg(not(target_os = "linux"))]
pub fn try_lock(identity: &StorageIdentity) -> std::io::Result<Option<HostLock>> {
    use custos_fs::Fs;
    let path = std::env::temp_dir().join(format!("{}.lock", name(identity)));
    match custos_fs::RealFs.try_lock_exclusive(&path) {
        Ok(Some(g)) => Ok(Some(HostLock { _file: g })),
        Ok(None) => Ok(None),
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}

/// Why the locks of a command's endpoints could not all be taken (those
/// taken before are released).
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another driver holds the lock of `uri`: retry when it ends.
    #[error("migration-running: another custos migrate holds {uri}; wait for it, then retry")]
    Running {
        /// The endpoint's uri.
        uri: String,
    },
    /// The lock of `uri` could not be taken at all.
    #[error("the host lock of {uri}: {source}")]
    Io {
        /// The endpoint's uri.
        uri: String,
        /// Why.
        source: std::io::Error,
    },
}

impl LockError {
    /// The class: unavailable (another driver runs), or internal.
    pub fn class(&self) -> custos_core::Class {
        match self {
            LockError::Running { .. } => custos_core::Class::Unavailable,
            LockError::Io { .. } => custos_core::Class::Internal,
        }
    }
}

/// Takes the locks of every identity of `identities` for a command's
/// lifetime (identical identities share one: preflight then refuses
/// them). A second `plan`, `run` or `abandon` on either endpoint while one
/// runs is refused at once — two drivers would fence the source under
/// each other and invalidate the plan.
pub fn take_all(identities: &[&StorageIdentity]) -> Result<Vec<HostLock>, LockError> {
    let mut held = Vec::new();
    let mut seen: Vec<&StorageIdentity> = Vec::new();
    for id in identities {
        if seen.contains(id) {
            continue;
        }
        seen.push(id);
        let uri = || id.uri().to_string();
        match try_lock(id) {
            Ok(Some(g)) => held.push(g),
            Ok(None) => return Err(LockError::Running { uri: uri() }),
            Err(source) => return Err(LockError::Io { uri: uri(), source }),
        }
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn id(uri: &str) -> StorageIdentity {
        StorageIdentity::new(uri, "default", "iceberg").unwrap()
    }

    #[test]
    fn one_holder_per_identity_until_it_lets_go() {
        let a = id("file:///lock-test/a");
        let b = id("file:///lock-test/b");
        let held = try_lock(&a).unwrap().expect("free");
        assert!(try_lock(&a).unwrap().is_none(), "held twice");
        let other = try_lock(&b).unwrap().expect("another identity is free");
        drop(held);
        assert!(try_lock(&a).unwrap().is_some(), "released on drop");
        drop(other);
    }

    #[test]
    fn taking_all_refuses_a_held_one_and_releases_what_it_took() {
        let a = id("file:///lock-test/all-a");
        let b = id("file:///lock-test/all-b");
        let both = take_all(&[&a, &b, &a]).unwrap();
        assert_eq!(both.len(), 2, "an identity named twice is one lock");
        assert!(matches!(take_all(&[&b]), Err(LockError::Running { .. })));
        drop(both);
        let held_b = try_lock(&b).unwrap().expect("free");
        assert!(matches!(
            take_all(&[&a, &b]),
            Err(LockError::Running { .. })
        ));
        assert!(
            try_lock(&a).unwrap().is_some(),
            "a refused take released what it took"
        );
        drop(held_b);
    }
}
