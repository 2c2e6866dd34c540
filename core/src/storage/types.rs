//! Names, payloads and records of the session store, with their bounds.
//!
//! Every name type is validated when it is built and again when it is
//! decoded; a decoder checks a length *before* it allocates (a borrowed string
//! is measured before it is copied, a byte sequence is refused as soon as its
//! announced or counted length passes the bound).

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use thiserror::Error;

use crate::Millis;

/// A commit sequence number. Strictly increasing per store; gaps are legal.
/// Seq 0 is never assigned: the first seq a fresh store hands out is 1.
pub type Seq = u64;

/// The longest record id accepted, in bytes.
pub const MAX_ID_LEN: usize = 128;
/// The longest entry kind accepted, in bytes.
pub const MAX_KIND_LEN: usize = 64;
/// The longest register namespace accepted, in bytes.
pub const MAX_NAMESPACE_LEN: usize = 64;
/// The longest register key (and register-listing prefix) accepted, in bytes.
pub const MAX_KEY_LEN: usize = 512;
/// The largest entry payload or usage details payload accepted, in bytes
/// (32 MiB: a record above it is refused before its payload is read).
pub const MAX_PAYLOAD_LEN: usize = 32 * 1024 * 1024;
/// The largest register value accepted, in bytes (1 MiB).
pub const MAX_REGISTER_VALUE_LEN: usize = 1024 * 1024;
/// The most writes one commit may carry.
pub const MAX_WRITES_PER_COMMIT: usize = 4096;
/// The most expectations one commit may carry.
pub const MAX_EXPECTATIONS_PER_COMMIT: usize = 1024;
/// The most ids one `get_entries` call may ask for.
pub const MAX_GET_ENTRIES: usize = 1024;

/// A value outside the store's representation bounds. Stable reason strings
/// are the variant names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum BoundError {
    /// A record id that is empty, too long, or has control characters.
    #[error("InvalidId: a record id must be 1..={max} bytes without control characters (got {len} bytes)", max = MAX_ID_LEN)]
    InvalidId {
        /// The rejected id's length in bytes.
        len: usize,
    },
    /// A commit id that is empty, too long, or has control characters.
    #[error("InvalidCommitId: a commit id must be 1..={max} bytes without control characters (got {len} bytes)", max = MAX_ID_LEN)]
    InvalidCommitId {
        /// The rejected id's length in bytes.
        len: usize,
    },
    /// An entry kind that is empty, too long, or has control characters.
    #[error("InvalidKind: an entry kind must be 1..={max} bytes without control characters (got {len} bytes)", max = MAX_KIND_LEN)]
    InvalidKind {
        /// The rejected kind's length in bytes.
        len: usize,
    },
    /// A register namespace that is empty, too long, or has control characters.
    #[error("InvalidNamespace: a register namespace must be 1..={max} bytes without control characters (got {len} bytes)", max = MAX_NAMESPACE_LEN)]
    InvalidNamespace {
        /// The rejected namespace's length in bytes.
        len: usize,
    },
    /// A register key that is empty, too long, or has control characters.
    #[error("InvalidKey: a register key must be 1..={max} bytes without control characters (got {len} bytes)", max = MAX_KEY_LEN)]
    InvalidKey {
        /// The rejected key's length in bytes.
        len: usize,
    },
    /// A register-listing prefix that is too long or has control characters.
    #[error("InvalidPrefix: a register prefix must be 0..={max} bytes without control characters (got {len} bytes)", max = MAX_KEY_LEN)]
    InvalidPrefix {
        /// The rejected prefix's length in bytes.
        len: usize,
    },
    /// A payload above [`MAX_PAYLOAD_LEN`].
    #[error("PayloadTooLarge: a payload may hold at most {max} bytes (got at least {len})", max = MAX_PAYLOAD_LEN)]
    PayloadTooLarge {
        /// The rejected payload's length (or a lower bound of it while decoding).
        len: usize,
    },
    /// A register value above [`MAX_REGISTER_VALUE_LEN`].
    #[error("RegisterValueTooLarge: a register value may hold at most {max} bytes (got {len})", max = MAX_REGISTER_VALUE_LEN)]
    RegisterValueTooLarge {
        /// The rejected value's length.
        len: usize,
    },
    /// A commit with more than [`MAX_WRITES_PER_COMMIT`] writes.
    #[error("TooManyWrites: a commit may carry at most {max} writes (got {count})", max = MAX_WRITES_PER_COMMIT)]
    TooManyWrites {
        /// How many writes the commit carried.
        count: usize,
    },
    /// A commit with more than [`MAX_EXPECTATIONS_PER_COMMIT`] expectations.
    #[error("TooManyExpectations: a commit may carry at most {max} expectations (got {count})", max = MAX_EXPECTATIONS_PER_COMMIT)]
    TooManyExpectations {
        /// How many expectations the commit carried.
        count: usize,
    },
    /// A `get_entries` call for more than [`MAX_GET_ENTRIES`] ids.
    #[error("TooManyIds: one lookup may name at most {max} ids (got {count})", max = MAX_GET_ENTRIES)]
    TooManyIds {
        /// How many ids were asked for.
        count: usize,
    },
}

