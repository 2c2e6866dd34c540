//! The object-store conformance suite against the memory backend
//! (`custos_core::migration::artifacts::MemoryObjectStore`), and its teeth:
//! broken stores wrapping it, each a mistake a real store could make, must
//! fail the case written for their defect and pass an unrelated one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Read;
use std::panic::{catch_unwind, AssertUnwindSafe};

use custos_conformance::objects::{self as suite, ObjectFixture, Plant};
use custos_core::migration::artifacts::{
    put_bytes, Entry, MemoryEntry, MemoryObjectStore, ObjectError, ObjectRead, ObjectStore,
};
use custos_core::migration::{NormalizedUri, ObjectFacts};

fn root() -> NormalizedUri {
    NormalizedUri::parse("file:///srv/objects").unwrap()
}

fn plant(s: &MemoryObjectStore, uri: &NormalizedUri, what: Plant) {
    let entry = match what {
        Plant::Bytes(b) => MemoryEntry::Bytes(b),
        Plant::Symlink => MemoryEntry::Symlink,
        Plant::Directory => MemoryEntry::Directory,
    };
    s.plant(uri, entry).unwrap();
}

struct Memory;

impl ObjectFixture for Memory {
    type Store = MemoryObjectStore;
    fn fresh(&self) -> MemoryObjectStore {
        MemoryObjectStore::new(root())
    }
    fn root(&self, s: &MemoryObjectStore) -> NormalizedUri {
        s.root().clone()
    }
    fn plant(&self, s: &MemoryObjectStore, uri: &NormalizedUri, what: Plant) {
        plant(s, uri, what);
    }
    fn reopen(&self, s: MemoryObjectStore) -> MemoryObjectStore {
        // Nothing in the memory store is durable: its "reopen" shares the
        // first handle's map.
        s.reopen()
    }
}

custos_conformance::object_store_suite!(memory_objects, Memory);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Defect {
    /// Replaces whatever is at the address.
    Overwrites,
    /// Stores the bytes it read without comparing them with the expected.
    StoresUnverified,
    /// Follows a symbolic link (reports what it points at as an object).
    FollowsSymlinks,
    /// Reads an object whole whatever its length.
    IgnoresTheLimit,
    /// Keeps what it read before its source failed.
    KeepsAPartialObject,
    /// Keeps its objects in memory behind a durable name: a reopen of
    /// the root starts empty.
    MemoryOnly,
}

struct Broken {
    defect: Defect,
    inner: MemoryObjectStore,
}

impl ObjectStore for Broken {
    fn probe(&self, uri: &NormalizedUri) -> Result<Entry, ObjectError> {
        match self.inner.probe(uri)? {
            Entry::Symlink if self.defect == Defect::FollowsSymlinks => {
                Ok(Entry::RegularFile { len: 0 })
            }
            e => Ok(e),
        }
    }
    fn read(&self, uri: &NormalizedUri, limit: u64) -> Result<ObjectRead, ObjectError> {
        match self.defect {
            Defect::IgnoresTheLimit => self.inner.read(uri, u64::MAX),
            Defect::FollowsSymlinks if self.inner.probe(uri)? == Entry::Symlink => {
                Ok(ObjectRead::Bytes(Vec::new()))
            }
            _ => self.inner.read(uri, limit),
        }
    }
    fn put_new(
        &self,
        uri: &NormalizedUri,
        bytes: &mut dyn Read,
        expect: &ObjectFacts,
    ) -> Result<(), ObjectError> {
        match self.defect {
            Defect::Overwrites => {
                let mut all = Vec::new();
                bytes.read_to_end(&mut all).unwrap();
                self.inner.plant(uri, MemoryEntry::Bytes(all))
            }
            Defect::StoresUnverified => {
                let mut all = Vec::new();
                bytes.take(expect.size + 1).read_to_end(&mut all).unwrap();
                if self.inner.probe(uri)? != Entry::Missing {
                    return Err(ObjectError::Exists(self.inner.probe(uri)?));
                }
                self.inner.plant(uri, MemoryEntry::Bytes(all))
            }
            Defect::KeepsAPartialObject => {
                let mut all = Vec::new();
                let read = bytes.read_to_end(&mut all);
                if read.is_err() {
                    self.inner.plant(uri, MemoryEntry::Bytes(all))?;
                    return Err(ObjectError::Source("failed".into()));
                }
                put_bytes(&self.inner, uri, &all)
            }
            _ => self.inner.put_new(uri, bytes, expect),
        }
    }
}

struct BrokenFixture(Defect);

impl ObjectFixture for BrokenFixture {
    type Store = Broken;
    fn fresh(&self) -> Broken {
        Broken {
            defect: self.0,
            inner: MemoryObjectStore::new(root()),
        }
    }
    fn root(&self, s: &Broken) -> NormalizedUri {
        s.inner.root().clone()
    }
    fn plant(&self, s: &Broken, uri: &NormalizedUri, what: Plant) {
        plant(&s.inner, uri, what);
    }
    fn reopen(&self, s: Broken) -> Broken {
        Broken {
            defect: self.0,
            inner: if self.0 == Defect::MemoryOnly {
                MemoryObjectStore::new(root())
            } else {
                s.inner.reopen()
            },
        }
    }
}

type Case = fn(BrokenFixture);

#[test]
fn every_broken_store_is_caught_by_its_case_and_only_breaks_what_it_breaks() {
    let unrelated: Case = suite::only_content_addresses_beneath_the_root_are_served;
    let table: [(Defect, &str, Case); 6] = [
        (
            Defect::MemoryOnly,
            "put_objects_survive_a_reopen",
            suite::put_objects_survive_a_reopen,
        ),
        (
            Defect::Overwrites,
            "a_content_address_is_never_overwritten",
            suite::a_content_address_is_never_overwritten,
        ),
        (
            Defect::StoresUnverified,
            "put_stores_only_bytes_that_verify",
            suite::put_stores_only_bytes_that_verify,
        ),
        (
            Defect::FollowsSymlinks,
            "non_regular_entries_fail_closed",
            suite::non_regular_entries_fail_closed,
        ),
        (
            Defect::IgnoresTheLimit,
            "a_read_beyond_its_limit_is_refused",
            suite::a_read_beyond_its_limit_is_refused,
        ),
        (
            Defect::KeepsAPartialObject,
            "a_failing_source_stores_nothing",
            suite::a_failing_source_stores_nothing,
        ),
    ];
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let report: Vec<_> = table
        .iter()
        .map(|(d, name, case)| {
            let killed = catch_unwind(AssertUnwindSafe(|| case(BrokenFixture(*d)))).is_err();
            let broke = catch_unwind(AssertUnwindSafe(|| unrelated(BrokenFixture(*d)))).is_err();
            (*d, *name, killed, broke)
        })
        .collect();
    std::panic::set_hook(prev);
    for (d, name, killed, broke) in report {
        println!("{d:?}: caught by {name}: {killed}");
        assert!(killed, "{d:?} survived {name}");
        assert!(!broke, "{d:?} broke an unrelated case");
    }
    assert_eq!(custos_conformance::objects::OBJECT_STORE_CASES.len(), 9);
}
