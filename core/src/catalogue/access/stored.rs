//! The access plane's rows as a backend reads them back, checked here
//! once: a backend decodes each column's type and byte bound (and its own
//! integer encoding) and hands the columns to one of these `decode`s, which
//! hold every grammar a stored row must keep. A row that breaks one is
//! [`AccessError::Corrupt`] naming the table, the row and the column, in
//! the form `<table> row <key>: column <name>: <why>`. A digest column that
//! is not 64 lower-case hex digits is named by its length and its first
//! [`FINGERPRINT_LEN`] characters only ([`crate::digest::head_of`]) (a misplaced plaintext token would
//! otherwise reach the message whole).

use super::{
    is_fingerprint, is_principal_id, valid_name, AccessError, ClaimDigest, ClaimRow, ClaimState,
    CredentialKind, CredentialRow, CredentialState, Digest, PrincipalKind, PrincipalRow, Role,
    Sha256, FINGERPRINT_LEN, PRINCIPAL_ID_LIMIT,
};
use crate::catalogue::{is_session_id, DISPLAY_NAME_LIMIT, SESSION_ID_LIMIT};
use crate::columns::{Cells, ColumnError, Columns, MAX_WORD_LEN};

/// Where a value sits: the error's `what`, the table and the row's key.
struct At<'a> {
    what: &'static str,
    table: &'static str,
    row: &'a str,
}

impl At<'_> {
    fn fail(&self, col: &str, why: impl std::fmt::Display) -> AccessError {
        AccessError::Corrupt {
            what: self.what,
            detail: format!("{} row {}: column {col}: {why}", self.table, self.row),
        }
    }

    fn principal(&self, col: &str, id: String) -> Result<String, AccessError> {
        if is_principal_id(&id) {
            Ok(id)
        } else {
            Err(self.fail(col, format!("{id:?} is not a principal id")))
        }
    }

    fn word<T>(&self, col: &str, w: &str, parse: fn(&str) -> Option<T>) -> Result<T, AccessError> {
        parse(w).ok_or_else(|| self.fail(col, format!("unknown value {w:?}")))
    }

    fn sha(&self, col: &str, hex: &str) -> Result<Sha256, AccessError> {
        Sha256::parse_hex(hex).ok_or_else(|| {
            let head = crate::digest::head_of(hex);
            self.fail(
                col,
                format!(
                    "{} bytes starting \"{head}\", not 64 lower-case hex digits",
                    hex.len()
                ),
            )
        })
    }
}

/// An `access_principals` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredPrincipal {
    /// The principal id.
    pub principal_id: String,
    /// The kind's word.
    pub kind: String,
    /// The display name, if any.
    pub name: Option<String>,
    /// When it was made.
    pub created_at_ms: u64,
}

impl StoredPrincipal {
    /// The principal: its id's grammar, a known kind, a display name in
    /// its canonical form.
    pub fn decode(self) -> Result<(String, PrincipalRow), AccessError> {
        let at = At {
            what: "stored principal",
            table: "access_principals",
            row: "?",
        };
        let id = at.principal("principal_id", self.principal_id)?;
        let at = At { row: &id, ..at };
        let kind = at.word("kind", &self.kind, PrincipalKind::parse)?;
        if let Some(n) = &self.name {
            if valid_name(n).ok().as_ref() != Some(n) {
                return Err(at.fail("name", format!("{n:?} breaks the display-name rule")));
            }
        }
        let row = PrincipalRow {
            kind,
            name: self.name,
            created_at_ms: self.created_at_ms,
        };
        Ok((id, row))
    }
}

/// An `access_credentials` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredCredential {
    /// The token's SHA-256, as hex (the key).
    pub digest: String,
    /// The kind's word.
    pub kind: String,
    /// Whose it is.
    pub principal_id: String,
    /// The state's word.
    pub state: String,
    /// When it was issued.
    pub issued_at_ms: u64,
    /// When it was claimed.
    pub claimed_at_ms: Option<u64>,
    /// When it was last resumed.
    pub last_resumed_ms: Option<u64>,
    /// When it expires.
    pub expires_at_ms: Option<u64>,
    /// The fingerprint of the credential that issued it.
    pub issued_by: Option<String>,
}

