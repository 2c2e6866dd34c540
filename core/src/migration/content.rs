//! A table's content digest: the deterministic, schema-bound,
//! row-order- and chunk-independent, duplicate-sensitive digest a migration
//! plan binds for every table and a fresh read of the destination must
//! reproduce.
//!
//! **Feeding.** The shell's Arrow reader walks every row of a pinned
//! snapshot, whatever its batches, and writes each cell, in schema column
//! order, into a [`RowWriter`] through typed calls ([`RowWriter::int`],
//! [`RowWriter::utf8`], [`RowWriter::begin_list`], …); a complete row is
//! added to a [`TableDigest`] with [`TableDigest::add_row`]. Partial digests
//! of disjoint row sets combine with [`TableDigest::merge`].
//!
//! **Construction** (recomputable elsewhere; docs/proofs/migration.md has
//! it with worked figures):
//!
//! 1. a row's *canonical bytes*: `u64` column count, then each cell's
//!    self-delimiting, class-tagged encoding ([`tag`]); integers of every
//!    width as 16-byte big-endian two's complement under one tag, floats as
//!    the big-endian IEEE-754 binary64 bits of the value widened to `f64`
//!    (every NaN written as `0x7ff8000000000000`, `-0.0` kept distinct),
//!    text and bytes with a `u64` length; a list or struct with its `u64`
//!    element count; a map with its entry count and its entries (key
//!    encoding then value encoding) **sorted bytewise**, so entry order is
//!    not content; null is its own tag, so a null list is not an empty one
//!    and a null struct is not a struct of nulls;
//! 2. the row's *key*: the 32-byte BLAKE3 hash, in key derivation mode with
//!    the context [`ROW_CONTEXT`], of the canonical bytes;
//! 3. the row's *lane vector*: 2,048 bytes of AES-128-CTR keystream under
//!    the key's first 16 bytes, the counter block starting at its last 16
//!    bytes and incremented as one 128-bit big-endian integer (NIST SP
//!    800-38A), read as 256 little-endian `u64` lanes;
//! 4. the table's *accumulator*: the lane-wise sum, modulo 2⁶⁴, of every
//!    row's lane vector (empty table: all zero) — commutative and
//!    associative, so row order and batch boundaries cannot matter, and
//!    additive rather than XOR, so two copies of a row are not zero copies;
//! 5. the *digest*: SHA-256 of [`DIGEST_DOMAIN`], the 32-byte schema
//!    fingerprint, the row count as a big-endian `u64` and the 256 lanes as
//!    little-endian `u64`s.
//!
//! This is the LtHash construction (Bellare–Micciancio's additive lattice
//! hash, as deployed for set reconciliation) with 64-bit lanes: a multiset
//! collision is a short integer combination of lane vectors that vanishes
//! modulo 2⁶⁴ in all 256 lanes, and 64-bit lanes make the trivial one — a
//! row repeated until its lanes wrap, which 16-bit lanes allow after 2¹⁶
//! copies — need 2⁶⁴ copies. Memory is the 2 KiB accumulator plus one row's
//! canonical bytes, whatever the row count.
//!
//! **Why AES for the lanes.** The expansion has the shape of every
//! extendable-output hash (BLAKE2X behind the deployed LtHash, BLAKE3's own
//! output): a 256-bit hash of the row, then a public keyed permutation in
//! counter mode, secure for LtHash with that permutation modelled as ideal.
//! BLAKE3's output mode computes one 64-byte block at a time on a CPU
//! without AVX-512 (~2.4 µs per row for 2 KiB on the machine this was
//! measured on); AES in counter mode runs eight blocks in flight with
//! AES-NI (~0.3 µs). The `aes` crate picks AES-NI at run time and falls
//! back to a constant-time software AES.
//!
//! **Width variants.** `Utf8`/`LargeUtf8`/`Utf8View`, `Binary`/
//! `LargeBinary`/`BinaryView` and `List`/`LargeList` are written alike
//! because the schema fingerprint already treats them alike; text and
//! bytes carry different tags, as do integers, floats and decimals, so
//! `1`, `1.0`, `"1"` and `b"1"` never collide.

