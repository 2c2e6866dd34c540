//! The object-store conformance suite, through core's
//! [`ObjectStore`] port: an object put is probed and read back whole; a
//! content address is never overwritten; `put_new` stores only bytes that
//! verify and nothing when its source fails; a read refuses an object
//! longer than its limit without reading it; a symbolic link or directory
//! at an address fails closed; only content addresses beneath the root are
//! served; stored objects survive a reopen of their root, and a refused
//! put leaves nothing across one.
//!
//! A backend runs it with a fixture ([`ObjectFixture`]): fresh empty
//! stores, their root, a reopen of a store's root, and a way to plant what a store's own API never
//! writes (other bytes at an address, a symbolic link, a directory).
//! Cases panic (via `assert!`) on a violation: they are test bodies.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use custos_core::migration::artifacts::{
    content_address, facts_of, measure, put_bytes, Entry, Measured, ObjectError, ObjectRead,
    ObjectStore,
};
use custos_core::migration::{Digest, NormalizedUri};
use std::io::Read;

/// What a fixture plants at an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plant {
    /// A regular object holding these bytes.
    Bytes(Vec<u8>),
    /// A symbolic link (to anything).
    Symlink,
    /// A directory.
    Directory,
}

/// A backend under test.
pub trait ObjectFixture {
    /// The store type.
    type Store: ObjectStore;
    /// A fresh, empty, writable store.
    fn fresh(&self) -> Self::Store;
    /// The root `store` serves.
    fn root(&self, store: &Self::Store) -> NormalizedUri;
    /// Places `what` at `uri` (a content address beneath the root) behind
    /// the store's back.
    fn plant(&self, store: &Self::Store, uri: &NormalizedUri, what: Plant);
    /// Closes `store` (drops it) and opens its root again, as a restart
    /// would: a new store over the same objects.
    fn reopen(&self, store: Self::Store) -> Self::Store;
}

fn address<X: ObjectFixture>(fx: &X, s: &X::Store, bytes: &[u8]) -> NormalizedUri {
    content_address(&fx.root(s), &Digest::of(bytes)).unwrap()
}

fn read_all(s: &dyn ObjectStore, uri: &NormalizedUri, limit: u64) -> Vec<u8> {
    match s.read(uri, limit).unwrap() {
        ObjectRead::Bytes(b) => b,
        ObjectRead::Stream(r) => {
            let mut out = Vec::new();
            r.take(limit + 1).read_to_end(&mut out).unwrap();
            out
        }
    }
}