crate::reasons! {
    /// The stable reason string (the variant name).
    BoundError {
        InvalidId,
        InvalidCommitId,
        InvalidKind,
        InvalidNamespace,
        InvalidKey,
        InvalidPrefix,
        PayloadTooLarge,
        RegisterValueTooLarge,
        TooManyWrites,
        TooManyExpectations,
        TooManyIds,
    }
}

fn name_ok(s: &str, min: usize, max: usize) -> bool {
    s.len() >= min && s.len() <= max && !s.chars().any(char::is_control)
}

/// Defines a validated string newtype whose decoder measures before copying.
macro_rules! bounded_name {
    ($(#[$doc:meta])* $name:ident, $min:expr, $max:expr, $err:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps a name.
            pub fn new(name: impl Into<String>) -> Result<Self, BoundError> {
                let name = name.into();
                Self::check(&name)?;
                Ok($name(name))
            }

            /// Checks a candidate without allocating.
            pub fn check(name: &str) -> Result<(), BoundError> {
                if name_ok(name, $min, $max) {
                    Ok(())
                } else {
                    Err(BoundError::$err { len: name.len() })
                }
            }

            /// The name.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<&str> for $name {
            type Error = BoundError;
            fn try_from(value: &str) -> Result<Self, Self::Error> {
                Self::check(value)?;
                Ok($name(value.to_owned()))
            }
        }

        impl TryFrom<String> for $name {
            type Error = BoundError;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                $name::new(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> Self {
                value.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        write!(f, "a string of {}..={} bytes without control characters", $min, $max)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$name, E> {
                        // Measured before it is copied.
                        $name::try_from(v).map_err(E::custom)
                    }
                    fn visit_string<E: de::Error>(self, v: String) -> Result<$name, E> {
                        $name::new(v).map_err(E::custom)
                    }
                }
                deserializer.deserialize_str(V)
            }
        }
    };
}

bounded_name!(
    /// The id of an entry or a usage row. Entries and usage rows share one id
    /// namespace: an id names at most one record of either kind, forever.
    RecordId,
    1,
    MAX_ID_LEN,
    InvalidId
);

bounded_name!(
    /// The caller's id for one commit, chosen fresh for each commit it means
    /// to make and sent again only to retry that same commit (see
    /// [`crate::storage::commit`]'s "Retries").
    CommitId,
    1,
    MAX_ID_LEN,
    InvalidCommitId
);

bounded_name!(
    /// The kind of an entry (`message`, `compaction`, …): opaque to the store
    /// except for branch-scan stops and filters.
    Kind,
    1,
    MAX_KIND_LEN,
    InvalidKind
);

bounded_name!(
    /// A register namespace (`session`, `strand`, `op`, …).
    Namespace,
    1,
    MAX_NAMESPACE_LEN,
    InvalidNamespace
);

bounded_name!(
    /// A register key inside a namespace.
    RegisterKey,
    1,
    MAX_KEY_LEN,
    InvalidKey
);

bounded_name!(
    /// A register-listing prefix: like a key, but may be empty (lists all).
    KeyPrefix,
    0,
    MAX_KEY_LEN,
    InvalidPrefix
);

// Keys order as their strings do, so a key map can be ranged by `&str`
// bounds (a snapshot window's start may be empty, its end no valid key).
impl std::borrow::Borrow<str> for RegisterKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl KeyPrefix {
    /// The empty prefix, which every key has.
    pub fn all() -> Self {
        KeyPrefix(String::new())
    }

    /// Whether `key` starts with this prefix.
    pub fn matches(&self, key: &RegisterKey) -> bool {
        key.as_str().starts_with(self.as_str())
    }
}

/// Opaque bytes of at most [`MAX_PAYLOAD_LEN`]: an entry payload, a usage
/// row's details or a register value (register values are further bounded
/// by [`MAX_REGISTER_VALUE_LEN`] at commit).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Payload(Vec<u8>);

impl Payload {
    /// Checks a length before anything is allocated or read.
    pub fn check_len(len: usize) -> Result<(), BoundError> {
        if len > MAX_PAYLOAD_LEN {
            Err(BoundError::PayloadTooLarge { len })
        } else {
            Ok(())
        }
    }