use aes::cipher::{BlockEncrypt as _, KeyInit as _};
use aes::{Aes128Enc, Block};
use blake3::hazmat::HasherExt as _;
use sha2::{Digest as _, Sha256};
use thiserror::Error;

use super::data::Digest;
use crate::schema::{self, Field, LogicalType, Schema};

/// BLAKE3 key-derivation context of a row's lane vector.
pub const ROW_CONTEXT: &str = "custos 2026 migration table row key v2";
/// Domain prefix of the final digest.
pub const DIGEST_DOMAIN: &[u8] = b"custos.migration.content.v2\0";
/// Domain prefix of the migration schema fingerprint.
pub const SCHEMA_DOMAIN: &[u8] = b"custos.migration.schema.v1\0";
/// Lanes of the accumulator.
pub const LANES: usize = 256;

/// AES blocks of one row's lane vector (16 bytes each).
const BLOCKS: usize = LANES * 8 / 16;
// One block is exactly two lanes: every lane gets its value and no block
// is encrypted for nothing ([`add_lanes`] zips the two).
const _: () = assert!(BLOCKS * 2 == LANES);
/// The most bytes one row's canonical encoding may take (a row larger than
/// this is refused rather than buffered).
pub const MAX_ROW_BYTES: usize = 256 << 20;

/// The cell tags of the canonical row encoding. One byte each, written
/// before the cell's payload.
pub mod tag {
    /// A null cell (of any type).
    pub const NULL: u8 = 0x00;
    /// A boolean: one byte, 0 or 1.
    pub const BOOL: u8 = 0x01;
    /// An integer of any width: 16 bytes, big-endian two's complement.
    pub const INT: u8 = 0x02;
    /// A float: 8 bytes, the big-endian bits of the value as `f64`.
    pub const FLOAT: u8 = 0x03;
    /// A decimal: scale (1 byte, signed), then the unscaled value as 16
    /// bytes big-endian two's complement.
    pub const DECIMAL: u8 = 0x04;
    /// A date: days since the epoch as 8 bytes big-endian.
    pub const DATE: u8 = 0x05;
    /// A time of day: unit (1 byte), then 8 bytes big-endian.
    pub const TIME: u8 = 0x06;
    /// A timestamp: unit (1 byte), then 8 bytes big-endian.
    pub const TIMESTAMP: u8 = 0x07;
    /// UTF-8 text: `u64` big-endian length, then the bytes.
    pub const UTF8: u8 = 0x08;
    /// Bytes: `u64` big-endian length, then the bytes.
    pub const BINARY: u8 = 0x09;
    /// Fixed-width bytes (UUIDs included): `u64` length, then the bytes.
    pub const FIXED: u8 = 0x0a;
    /// A list: `u64` element count, then the elements.
    pub const LIST: u8 = 0x10;
    /// A struct: `u64` field count, then the fields in schema order.
    pub const STRUCT: u8 = 0x11;
    /// A map: `u64` entry count, then the entries (key, value) sorted by
    /// their encoded bytes.
    pub const MAP: u8 = 0x12;
}

/// A time unit of a time or timestamp cell; part of the cell encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unit {
    /// Seconds.
    Second,
    /// Milliseconds.
    Millisecond,
    /// Microseconds.
    Microsecond,
    /// Nanoseconds.
    Nanosecond,
}

impl Unit {
    fn byte(self) -> u8 {
        match self {
            Unit::Second => 0,
            Unit::Millisecond => 1,
            Unit::Microsecond => 2,
            Unit::Nanosecond => 3,
        }
    }
}