fn object(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

// ------------------------------------------------------------------ cases

/// Stored objects survive a drop and a reopen of their root: each probes
/// as a regular file of its length, reads back byte for byte, and is still
/// never overwritten.
pub fn put_objects_survive_a_reopen<X: ObjectFixture>(fx: X) {
    let s = fx.fresh();
    let objects = [Vec::new(), object(10), object(200_003)];
    for bytes in &objects {
        put_bytes(&s, &address(&fx, &s, bytes), bytes).unwrap();
    }
    let s2 = fx.reopen(s);
    for bytes in &objects {
        let at = address(&fx, &s2, bytes);
        let len = bytes.len() as u64;
        assert_eq!(s2.probe(&at).unwrap(), Entry::RegularFile { len });
        assert_eq!(&read_all(&s2, &at, len), bytes);
        assert_eq!(
            put_bytes(&s2, &at, bytes).unwrap_err(),
            ObjectError::Exists(Entry::RegularFile { len })
        );
    }
}

/// A refused put leaves nothing across a reopen: after bytes that do not
/// verify, the reopened root holds no object at the address, and the
/// expected bytes then store.
pub fn a_refused_put_leaves_nothing_across_a_reopen<X: ObjectFixture>(fx: X) {
    let s = fx.fresh();
    let bytes = object(5000);
    let at = address(&fx, &s, &bytes);
    let mut other = bytes.clone();
    other[17] ^= 1;
    assert!(matches!(
        s.put_new(&at, &mut other.as_slice(), &facts_of(&bytes)),
        Err(ObjectError::Mismatch(_))
    ));
    let s2 = fx.reopen(s);
    assert_eq!(s2.probe(&at).unwrap(), Entry::Missing);
    put_bytes(&s2, &at, &bytes).unwrap();
    assert_eq!(read_all(&s2, &at, 5000), bytes);
}

/// A put object (an empty one and one of several chunks) is probed as a
/// regular file of its length and reads back byte for byte, its facts
/// those of the bytes put.
pub fn a_put_object_reads_back_whole<X: ObjectFixture>(fx: X) {
    let s = fx.fresh();
    for bytes in [Vec::new(), object(200_003)] {
        let at = address(&fx, &s, &bytes);
        assert_eq!(s.probe(&at).unwrap(), Entry::Missing);
        put_bytes(&s, &at, &bytes).unwrap();
        assert_eq!(
            s.probe(&at).unwrap(),
            Entry::RegularFile {
                len: bytes.len() as u64
            }
        );
        assert_eq!(read_all(&s, &at, bytes.len() as u64), bytes);
        let m = measure(s.read(&at, bytes.len() as u64).unwrap(), bytes.len() as u64).unwrap();
        assert_eq!(m, Measured::Facts(facts_of(&bytes)));
    }
}

/// An address that holds anything is never overwritten: the same bytes
/// again, other bytes, anything is `Exists`, and the object stays.
pub fn a_content_address_is_never_overwritten<X: ObjectFixture>(fx: X) {
    let s = fx.fresh();
    let bytes = object(1000);
    let at = address(&fx, &s, &bytes);
    put_bytes(&s, &at, &bytes).unwrap();
    let e = put_bytes(&s, &at, &bytes).unwrap_err();
    assert_eq!(e, ObjectError::Exists(Entry::RegularFile { len: 1000 }));
    // Planted other bytes at an address stay as they are, too.
    let other = object(10);
    let at_other = address(&fx, &s, &other);
    fx.plant(&s, &at_other, Plant::Bytes(b"not the object".to_vec()));
    assert!(matches!(
        put_bytes(&s, &at_other, &other),
        Err(ObjectError::Exists(Entry::RegularFile { len: 14 }))
    ));
    assert_eq!(read_all(&s, &at_other, 100), b"not the object");
    assert_eq!(read_all(&s, &at, 1000), bytes);
}

/// `put_new` stores only the expected object: other bytes, fewer, more and
/// an endless stream are `Mismatch` (the endless one read to size + 1
/// only) and leave the address empty; the expected bytes then store.
pub fn put_stores_only_bytes_that_verify<X: ObjectFixture>(fx: X) {
    let s = fx.fresh();
    let bytes = object(5000);
    let good = facts_of(&bytes);
    let at = address(&fx, &s, &bytes);
    let mut changed = bytes.clone();
    changed[4999] ^= 1;
    let mut longer = bytes.clone();
    longer.push(0);
    for (what, wrong) in [
        ("changed", changed),
        ("shorter", bytes[..4999].to_vec()),
        ("longer", longer),
    ] {
        let e = s.put_new(&at, &mut wrong.as_slice(), &good).unwrap_err();
        assert!(matches!(e, ObjectError::Mismatch(_)), "{what}: {e}");
        assert_eq!(s.probe(&at).unwrap(), Entry::Missing, "{what}");
    }
    let e = s.put_new(&at, &mut std::io::repeat(7), &good).unwrap_err();
    assert_eq!(e, ObjectError::Mismatch(Measured::Longer));
    assert_eq!(s.probe(&at).unwrap(), Entry::Missing);
    s.put_new(&at, &mut bytes.as_slice(), &good).unwrap();
    assert_eq!(read_all(&s, &at, 5000), bytes);
}

/// Reads the bytes it holds, then fails.
struct FailingAfter(std::io::Cursor<Vec<u8>>);

impl std::io::Read for FailingAfter {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.0.read(buf)? {
            0 => Err(std::io::Error::other("injected source failure")),
            n => Ok(n),
        }
    }
}

