//! Catalog page tokens: fixed-size,
//! opaque continuation tokens bound to the tenant, the optional service,
//! the visible catalog generation and the open instance's epoch.
//!
//! A token is [`TOKEN_LEN`] lowercase hex characters. A new visible
//! publication (the generation moves) or a reopen (a new epoch) expires it:
//! [`PageError::Expired`]. A token for another scope, or one that does not
//! decode, is [`PageError::InvalidToken`]. An identical retry changes
//! neither generation nor epoch, so it expires nothing.
//!
//! A [`Cursor`] (`c1-…`) is the continuation for a caller that reopens the
//! catalog on every page (a command line): it names the catalog's content
//! instead of an instance, so it survives a reopen and expires with any
//! change to what the catalog holds.

use thiserror::Error;

use super::Sha256;

/// The token format version.
const TOKEN_VERSION: u8 = 1;

/// Raw token bytes: version, epoch, generation, scope tag, last digest.
const RAW_LEN: usize = 1 + 8 + 8 + 8 + 32;

/// The length of a token's text: every token has exactly this many
/// characters.
pub const TOKEN_LEN: usize = 2 * RAW_LEN;

/// Why a page request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Error)]
pub enum PageError {
    /// The token does not decode, or belongs to another tenant or service.
    #[error("InvalidArgument: invalid page token")]
    InvalidToken,
    /// The token was issued before a visible publication or by an earlier
    /// open instance (a cursor: before any change): the state moved since
    /// the listing began, as a deployment listing's expiry; restart it.
    #[error("StateConflict: page token expired; restart the listing")]
    Expired,
}

impl PageError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (an expired continuation is `StateConflict`: list again from the first page).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            PageError::InvalidToken => Class::InvalidArgument,
            PageError::Expired => Class::StateConflict,
        }
    }
}

/// The scope a listing reads: a tenant and optionally one of its services.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scope<'a> {
    /// The authenticated tenant.
    pub tenant: &'a str,
    /// The service, if the listing is narrowed to one.
    pub service: Option<&'a str>,
}

impl Scope<'_> {
    /// The scope's fixed-size tag (a prefix of a SHA-256 over the tenant
    /// and service, with the absent service distinguished from any name).
    pub fn tag(&self) -> [u8; 8] {
        let mut text = Vec::with_capacity(self.tenant.len() + 2 + self.service.map_or(0, str::len));
        text.extend_from_slice(self.tenant.as_bytes());
        match self.service {
            Some(s) => {
                text.push(0);
                text.extend_from_slice(s.as_bytes());
            }
            None => text.push(1),
        }
        let d = Sha256::of(&text).0;
        let mut tag = [0u8; 8];
        tag.copy_from_slice(d.get(..8).unwrap_or(&[0; 8]));
        tag
    }
}

/// A decoded page token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageToken {
    /// The issuing open instance's epoch.
    pub epoch: u64,
    /// The visible generation the page was read at.
    pub generation: u64,
    /// The scope tag.
    pub scope: [u8; 8],
    /// The last digest returned; the next page starts after it.
    pub after: Sha256,
}

impl PageToken {
    /// The token continuing after `after` in `scope`.
    pub fn new(epoch: u64, generation: u64, scope: &Scope<'_>, after: Sha256) -> Self {
        PageToken {
            epoch,
            generation,
            scope: scope.tag(),
            after,
        }
    }

    /// The token's text: [`TOKEN_LEN`] lowercase hex characters.
    pub fn encode(&self) -> String {
        let mut raw = Vec::with_capacity(RAW_LEN);
        raw.push(TOKEN_VERSION);
        raw.extend_from_slice(&self.epoch.to_be_bytes());
        raw.extend_from_slice(&self.generation.to_be_bytes());
        raw.extend_from_slice(&self.scope);
        raw.extend_from_slice(&self.after.0);
        crate::hex::encode(raw)
    }

    /// Decodes a token's text. Total.
    pub fn decode(text: &str) -> Result<Self, PageError> {
        let raw = crate::hex::decode::<RAW_LEN>(text).ok_or(PageError::InvalidToken)?;
        if raw[0] != TOKEN_VERSION {
            return Err(PageError::InvalidToken);
        }
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(raw.get(i..i + 8).unwrap_or(&[0; 8]));
            u64::from_be_bytes(b)
        };
        let mut scope = [0u8; 8];
        scope.copy_from_slice(raw.get(17..25).unwrap_or(&[0; 8]));
        let mut after = [0u8; 32];
        after.copy_from_slice(raw.get(25..).unwrap_or(&[0; 32]));
        Ok(PageToken {
            epoch: u64_at(1),
            generation: u64_at(9),
            scope,
            after: Sha256(after),
        })
    }

    /// Checks a presented token against the listing's scope and the
    /// catalog's current epoch and visible generation; returns the digest to
    /// continue after.
    pub fn check(
        text: &str,
        scope: &Scope<'_>,
        epoch: u64,
        generation: u64,
    ) -> Result<Sha256, PageError> {
        let t = PageToken::decode(text)?;
        if t.scope != scope.tag() {
            return Err(PageError::InvalidToken);
        }
        if t.epoch != epoch || t.generation != generation {
            return Err(PageError::Expired);
        }
        Ok(t.after)
    }
}

