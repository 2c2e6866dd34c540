//! The one 32-byte digest type: [`Sha256`].
//!
//! Every SHA-256 the toolkit computes, stores or compares — a release's
//! content, a migration's objects, tables and receipts, a credential's
//! token, a deployment's revision — is a [`Sha256`]. Its own text is
//! `sha256:` and 64 lower-case hex digits ([`Display`](std::fmt::Display),
//! serde, [`Sha256::parse`]); formats that store the bare 64 digits (the
//! migration's plans and receipts, the access plane's rows) say so with
//! [`Sha256::hex`] / [`Sha256::parse_hex`] and, for serde, the [`bare`]
//! adapter. `Debug` shows all 64 digits (two digests that differ late must
//! not look alike in a message); the access plane's credential and claim
//! digests wrap it and show their fingerprint only.

use sha2::{Digest as _, Sha256 as Hasher};
use subtle::ConstantTimeEq as _;

/// The length of a SHA-256 digest, in bytes.
pub const SHA256_LEN: usize = 32;

/// The textual prefix of every digest written in its own text.
pub const SHA256_PREFIX: &str = "sha256:";

/// How many hex digits [`Sha256::fingerprint`] shows.
pub const FINGERPRINT_LEN: usize = 16;

/// A SHA-256 digest.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sha256(pub [u8; SHA256_LEN]);

impl Sha256 {
    /// The SHA-256 of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Sha256(Hasher::digest(bytes).into())
    }

    /// The SHA-256 of `parts`, one after another (a domain prefix and its
    /// input, say), with nothing between them.
    pub fn of_parts(parts: &[&[u8]]) -> Self {
        let mut h = Hasher::new();
        for p in parts {
            h.update(p);
        }
        Sha256(h.finalize().into())
    }

    /// Parses exactly `sha256:` and 64 lowercase hex digits; anything else
    /// (upper case, a missing prefix, a wrong length) is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        Self::parse_hex(text.strip_prefix(SHA256_PREFIX)?)
    }

    /// The 64 lowercase hex digits, without the prefix.
    pub fn hex(&self) -> String {
        crate::hex::encode(self.0)
    }

    /// Parses exactly 64 lowercase hex digits, without the prefix.
    pub fn parse_hex(hex: &str) -> Option<Self> {
        crate::hex::decode::<SHA256_LEN>(hex).map(Sha256)
    }

    /// The raw bytes.
    pub fn bytes(&self) -> &[u8; SHA256_LEN] {
        &self.0
    }

    /// The first [`FINGERPRINT_LEN`] hex digits.
    pub fn fingerprint(&self) -> String {
        let mut h = self.hex();
        h.truncate(FINGERPRINT_LEN);
        h
    }

    /// Equality in constant time (for digests of secrets).
    pub fn ct_eq(&self, other: &Sha256) -> bool {
        bool::from(self.0.ct_eq(&other.0))
    }
}

/// How a stored digest column is named in a message, whatever it holds:
/// its first [`FINGERPRINT_LEN`] characters, escaped — never more (a
/// plaintext token stored there by mistake reaches no message whole).
pub fn head_of(text: &str) -> String {
    text.chars()
        .take(FINGERPRINT_LEN)
        .flat_map(char::escape_debug)
        .collect()
}

impl std::fmt::Display for Sha256 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SHA256_PREFIX}{}", self.hex())
    }
}

impl std::fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sha256({})", self.hex())
    }
}

/// The wire form, as [`Sha256::parse`] accepts it: a string of `sha256:`
/// and 64 lowercase hex digits (a derive would describe a byte array).
#[cfg(feature = "schema")]
impl schemars::JsonSchema for Sha256 {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Sha256".into()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        "custos_core::release::Sha256".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A SHA-256 digest: `sha256:` followed by 64 lowercase hex digits.",
            "type": "string",
            "pattern": "^sha256:[0-9a-f]{64}$"
        })
    }
}

impl serde::Serialize for Sha256 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Sha256 {
    /// Accepts exactly the form [`Sha256::parse`] accepts.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Sha256::parse(&text).ok_or_else(|| {
            serde::de::Error::custom("not a sha256: digest with 64 lowercase hex digits")
        })
    }
}

