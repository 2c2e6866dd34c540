//! Catalog page tokens (spec 002 "Scoped metadata reads"): fixed-size,
//! opaque continuation tokens bound to the tenant, the optional service,
//! the visible catalog generation and the open instance's epoch.
//!
//! A token is [`TOKEN_LEN`] lowercase hex characters. A new visible
//! publication (the generation moves) or a reopen (a new epoch) expires it:
//! [`PageError::Expired`]. A token for another scope, or one that does not
//! decode, is [`PageError::InvalidToken`]. An identical retry changes
//! neither generation nor epoch, so it expires nothing.

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
    /// open instance: restart the listing.
    #[error("FailedPrecondition: page token expired; restart the listing")]
    Expired,
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
}