/// Why a row could not be encoded: the shell fed cells that do not form
/// the row it announced. Nothing is added to the digest.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ContentError {
    /// A nested value or the row ended with a different number of cells
    /// than announced.
    #[error("content-row-shape: a {what} announced {expected} cells and got {got}")]
    Shape {
        /// `row`, `list`, `struct` or `map`.
        what: &'static str,
        /// Announced.
        expected: u64,
        /// Written.
        got: u64,
    },
    /// A cell written outside any row, after the row's last cell, or an
    /// `end_*` that does not close the innermost open value.
    #[error("content-row-order: {0}")]
    Order(&'static str),
    /// The row's canonical bytes exceed [`MAX_ROW_BYTES`].
    #[error("content-row-too-large: a row's canonical encoding exceeds {max} bytes", max = MAX_ROW_BYTES)]
    RowTooLarge,
}

impl ContentError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (a row over the bound is `ResourceExhausted`).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            ContentError::Shape { .. } => Class::InvalidArgument,
            ContentError::Order(..) => Class::InvalidArgument,
            ContentError::RowTooLarge => Class::ResourceExhausted,
        }
    }
}

impl ContentError {
    /// The stable reason string.
    pub fn reason(&self) -> &'static str {
        match self {
            ContentError::Shape { .. } => "content-row-shape",
            ContentError::Order(_) => "content-row-order",
            ContentError::RowTooLarge => "content-row-too-large",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Row,
    List,
    Struct,
    Map,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Row => "row",
            Kind::List => "list",
            Kind::Struct => "struct",
            Kind::Map => "map",
        }
    }
}

/// One open value: what it is, how many cells it announced and has, and
/// for a map where its entries start.
#[derive(Debug)]
struct Frame {
    kind: Kind,
    expected: u64,
    got: u64,
    /// Map only: byte offset of the first entry, and each entry's start.
    entries: Vec<usize>,
    start: usize,
}

/// Writes one row's canonical bytes. Reused across rows (its buffer keeps
/// its capacity; nothing grows with the row count).
#[derive(Debug, Default)]
pub struct RowWriter {
    buf: Vec<u8>,
    stack: Vec<Frame>,
    scratch: Vec<u8>,
    failed: Option<ContentError>,
}

impl RowWriter {
    /// A writer with no open row.
    pub fn new() -> Self {
        RowWriter::default()
    }

    /// Starts a row of `columns` cells, discarding any unfinished one.
    pub fn begin_row(&mut self, columns: u64) {
        self.buf.clear();
        self.stack.clear();
        self.failed = None;
        self.buf.extend_from_slice(&columns.to_be_bytes());
        self.stack.push(Frame {
            kind: Kind::Row,
            expected: columns,
            got: 0,
            entries: Vec::new(),
            start: self.buf.len(),
        });
    }

    fn fail(&mut self, e: ContentError) {
        if self.failed.is_none() {
            self.failed = Some(e);
        }
    }

    /// Counts one cell in the innermost open value (a map entry starts at
    /// every even cell).
    fn cell(&mut self) -> bool {
        let at = self.buf.len();
        match self.stack.last_mut() {
            None => {
                self.fail(ContentError::Order("a cell outside any row"));
                false
            }
            Some(f) if f.kind == Kind::Map && f.got >= f.expected.saturating_mul(2) => {
                let (expected, got) = (f.expected, f.got / 2 + 1);
                self.fail(ContentError::Shape {
                    what: "map",
                    expected,
                    got,
                });
                false
            }
            Some(f) if f.kind != Kind::Map && f.got >= f.expected => {
                let (what, expected, got) = (f.kind.name(), f.expected, f.got + 1);
                self.fail(ContentError::Shape {
                    what,
                    expected,
                    got,
                });
                false
            }
            Some(f) => {
                if f.kind == Kind::Map && f.got % 2 == 0 {
                    f.entries.push(at);
                }
                f.got += 1;
                true
            }
        }
    }

    fn put(&mut self, tag: u8, payload: &[u8]) {
        if self.cell() {
            if self.buf.len().saturating_add(payload.len()) >= MAX_ROW_BYTES {
                self.fail(ContentError::RowTooLarge);
                return;
            }
            self.buf.push(tag);
            self.buf.extend_from_slice(payload);
        }
    }