impl StoredCredential {
    /// The credential: 64-hex digest, known kind and state, a principal id
    /// and an issuer fingerprint in their grammars.
    pub fn decode(self) -> Result<(Sha256, CredentialRow), AccessError> {
        let at = At {
            what: "stored credential",
            table: "access_credentials",
            row: "?",
        };
        let sha = at.sha("digest", &self.digest)?;
        let fp = sha.fingerprint();
        let at = At { row: &fp, ..at };
        if let Some(f) = &self.issued_by {
            if !is_fingerprint(f) {
                return Err(at.fail("issued_by", format!("{f:?} is not a fingerprint")));
            }
        }
        let row = CredentialRow {
            kind: at.word("kind", &self.kind, CredentialKind::parse)?,
            principal: at.principal("principal_id", self.principal_id)?,
            state: at.word("state", &self.state, CredentialState::parse)?,
            issued_at_ms: self.issued_at_ms,
            claimed_at_ms: self.claimed_at_ms,
            last_resumed_ms: self.last_resumed_ms,
            expires_at_ms: self.expires_at_ms,
            issued_by: self.issued_by,
        };
        Ok((sha, row))
    }
}

/// An `access_claims` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredClaim {
    /// The claim secret's SHA-256, as hex (the key).
    pub claim: String,
    /// Whose it is.
    pub principal_id: String,
    /// When it expires.
    pub expires_at_ms: u64,
    /// The state's word.
    pub state: String,
    /// The bound credential's digest, as hex (a claimed claim's only).
    pub bound_digest: Option<String>,
    /// The bound credential's kind word (a claimed claim's only).
    pub bound_kind: Option<String>,
    /// When it was claimed (a claimed claim's only).
    pub claimed_at_ms: Option<u64>,
}

impl StoredClaim {
    /// The claim: 64-hex key, a principal id, and a state word with
    /// exactly the columns it owns set.
    pub fn decode(self) -> Result<(ClaimDigest, ClaimRow), AccessError> {
        let at = At {
            what: "stored claim",
            table: "access_claims",
            row: "?",
        };
        let sha = at.sha("claim", &self.claim)?;
        let fp = sha.fingerprint();
        let at = At { row: &fp, ..at };
        let principal = at.principal("principal_id", self.principal_id)?;
        let word = self.state.as_str();
        let state = match (word, self.bound_digest, self.bound_kind, self.claimed_at_ms) {
            ("open", None, None, None) => ClaimState::Open,
            ("void", None, None, None) => ClaimState::Void,
            ("claimed", Some(hex), Some(kind), Some(at_ms)) => {
                let bound = at.sha("bound_digest", &hex)?.bytes().to_owned();
                let digest = match at.word("bound_kind", &kind, CredentialKind::parse)? {
                    CredentialKind::Bearer => Digest::bearer_from_sha256(bound),
                    CredentialKind::Browser => Digest::browser_from_sha256(bound),
                };
                ClaimState::Claimed { digest, at_ms }
            }
            ("claimed", ..) => {
                return Err(at.fail(
                    "state",
                    "a claimed claim without its bound digest, kind and time",
                ))
            }
            ("open" | "void", ..) => {
                return Err(at.fail("state", format!("a {word} claim with a bound digest")))
            }
            _ => return Err(at.fail("state", format!("unknown value {word:?}"))),
        };
        let row = ClaimRow {
            principal,
            expires_at_ms: self.expires_at_ms,
            state,
        };
        Ok((ClaimDigest::from_sha256(*sha.bytes()), row))
    }
}

/// An `access_memberships` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredMembership {
    /// The member.
    pub principal_id: String,
    /// The session.
    pub session_id: String,
    /// The role's word.
    pub role: String,
}

impl StoredMembership {
    /// The membership `((principal, session), role)`: both ids in their
    /// grammars and a known role.
    pub fn decode(self) -> Result<((String, String), Role), AccessError> {
        let at = At {
            what: "stored membership",
            table: "access_memberships",
            row: "?",
        };
        let p = at.principal("principal_id", self.principal_id)?;
        let key = format!("({p}, {})", self.session_id.escape_debug());
        let at = At { row: &key, ..at };
        if !is_session_id(&self.session_id) {
            return Err(at.fail(
                "session_id",
                format!("{:?} is not a session id", self.session_id),
            ));
        }
        let role = at.word("role", &self.role, Role::parse)?;
        Ok(((p, self.session_id), role))
    }
}