/// Serde for formats that store a digest as its bare 64 hex digits
/// (`#[serde(with = "crate::digest::bare")]`); [`bare::option`] for an
/// optional one.
pub mod bare {
    use super::Sha256;
    use serde::Deserialize as _;

    /// What a bare digest that does not read is refused with.
    pub const BARE_REFUSED: &str = "non-canonical-digest: a digest is 64 lowercase hex digits";

    /// Writes the 64 digits.
    pub fn serialize<S: serde::Serializer>(d: &Sha256, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&d.hex())
    }

    /// Reads exactly 64 lowercase hex digits.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Sha256, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Sha256::parse_hex(&text).ok_or_else(|| serde::de::Error::custom(BARE_REFUSED))
    }

    /// The same for an `Option<Sha256>` (`null` for `None`).
    pub mod option {
        use super::{Sha256, BARE_REFUSED};
        use serde::Deserialize as _;

        /// Writes the 64 digits, or `null`.
        pub fn serialize<S: serde::Serializer>(
            d: &Option<Sha256>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => s.serialize_some(&d.hex()),
                None => s.serialize_none(),
            }
        }

        /// Reads 64 lowercase hex digits, or `null`.
        pub fn deserialize<'de, D: serde::Deserializer<'de>>(
            d: D,
        ) -> Result<Option<Sha256>, D::Error> {
            Option::<std::borrow::Cow<'de, str>>::deserialize(d)?
                .map(|text| {
                    Sha256::parse_hex(&text).ok_or_else(|| serde::de::Error::custom(BARE_REFUSED))
                })
                .transpose()
        }
    }

    /// The schema of the bare form (`#[schemars(with = "…::BareHex")]`).
    #[cfg(feature = "schema")]
    pub struct BareHex;

    #[cfg(feature = "schema")]
    impl schemars::JsonSchema for BareHex {
        fn schema_name() -> std::borrow::Cow<'static, str> {
            "Digest".into()
        }

        fn schema_id() -> std::borrow::Cow<'static, str> {
            "custos_core::migration::data::Digest".into()
        }

        fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
            schemars::json_schema!({
                "description": "A SHA-256 digest: 64 lowercase hex digits (no prefix).",
                "type": "string",
                "pattern": "^[0-9a-f]{64}$"
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_text_round_trips_and_is_strict() {
        let d = Sha256::of(b"component");
        assert_eq!(Sha256::parse(&d.to_string()), Some(d));
        assert_eq!(Sha256::parse_hex(&d.hex()), Some(d));
        assert_eq!(Sha256::parse(&d.hex()), None);
        assert_eq!(Sha256::parse(&d.to_string().to_uppercase()), None);
        assert_eq!(Sha256::parse(&d.to_string()[..70]), None);
        assert_eq!(Sha256::parse_hex("sha256:ab"), None);
        assert_eq!(Sha256::of_parts(&[b"comp", b"onent"]), d);
        assert!(d.ct_eq(&d) && !d.ct_eq(&Sha256::default()));
        assert_eq!(format!("{d:?}"), format!("Sha256({})", d.hex()));
    }

    #[test]
    fn a_column_is_named_by_its_escaped_head_only() {
        let token = "plaintext-token-that-must-not-leak";
        assert_eq!(head_of(token), token[..FINGERPRINT_LEN]);
        assert_eq!(head_of("a\nb"), "a\\nb");
        assert_eq!(head_of(""), "");
    }

    #[test]
    fn the_bare_form_is_the_64_digits() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct T {
            #[serde(with = "bare")]
            d: Sha256,
            #[serde(with = "bare::option")]
            o: Option<Sha256>,
        }
        let d = Sha256::of(b"x");
        let t = T { d, o: None };
        let text = serde_json::to_string(&t).unwrap();
        assert_eq!(text, format!("{{\"d\":\"{}\",\"o\":null}}", d.hex()));
        assert_eq!(serde_json::from_str::<T>(&text).unwrap(), t);
        let t = T { d, o: Some(d) };
        let text = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<T>(&text).unwrap(), t);
        assert!(serde_json::from_str::<T>(&text.replace(&d.hex(), &d.to_string())).is_err());
        // Its own serde form is the prefixed text.
        assert_eq!(serde_json::to_string(&d).unwrap(), format!("\"{d}\""));
    }
}