    fn put_bytes(&mut self, tag: u8, bytes: &[u8]) {
        if self.cell() {
            if self.buf.len().saturating_add(bytes.len()) >= MAX_ROW_BYTES {
                self.fail(ContentError::RowTooLarge);
                return;
            }
            self.buf.push(tag);
            self.buf
                .extend_from_slice(&(bytes.len() as u64).to_be_bytes());
            self.buf.extend_from_slice(bytes);
        }
    }

    /// A null cell.
    pub fn null(&mut self) {
        self.put(tag::NULL, &[]);
    }

    /// A boolean.
    pub fn bool(&mut self, v: bool) {
        self.put(tag::BOOL, &[u8::from(v)]);
    }

    /// An integer of any width, signed or not.
    pub fn int(&mut self, v: i128) {
        self.put(tag::INT, &v.to_be_bytes());
    }

    /// A float (an `f32` is widened exactly). Every NaN is one value.
    pub fn float(&mut self, v: f64) {
        let bits = if v.is_nan() {
            0x7ff8_0000_0000_0000
        } else {
            v.to_bits()
        };
        self.put(tag::FLOAT, &bits.to_be_bytes());
    }

    /// A decimal: its unscaled value and scale.
    pub fn decimal(&mut self, unscaled: i128, scale: i8) {
        let mut p = [0u8; 17];
        p[0] = scale.to_be_bytes()[0];
        p[1..].copy_from_slice(&unscaled.to_be_bytes());
        self.put(tag::DECIMAL, &p);
    }

    /// A date, in days since the epoch.
    pub fn date(&mut self, days: i64) {
        self.put(tag::DATE, &days.to_be_bytes());
    }

    /// A time of day in `unit`s since midnight.
    pub fn time(&mut self, unit: Unit, v: i64) {
        self.timed(tag::TIME, unit, v);
    }

    /// A timestamp in `unit`s since the epoch (its zone is the schema's).
    pub fn timestamp(&mut self, unit: Unit, v: i64) {
        self.timed(tag::TIMESTAMP, unit, v);
    }

    fn timed(&mut self, tag: u8, unit: Unit, v: i64) {
        let mut p = [0u8; 9];
        p[0] = unit.byte();
        p[1..].copy_from_slice(&v.to_be_bytes());
        self.put(tag, &p);
    }

    /// UTF-8 text (any offset width or view).
    pub fn utf8(&mut self, v: &str) {
        self.put_bytes(tag::UTF8, v.as_bytes());
    }

    /// Bytes (any offset width or view).
    pub fn binary(&mut self, v: &[u8]) {
        self.put_bytes(tag::BINARY, v);
    }

    /// Fixed-width bytes (a UUID included).
    pub fn fixed(&mut self, v: &[u8]) {
        self.put_bytes(tag::FIXED, v);
    }

    fn open(&mut self, kind: Kind, tag: u8, count: u64) {
        if self.cell() {
            self.buf.push(tag);
            self.buf.extend_from_slice(&count.to_be_bytes());
            self.stack.push(Frame {
                kind,
                expected: count,
                got: 0,
                entries: Vec::new(),
                start: self.buf.len(),
            });
        }
    }

    fn close(&mut self, kind: Kind) -> Option<Frame> {
        match self.stack.last() {
            Some(f) if f.kind == kind && kind != Kind::Row => {}
            _ => {
                self.fail(ContentError::Order(
                    "an end that does not close the innermost value",
                ));
                return None;
            }
        }
        let f = self.stack.pop()?;
        // A map's count is of entries. Its cells never pass twice the
        // count ([`RowWriter::cell`] refuses the one that would), so an odd
        // number of them is always short of the count: no separate check.
        let got = if kind == Kind::Map { f.got / 2 } else { f.got };
        if got != f.expected {
            self.fail(ContentError::Shape {
                what: kind.name(),
                expected: f.expected,
                got,
            });
            return None;
        }
        Some(f)
    }