/// The bound on a stored digest column: a SHA-256 in hex.
const DIGEST_HEX_LEN: usize = 2 * crate::digest::SHA256_LEN;

impl StoredPrincipal {
    /// An `access_principals` row from `c`, in the order `principal_id,
    /// kind, name, created_at_ms`, every text bounded before it is copied;
    /// `c` names the row by its id once the id is one.
    pub fn read<C: Columns>(c: &mut Cells<C>) -> Result<Self, ColumnError> {
        let principal_id = c.text(0, "principal_id", PRINCIPAL_ID_LIMIT)?;
        // Core names a malformed id itself (`decode`).
        if super::is_principal_id(&principal_id) {
            c.at(principal_id.as_str());
        }
        Ok(StoredPrincipal {
            kind: c.text(1, "kind", MAX_WORD_LEN)?,
            name: c.opt_text(2, "name", DISPLAY_NAME_LIMIT)?,
            created_at_ms: c.unsigned(3, "created_at_ms")?,
            principal_id,
        })
    }
}

impl StoredCredential {
    /// An `access_credentials` row from `c`, in the order `digest, kind,
    /// principal_id, state, issued_at_ms, claimed_at_ms, last_resumed_ms,
    /// expires_at_ms, issued_by`; `c` names the row by its digest's head
    /// only.
    pub fn read<C: Columns>(c: &mut Cells<C>) -> Result<Self, ColumnError> {
        let digest = c.text(0, "digest", DIGEST_HEX_LEN)?;
        c.at(crate::digest::head_of(&digest));
        Ok(StoredCredential {
            kind: c.text(1, "kind", MAX_WORD_LEN)?,
            principal_id: c.text(2, "principal_id", PRINCIPAL_ID_LIMIT)?,
            state: c.text(3, "state", MAX_WORD_LEN)?,
            issued_at_ms: c.unsigned(4, "issued_at_ms")?,
            claimed_at_ms: c.opt_unsigned(5, "claimed_at_ms")?,
            last_resumed_ms: c.opt_unsigned(6, "last_resumed_ms")?,
            expires_at_ms: c.opt_unsigned(7, "expires_at_ms")?,
            issued_by: c.opt_text(8, "issued_by", FINGERPRINT_LEN)?,
            digest,
        })
    }
}

impl StoredClaim {
    /// An `access_claims` row from `c`, in the order `claim, principal_id,
    /// expires_at_ms, state, bound_digest, bound_kind, claimed_at_ms`; `c`
    /// names the row by its claim's head only.
    pub fn read<C: Columns>(c: &mut Cells<C>) -> Result<Self, ColumnError> {
        let claim = c.text(0, "claim", DIGEST_HEX_LEN)?;
        c.at(crate::digest::head_of(&claim));
        Ok(StoredClaim {
            principal_id: c.text(1, "principal_id", PRINCIPAL_ID_LIMIT)?,
            expires_at_ms: c.unsigned(2, "expires_at_ms")?,
            state: c.text(3, "state", MAX_WORD_LEN)?,
            bound_digest: c.opt_text(4, "bound_digest", DIGEST_HEX_LEN)?,
            bound_kind: c.opt_text(5, "bound_kind", MAX_WORD_LEN)?,
            claimed_at_ms: c.opt_unsigned(6, "claimed_at_ms")?,
            claim,
        })
    }
}