/// A source that fails mid-stream is `ObjectError::Source` (told apart
/// from the store's own failures) and stores nothing.
pub fn a_failing_source_stores_nothing<X: ObjectFixture>(fx: X) {
    let s = fx.fresh();
    let bytes = object(70_000);
    let at = address(&fx, &s, &bytes);
    let mut src = FailingAfter(std::io::Cursor::new(bytes[..30_000].to_vec()));
    let e = s.put_new(&at, &mut src, &facts_of(&bytes)).unwrap_err();
    let ObjectError::Source(detail) = &e else {
        panic!("{e}")
    };
    assert!(detail.contains("injected source failure"), "{detail}");
    assert_eq!(s.probe(&at).unwrap(), Entry::Missing);
}

/// A read of an object longer than its limit is `TooLong` (by its length,
/// without reading it); at the limit it reads.
pub fn a_read_beyond_its_limit_is_refused<X: ObjectFixture>(fx: X) {
    let s = fx.fresh();
    let bytes = object(4096);
    let at = address(&fx, &s, &bytes);
    put_bytes(&s, &at, &bytes).unwrap();
    assert_eq!(
        s.read(&at, 4095).map(|_| ()).unwrap_err(),
        ObjectError::TooLong { len: 4096 }
    );
    assert_eq!(read_all(&s, &at, 4096).len(), 4096);
}

/// A symbolic link or a directory at a content address is never followed
/// or replaced: probe names it, read is `NotRegularFile`, put is `Exists`.
pub fn non_regular_entries_fail_closed<X: ObjectFixture>(fx: X) {
    let s = fx.fresh();
    for (plant, entry) in [
        (Plant::Symlink, Entry::Symlink),
        (Plant::Directory, Entry::Directory),
    ] {
        let bytes = format!("{entry:?}").into_bytes();
        let at = address(&fx, &s, &bytes);
        fx.plant(&s, &at, plant);
        assert_eq!(s.probe(&at).unwrap(), entry);
        assert_eq!(
            s.read(&at, 1 << 20).map(|_| ()).unwrap_err(),
            ObjectError::NotRegularFile(entry)
        );
        assert_eq!(
            put_bytes(&s, &at, &bytes).unwrap_err(),
            ObjectError::Exists(entry)
        );
        assert_eq!(s.probe(&at).unwrap(), entry);
    }
}

/// Only content addresses beneath the root are served: another root's
/// address, the root itself and a malformed address are `NotServed` for
/// probe, read and put alike; an absent object is `Missing`.
pub fn only_content_addresses_beneath_the_root_are_served<X: ObjectFixture>(fx: X) {
    let s = fx.fresh();
    let root = fx.root(&s);
    let d = Digest::of(b"x");
    let elsewhere = content_address(
        &NormalizedUri::parse("file:///elsewhere/objects").unwrap(),
        &d,
    )
    .unwrap();
    let malformed =
        NormalizedUri::parse(&format!("{}/sha256/zz/{}", root.as_str(), d.hex())).unwrap();
    for uri in [elsewhere, root.clone(), malformed] {
        assert_eq!(s.probe(&uri), Err(ObjectError::NotServed), "{uri}");
        assert_eq!(
            s.read(&uri, 10).map(|_| ()),
            Err(ObjectError::NotServed),
            "{uri}"
        );
        assert_eq!(
            put_bytes(&s, &uri, b"x"),
            Err(ObjectError::NotServed),
            "{uri}"
        );
    }
    let absent = content_address(&root, &d).unwrap();
    assert_eq!(s.read(&absent, 10).map(|_| ()), Err(ObjectError::Missing));
}

/// Every object-store case, by name, in suite order.
pub const OBJECT_STORE_CASES: &[&str] = &crate::__with_object_store_cases!(__emit_names!());

/// Emits `mod $name { #[test] fn <case>() … }`: one test per object-store
/// case, each calling the case with `$fixture` (evaluated once per test).
#[macro_export]
macro_rules! object_store_suite {
    ($name:ident, $fixture:expr $(,)?) => {
        $crate::__suite!(__with_object_store_cases, objects, $name, $fixture);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __with_object_store_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            a_put_object_reads_back_whole,
            a_content_address_is_never_overwritten,
            put_stores_only_bytes_that_verify,
            a_failing_source_stores_nothing,
            a_read_beyond_its_limit_is_refused,
            non_regular_entries_fail_closed,
            only_content_addresses_beneath_the_root_are_served,
            put_objects_survive_a_reopen,
            a_refused_put_leaves_nothing_across_a_reopen,
        }
    };
}