    /// Opens a list of `len` elements.
    pub fn begin_list(&mut self, len: u64) {
        self.open(Kind::List, tag::LIST, len);
    }

    /// Closes the innermost list.
    pub fn end_list(&mut self) {
        self.close(Kind::List);
    }

    /// Opens a struct of `fields` fields (in schema order).
    pub fn begin_struct(&mut self, fields: u64) {
        self.open(Kind::Struct, tag::STRUCT, fields);
    }

    /// Closes the innermost struct.
    pub fn end_struct(&mut self) {
        self.close(Kind::Struct);
    }

    /// Opens a map of `entries` entries: then `2 × entries` cells, each
    /// entry's key and value.
    pub fn begin_map(&mut self, entries: u64) {
        self.open(Kind::Map, tag::MAP, entries);
    }

    /// Closes the innermost map, sorting its entries by their bytes.
    pub fn end_map(&mut self) {
        let Some(f) = self.close(Kind::Map) else {
            return;
        };
        let end = self.buf.len();
        let mut bounds: Vec<(usize, usize)> = Vec::with_capacity(f.entries.len());
        for (i, s) in f.entries.iter().enumerate() {
            let e = f.entries.get(i + 1).copied().unwrap_or(end);
            bounds.push((*s, e));
        }
        let buf = &self.buf;
        bounds.sort_by(|a, b| {
            buf.get(a.0..a.1)
                .unwrap_or_default()
                .cmp(buf.get(b.0..b.1).unwrap_or_default())
        });
        self.scratch.clear();
        for (s, e) in bounds {
            self.scratch
                .extend_from_slice(self.buf.get(s..e).unwrap_or_default());
        }
        self.buf.truncate(f.start);
        self.buf.extend_from_slice(&self.scratch);
    }

    /// The finished row's canonical bytes, or why it is not a row.
    pub fn finish(&mut self) -> Result<&[u8], ContentError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        // The bottom frame is always the row: only `begin_row` pushes onto
        // an empty stack (`open` needs an open value to count it in), and
        // `close` never pops a row. So one frame is the row, finished.
        match self.stack.as_slice() {
            [f] => {
                if f.got != f.expected {
                    return Err(ContentError::Shape {
                        what: "row",
                        expected: f.expected,
                        got: f.got,
                    });
                }
            }
            [] => return Err(ContentError::Order("no row begun")),
            _ => return Err(ContentError::Order("a nested value left open")),
        }
        self.stack.clear();
        Ok(&self.buf)
    }
}

/// The logical-schema fingerprint a migration binds: the schema's
/// canonical bytes ([`schema::canonical_bytes`]: column order, names,
/// normalized types, width variants alike) followed by every field's
/// nullability in pre-order (a struct's fields and a list's item after the
/// field itself; a map's key then value), one byte each, under [`SCHEMA_DOMAIN`]. Unlike the
/// cold-read fingerprint it binds nullability: a destination column that
/// admits nulls the source did not is a different table.
pub fn schema_fingerprint(schema: &Schema) -> Digest {
    fn nulls(out: &mut Vec<u8>, fields: &[Field]) {
        for f in fields {
            out.push(u8::from(f.nullable));
            match &f.ty {
                LogicalType::Struct(fs) => nulls(out, fs),
                LogicalType::List { item, .. } => nulls(out, std::slice::from_ref(item)),
                LogicalType::Map { key, value } => {
                    nulls(out, std::slice::from_ref(key));
                    nulls(out, std::slice::from_ref(value));
                }
                _ => {}
            }
        }
    }
    let mut h = Sha256::new();
    h.update(SCHEMA_DOMAIN);
    h.update(schema::canonical_bytes(schema));
    let mut n = Vec::new();
    nulls(&mut n, &schema.fields);
    h.update(n);
    Digest(h.finalize().into())
}

