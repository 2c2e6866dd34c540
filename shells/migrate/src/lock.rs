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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use custos_core::migration::{Name, NormalizedUri};

    fn id(uri: &str) -> StorageIdentity {
        StorageIdentity {
            uri: NormalizedUri::parse(uri).unwrap(),
            namespace: Name::new("default").unwrap(),
            backend: Name::new("iceberg").unwrap(),
        }
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
}