// ------------------------------------------------------ durable cursors

/// The prefix of a cursor's text (a token never starts with it: a token
/// is hex).
pub const CURSOR_PREFIX: &str = "c1-";

/// Raw cursor bytes: content tag, scope tag, last digest.
const CURSOR_RAW: usize = 8 + 8 + 32;

/// The length of a cursor's text.
pub const CURSOR_LEN: usize = CURSOR_PREFIX.len() + 2 * CURSOR_RAW;

/// The tag of a catalog's whole listed content: every release's digest,
/// metadata digest and membership, in digest order (a prefix of a SHA-256
/// over them). Any publication, revocation or retirement changes it; a
/// reopen of the same content does not.
pub fn content_tag<'a>(
    rows: impl IntoIterator<Item = (&'a Sha256, &'a Sha256, &'a str)>,
) -> [u8; 8] {
    use sha2::{Digest as _, Sha256 as Hasher};
    let mut h = Hasher::new();
    for (digest, metadata, membership) in rows {
        h.update(digest.0);
        h.update(metadata.0);
        h.update((membership.len() as u64).to_be_bytes());
        h.update(membership.as_bytes());
    }
    let d = h.finalize();
    let mut tag = [0u8; 8];
    tag.copy_from_slice(d.get(..8).unwrap_or(&[0; 8]));
    tag
}

/// A continuation that survives a reopen of the catalog, for callers that
/// open it anew on every page (a command line); a [`PageToken`] is bound
/// to one open instance and can never continue there.
///
/// It names the catalog's content ([`content_tag`]) when it was issued,
/// the scope and the last digest returned; the next page starts after that
/// digest. It continues only that content, so no row is skipped or
/// repeated: any change to the catalog since is [`PageError::Expired`]
/// (list again from the first page); another scope, or text that does not
/// decode, is [`PageError::InvalidToken`]. Its text is `c1-` then
/// [`CURSOR_LEN`]` - 3` lowercase hex digits; the length is checked before
/// any decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cursor {
    /// The content tag when it was issued.
    pub content: [u8; 8],
    /// The scope tag.
    pub scope: [u8; 8],
    /// The last digest returned.
    pub after: Sha256,
}

impl Cursor {
    /// The cursor's text.
    pub fn encode(&self) -> String {
        let mut raw = Vec::with_capacity(CURSOR_RAW);
        raw.extend_from_slice(&self.content);
        raw.extend_from_slice(&self.scope);
        raw.extend_from_slice(&self.after.0);
        format!("{CURSOR_PREFIX}{}", crate::hex::encode(raw))
    }

    /// Decodes a cursor's text. Total.
    pub fn decode(text: &str) -> Result<Self, PageError> {
        if text.len() != CURSOR_LEN {
            return Err(PageError::InvalidToken);
        }
        let hex = text
            .strip_prefix(CURSOR_PREFIX)
            .ok_or(PageError::InvalidToken)?;
        let raw = crate::hex::decode::<CURSOR_RAW>(hex).ok_or(PageError::InvalidToken)?;
        let mut content = [0u8; 8];
        content.copy_from_slice(raw.get(..8).unwrap_or(&[0; 8]));
        let mut scope = [0u8; 8];
        scope.copy_from_slice(raw.get(8..16).unwrap_or(&[0; 8]));
        let mut after = [0u8; 32];
        after.copy_from_slice(raw.get(16..).unwrap_or(&[0; 32]));
        Ok(Cursor {
            content,
            scope,
            after: Sha256(after),
        })
    }