/// Adds the lane vector of a row's 32-byte `key` (step 3) to `lanes`.
fn add_lanes(lanes: &mut [u64; LANES], key: &[u8; 32]) {
    let (mut k, mut iv) = ([0u8; 16], [0u8; 16]);
    k.copy_from_slice(&key[..16]);
    iv.copy_from_slice(&key[16..]);
    // Counter mode written out (the `ctr` crate ends its keystream at
    // counter overflow; this wraps modulo 2¹²⁸, as SP 800-38A allows and
    // as other implementations do): 128 counter blocks, encrypted in
    // one call so AES-NI keeps eight in flight.
    let start = u128::from_be_bytes(iv);
    let mut blocks = [Block::default(); BLOCKS];
    for (i, b) in (0u128..).zip(blocks.iter_mut()) {
        b.copy_from_slice(&start.wrapping_add(i).to_be_bytes());
    }
    Aes128Enc::new(&k.into()).encrypt_blocks(&mut blocks);
    for (pair, block) in lanes.chunks_exact_mut(2).zip(blocks.iter()) {
        // One block is two lanes, little-endian: the low 8 bytes first.
        let v = u128::from_le_bytes((*block).into());
        if let [lo, hi] = pair {
            *lo = lo.wrapping_add(v as u64);
            *hi = hi.wrapping_add((v >> 64) as u64);
        }
    }
}

/// The running digest of one table: a schema fingerprint, a row count and
/// the lane accumulator. Constant size whatever the row count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableDigest {
    schema: Digest,
    rows: u64,
    lanes: Box<[u64; LANES]>,
    /// BLAKE3's key for [`ROW_CONTEXT`], derived once per digest.
    context: blake3::hazmat::ContextKey,
}

/// A table's content evidence: row count and digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Content {
    /// Rows added.
    pub rows: u64,
    /// The content digest.
    pub digest: Digest,
}

impl TableDigest {
    /// An empty table of the schema with `schema_fingerprint`.
    pub fn new(schema_fingerprint: Digest) -> Self {
        TableDigest {
            schema: schema_fingerprint,
            rows: 0,
            lanes: Box::new([0; LANES]),
            context: blake3::hazmat::hash_derive_key_context(ROW_CONTEXT),
        }
    }

    /// Adds the row `w` holds (finished here). A malformed row adds nothing.
    pub fn add_row(&mut self, w: &mut RowWriter) -> Result<(), ContentError> {
        let bytes = w.finish()?;
        self.add_canonical(bytes);
        Ok(())
    }

    /// Adds a row given as its canonical bytes (as [`RowWriter`] makes).
    pub fn add_canonical(&mut self, row: &[u8]) {
        let key = blake3::Hasher::new_from_context_key(&self.context)
            .update(row)
            .finalize();
        add_lanes(&mut self.lanes, key.as_bytes());
        self.rows = self.rows.saturating_add(1);
    }

    /// An empty digest of the same schema, for a disjoint part of the table
    /// (another thread's rows) to be [merged](TableDigest::merge) back.
    pub fn part(&self) -> TableDigest {
        TableDigest::new(self.schema)
    }

    /// Adds the rows of `other`, a digest of a disjoint part of the same
    /// table (another batch, another file). Refused (returning `false`,
    /// nothing changed) when the schemas differ.
    pub fn merge(&mut self, other: &TableDigest) -> bool {
        if self.schema != other.schema {
            return false;
        }
        for (a, b) in self.lanes.iter_mut().zip(other.lanes.iter()) {
            *a = a.wrapping_add(*b);
        }
        self.rows = self.rows.saturating_add(other.rows);
        true
    }

    /// Rows added so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The content evidence of the rows added so far.
    pub fn finish(&self) -> Content {
        let mut h = Sha256::new();
        h.update(DIGEST_DOMAIN);
        h.update(self.schema.0);
        h.update(self.rows.to_be_bytes());
        for lane in self.lanes.iter() {
            h.update(lane.to_le_bytes());
        }
        Content {
            rows: self.rows,
            digest: Digest(h.finalize().into()),
        }
    }
}

#[cfg(test)]
mod tests;