    /// Wraps bytes after checking their length.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, BoundError> {
        let bytes = bytes.into();
        Self::check_len(bytes.len())?;
        Ok(Payload(bytes))
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Unwraps the bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

impl TryFrom<Vec<u8>> for Payload {
    type Error = BoundError;
    fn try_from(value: Vec<u8>) -> Result<Self, Self::Error> {
        Payload::new(value)
    }
}

impl TryFrom<&[u8]> for Payload {
    type Error = BoundError;
    fn try_from(value: &[u8]) -> Result<Self, Self::Error> {
        Payload::check_len(value.len())?;
        Ok(Payload(value.to_vec()))
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Payload;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "at most {MAX_PAYLOAD_LEN} bytes")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Payload, E> {
                Payload::try_from(v).map_err(E::custom)
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Payload, E> {
                Payload::new(v).map_err(E::custom)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Payload, A::Error> {
                let hint = seq.size_hint().unwrap_or(0);
                if hint > MAX_PAYLOAD_LEN {
                    return Err(de::Error::custom(BoundError::PayloadTooLarge { len: hint }));
                }
                // Reserve no more than a small window up front; grow as bytes arrive.
                let mut out = Vec::with_capacity(hint.min(64 * 1024));
                while let Some(b) = seq.next_element::<u8>()? {
                    if out.len() == MAX_PAYLOAD_LEN {
                        return Err(de::Error::custom(BoundError::PayloadTooLarge {
                            len: MAX_PAYLOAD_LEN + 1,
                        }));
                    }
                    out.push(b);
                }
                Ok(Payload(out))
            }
        }
        deserializer.deserialize_bytes(V)
    }
}

/// The numeric figures of one usage row; [`Stats`] sums them over the ledger.
/// Cost is an integer in millionths of the billing currency so that the sum is
/// exact and the type is `Eq` and `Hash`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct UsageFigures {
    /// Input (prompt) tokens.
    pub input_tokens: u64,
    /// Output (completion) tokens.
    pub output_tokens: u64,
    /// Tokens read from a prompt cache.
    pub cache_read_tokens: u64,
    /// Tokens written to a prompt cache.
    pub cache_write_tokens: u64,
    /// Cost in millionths of the currency unit.
    pub cost_micros: u64,
}

impl UsageFigures {
    /// Field-wise checked sum; `None` on overflow of any field.
    pub fn checked_add(&self, other: &UsageFigures) -> Option<UsageFigures> {
        Some(UsageFigures {
            input_tokens: self.input_tokens.checked_add(other.input_tokens)?,
            output_tokens: self.output_tokens.checked_add(other.output_tokens)?,
            cache_read_tokens: self
                .cache_read_tokens
                .checked_add(other.cache_read_tokens)?,
            cache_write_tokens: self
                .cache_write_tokens
                .checked_add(other.cache_write_tokens)?,
            cost_micros: self.cost_micros.checked_add(other.cost_micros)?,
        })
    }
}

/// The stats projection: the sum of the usage ledger. After every commit it
/// equals [`Stats::of`] over every usage row in the store.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Stats {
    /// How many usage rows the ledger holds.
    pub usage_rows: u64,
    /// The field-wise sum of every row's figures.
    pub totals: UsageFigures,
}

impl Stats {
    /// Adds one row; `None` on overflow.
    pub fn checked_add(&self, figures: &UsageFigures) -> Option<Stats> {
        Some(Stats {
            usage_rows: self.usage_rows.checked_add(1)?,
            totals: self.totals.checked_add(figures)?,
        })
    }

    /// The sum of a ledger; `None` on overflow.
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a UsageRow>) -> Option<Stats> {
        rows.into_iter()
            .try_fold(Stats::default(), |acc, r| acc.checked_add(&r.figures))
    }
}

/// A stored entry: write-once, linked to its parent.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Entry {
    /// Its id (shared namespace with usage rows).
    pub id: RecordId,
    /// Its parent entry, `None` for a root.
    pub parent: Option<RecordId>,
    /// Its kind.
    pub kind: Kind,
    /// Its opaque payload.
    pub payload: Payload,
    /// The seq its commit assigned.
    pub seq: Seq,
    /// The commit's timestamp.
    pub ts: Millis,
}

impl Entry {
    /// The entry's head: id, parent and seq, without the payload.
    pub fn head(&self) -> EntryHead {
        EntryHead {
            id: self.id.clone(),
            parent: self.parent.clone(),
            seq: self.seq,
        }
    }
}

/// An entry without its payload: what `scan_entry_heads` answers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EntryHead {
    /// The entry's id.
    pub id: RecordId,
    /// Its parent.
    pub parent: Option<RecordId>,
    /// Its seq.
    pub seq: Seq,
}

/// A stored usage-ledger row: write-once.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct UsageRow {
    /// Its id (shared namespace with entries).
    pub id: RecordId,
    /// The seq its commit assigned.
    pub seq: Seq,
    /// The commit's timestamp.
    pub ts: Millis,
    /// Its figures.
    pub figures: UsageFigures,
    /// An opaque details payload.
    pub details: Payload,
}

/// A stored register cell: the value and the seq of the write that set it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Register {
    /// Its namespace.
    pub namespace: Namespace,
    /// Its key.
    pub key: RegisterKey,
    /// Its opaque value.
    pub value: Payload,
    /// The seq of the write that set it (what a [`SeqExpectation`](super::SeqExpectation) names).
    pub seq: Seq,
}