    /// Checks a presented cursor against the listing's scope and the
    /// catalog's content tag now; returns the digest to continue after.
    pub fn check(text: &str, scope: &Scope<'_>, content: [u8; 8]) -> Result<Sha256, PageError> {
        let c = Cursor::decode(text)?;
        if c.scope != scope.tag() {
            return Err(PageError::InvalidToken);
        }
        if c.content != content {
            return Err(PageError::Expired);
        }
        Ok(c.after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_fixed_size_and_bound_to_scope_epoch_generation() {
        let acme = Scope {
            tenant: "acme",
            service: None,
        };
        let svc = Scope {
            tenant: "acme",
            service: Some("api"),
        };
        let t = PageToken::new(7, 3, &acme, Sha256::of(b"x"));
        let text = t.encode();
        assert_eq!(text.len(), TOKEN_LEN);
        assert_eq!(PageToken::decode(&text), Ok(t));
        assert_eq!(PageToken::check(&text, &acme, 7, 3), Ok(Sha256::of(b"x")));
        assert_eq!(
            PageToken::check(&text, &svc, 7, 3),
            Err(PageError::InvalidToken)
        );
        let other = Scope {
            tenant: "beta",
            service: None,
        };
        assert_eq!(
            PageToken::check(&text, &other, 7, 3),
            Err(PageError::InvalidToken)
        );
        assert_eq!(
            PageToken::check(&text, &acme, 8, 3),
            Err(PageError::Expired)
        );
        assert_eq!(
            PageToken::check(&text, &acme, 7, 4),
            Err(PageError::Expired)
        );
        assert_eq!(PageToken::decode("zz"), Err(PageError::InvalidToken));
        assert_eq!(
            PageToken::decode(&text.to_uppercase()),
            Err(PageError::InvalidToken)
        );
        assert_eq!(
            PageToken::decode(&"0".repeat(TOKEN_LEN)),
            Err(PageError::InvalidToken)
        );
        let non_ascii = format!("{}é", &text[..TOKEN_LEN - 2]);
        assert_eq!(PageToken::decode(&non_ascii), Err(PageError::InvalidToken));
        // Found by the `release_decoders` fuzz target: a signed pair (`+0`)
        // decoded as `00`, a second spelling of one token.
        let signed = "010000000000+000070000000000000002999999999999+0000700000000000000030000000000+00007000007000000000000000300000007";
        assert_eq!(signed.len(), TOKEN_LEN);
        assert_eq!(PageToken::decode(signed), Err(PageError::InvalidToken));
        let plus = format!("01+{}", &text[3..]);
        assert_eq!(PageToken::decode(&plus), Err(PageError::InvalidToken));
        assert_ne!(
            Scope {
                tenant: "a",
                service: Some("")
            }
            .tag(),
            Scope {
                tenant: "a",
                service: None
            }
            .tag()
        );
    }

    #[test]
    fn cursors_survive_a_reopen_and_expire_with_any_change() {
        let acme = Scope {
            tenant: "acme",
            service: None,
        };
        let (a, b) = (Sha256::of(b"a"), Sha256::of(b"b"));
        let (ma, mb) = (Sha256::of(b"ma"), Sha256::of(b"mb"));
        let before = content_tag([(&a, &ma, "member")]);
        let same = content_tag([(&a, &ma, "member")]);
        assert_eq!(before, same, "the tag is a function of the content alone");
        let text = Cursor {
            content: before,
            scope: acme.tag(),
            after: a,
        }
        .encode();
        assert_eq!(text.len(), CURSOR_LEN);
        assert!(text.starts_with(CURSOR_PREFIX));
        assert_eq!(Cursor::check(&text, &acme, same), Ok(a));
        // A publication, a revocation: the content moved.
        for after in [
            content_tag([(&a, &ma, "member"), (&b, &mb, "member")]),
            content_tag([(&a, &ma, "revoked")]),
            content_tag([(&a, &mb, "member")]),
        ] {
            assert_eq!(Cursor::check(&text, &acme, after), Err(PageError::Expired));
        }
        let svc = Scope {
            tenant: "acme",
            service: Some("api"),
        };
        assert_eq!(
            Cursor::check(&text, &svc, same),
            Err(PageError::InvalidToken)
        );
        // A token is not a cursor, nor is a damaged or resized cursor.
        let token = PageToken::new(1, 1, &acme, a).encode();
        assert_eq!(Cursor::decode(&token), Err(PageError::InvalidToken));
        assert_eq!(
            Cursor::decode(&text[..CURSOR_LEN - 1]),
            Err(PageError::InvalidToken)
        );
        assert_eq!(
            Cursor::decode(&format!("{text}0")),
            Err(PageError::InvalidToken)
        );
        assert_eq!(
            Cursor::decode(&text.replace("c1-", "c2-")),
            Err(PageError::InvalidToken)
        );
        assert_eq!(
            Cursor::decode(&text.to_uppercase()),
            Err(PageError::InvalidToken)
        );
        // Membership text is length-prefixed: no two row lists collide by
        // moving bytes between fields.
        assert_ne!(
            content_tag([(&a, &ma, "ab")]),
            content_tag([(&a, &ma, "a")])
        );
    }
}