impl StoredMembership {
    /// An `access_memberships` row from `c`, in the order `principal_id,
    /// session_id, role`.
    pub fn read<C: Columns>(c: &mut Cells<C>) -> Result<Self, ColumnError> {
        let principal_id = c.text(0, "principal_id", PRINCIPAL_ID_LIMIT)?;
        let session_id = c.text(1, "session_id", SESSION_ID_LIMIT)?;
        c.at(format!("({principal_id}, {session_id})"));
        Ok(StoredMembership {
            role: c.text(2, "role", MAX_WORD_LEN)?,
            principal_id,
            session_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail(e: AccessError) -> String {
        match e {
            AccessError::Corrupt { what, detail } => format!("{what}: {detail}"),
            other => panic!("not Corrupt: {other:?}"),
        }
    }

    fn credential() -> StoredCredential {
        StoredCredential {
            digest: "ab".repeat(32),
            kind: "bearer".into(),
            principal_id: "own".into(),
            state: "active".into(),
            issued_at_ms: 1,
            claimed_at_ms: None,
            last_resumed_ms: None,
            expires_at_ms: None,
            issued_by: None,
        }
    }

    fn claim() -> StoredClaim {
        StoredClaim {
            claim: "cd".repeat(32),
            principal_id: "m1".into(),
            expires_at_ms: 9,
            state: "open".into(),
            bound_digest: None,
            bound_kind: None,
            claimed_at_ms: None,
        }
    }

    #[test]
    fn rows_that_keep_their_grammar_decode() {
        assert!(credential().decode().is_ok());
        assert!(claim().decode().is_ok());
        let claimed = StoredClaim {
            state: "claimed".into(),
            bound_digest: Some("ef".repeat(32)),
            bound_kind: Some("browser".into()),
            claimed_at_ms: Some(3),
            ..claim()
        };
        assert!(matches!(
            claimed.decode(),
            Ok((
                _,
                ClaimRow {
                    state: ClaimState::Claimed { at_ms: 3, .. },
                    ..
                }
            ))
        ));
        let p = StoredPrincipal {
            principal_id: "own".into(),
            kind: "owner".into(),
            name: Some("Olive".into()),
            created_at_ms: 1,
        };
        assert!(p.decode().is_ok(), "owner kind and a canonical name");
        let m = StoredMembership {
            principal_id: "m1".into(),
            session_id: "s1".into(),
            role: "observer".into(),
        };
        assert!(m.decode().is_ok());
    }

    #[test]
    fn each_broken_grammar_is_corrupt_naming_its_column() {
        let cases: Vec<(Result<(), AccessError>, &str)> = vec![
            (
                StoredCredential {
                    state: "garbage".into(),
                    ..credential()
                }
                .decode()
                .map(drop),
                "column state: unknown value \"garbage\"",
            ),
            (
                StoredCredential {
                    kind: "x".into(),
                    ..credential()
                }
                .decode()
                .map(drop),
                "column kind",
            ),
            (
                StoredCredential {
                    issued_by: Some("z".into()),
                    ..credential()
                }
                .decode()
                .map(drop),
                "column issued_by",
            ),
            (
                StoredClaim {
                    state: "claimed".into(),
                    ..claim()
                }
                .decode()
                .map(drop),
                "without its bound digest",
            ),
            (
                StoredClaim {
                    bound_kind: Some("bearer".into()),
                    ..claim()
                }
                .decode()
                .map(drop),
                "a open claim with a bound digest",
            ),
            (
                StoredClaim {
                    state: "halfway".into(),
                    ..claim()
                }
                .decode()
                .map(drop),
                "halfway",
            ),
            (
                StoredPrincipal {
                    principal_id: "own".into(),
                    kind: "owner".into(),
                    name: Some("  Olive ".into()),
                    created_at_ms: 1,
                }
                .decode()
                .map(drop),
                "access_principals row own: column name",
            ),
            (
                StoredMembership {
                    principal_id: "m2".into(),
                    session_id: "s1".into(),
                    role: "admin".into(),
                }
                .decode()
                .map(drop),
                "access_memberships row (m2, s1): column role: unknown value \"admin\"",
            ),
        ];
        for (got, needle) in cases {
            let text = detail(got.expect_err(needle));
            assert!(text.contains(needle), "{text} lacks {needle:?}");
        }
    }

    #[test]
    fn a_digest_that_is_not_hex_is_named_by_its_length_and_head_only() {
        use super::super::FINGERPRINT_LEN;
        let token = "plaintext-token-that-must-not-leak-0123456789";
        let e = StoredCredential {
            digest: token.into(),
            ..credential()
        }
        .decode();
        let text = detail(e.expect_err("not hex"));
        assert!(text.contains("not 64 lower-case hex digits"), "{text}");
        assert!(text.contains(&token[..FINGERPRINT_LEN]), "{text}");
        assert!(!text.contains(&token[..FINGERPRINT_LEN + 1]), "{text}");
        let upper = "AB".repeat(32);
        let e = StoredClaim {
            claim: upper.clone(),
            ..claim()
        }
        .decode();
        assert!(!detail(e.expect_err("upper")).contains(&upper));
    }
}
