//! The object-store conformance suite against the filesystem Artifact store
//! (`custos_fs::artifacts::ArtifactStore` on real files): the same nine
//! cases the memory store passes, with symbolic links, directories and
//! foreign bytes planted as real entries beneath the root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Mutex;

use custos_conformance::objects::{ObjectFixture, Plant};
use custos_core::migration::NormalizedUri;
use custos_fs::artifacts::ArtifactStore;
use custos_fs::RealFs;

/// Fresh stores in temp dirs, kept until the fixture is dropped.
#[derive(Default)]
struct Files {
    dirs: Mutex<Vec<tempfile::TempDir>>,
}

impl ObjectFixture for Files {
    type Store = ArtifactStore<RealFs>;
    fn fresh(&self) -> ArtifactStore<RealFs> {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(RealFs, &dir.path().join("objects")).unwrap();
        self.dirs.lock().unwrap().push(dir);
        store
    }
    fn root(&self, s: &ArtifactStore<RealFs>) -> NormalizedUri {
        s.root_uri().clone()
    }
    fn reopen(&self, s: ArtifactStore<RealFs>) -> ArtifactStore<RealFs> {
        // The store holds its root's lock until it is dropped.
        let root = s.root().to_path_buf();
        drop(s);
        ArtifactStore::open(RealFs, &root).unwrap()
    }
    fn plant(&self, s: &ArtifactStore<RealFs>, uri: &NormalizedUri, what: Plant) {
        let path = s.path_of(uri).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        match what {
            Plant::Bytes(b) => std::fs::write(&path, b).unwrap(),
            Plant::Symlink => std::os::unix::fs::symlink("/etc/hostname", &path).unwrap(),
            Plant::Directory => std::fs::create_dir(&path).unwrap(),
        }
    }
}

custos_conformance::object_store_suite!(fs_objects, Files::default());
