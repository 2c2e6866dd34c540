//! A call row as a backend reads it back, checked here once: a backend
//! decodes each column's type and byte bound (and its own integer
//! encoding) and hands the columns to [`StoredCall::decode`], which holds
//! every rule that ties them together.

use super::{CallRow, Digest, LedgerError, RequestId, RowState, Tool};

/// The columns of one `ledger_calls` row, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredCall {
    /// The tool.
    pub tool: String,
    /// The state word: `admitted`, `terminal` or `unknown`.
    pub state: String,
    /// The outcome (a terminal row's only).
    pub outcome: Option<Vec<u8>>,
    /// The outcome's SHA-256 (a terminal row's only).
    pub digest: Option<Vec<u8>>,
    /// The reservation (admitted) or the outcome's recorded size
    /// (terminal); zero for an unknown row.
    pub bytes: u64,
    /// The admission's request id. Read only for an `admitted` row: in any
    /// other state it is ignored (a build from before request ids, running
    /// beside this one, rewrites a row's state and leaves the column as it
    /// was).
    pub request: Option<String>,
}

impl StoredCall {
    /// The row: the tool's grammar, a state word with exactly the columns
    /// it owns set, a 32-byte digest, the request id's grammar. A row that
    /// breaks one is [`LedgerError::MalformedRow`] naming `at` (the table
    /// and the row) and the column.
    pub fn decode(self, at: &str) -> Result<CallRow, LedgerError> {
        let malformed = |detail: String| LedgerError::MalformedRow { detail };
        let named = |e: LedgerError, col: &str| malformed(format!("{at}: column {col}: {e}"));
        let tool = Tool::new(self.tool).map_err(|e| named(e, "tool"))?;
        let bytes = self.bytes;
        let state = match (self.state.as_str(), self.outcome, self.digest) {
            ("admitted", None, None) => RowState::Admitted {
                reserved: bytes,
                request: self
                    .request
                    .map(|q| RequestId::new(q).map_err(|e| named(e, "admit_request")))
                    .transpose()?,
            },
            ("unknown", None, None) if bytes == 0 => RowState::Unknown,
            ("terminal", Some(outcome), Some(digest)) => {
                let digest: Digest = digest.try_into().map_err(|d: Vec<u8>| {
                    malformed(format!("{at}: column outcome_digest: {} bytes", d.len()))
                })?;
                RowState::Terminal {
                    outcome,
                    digest,
                    bytes,
                }
            }
            (s, o, d) => {
                return Err(malformed(format!(
                "{at}: column state {s:?} with outcome {} and digest {} (outcome_bytes {bytes})",
                if o.is_some() { "set" } else { "null" },
                if d.is_some() { "set" } else { "null" }
            )))
            }
        };
        Ok(CallRow { tool, state })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(
        state: &str,
        outcome: Option<&[u8]>,
        digest: Option<Vec<u8>>,
        bytes: u64,
    ) -> StoredCall {
        StoredCall {
            tool: "tool".into(),
            state: state.into(),
            outcome: outcome.map(<[u8]>::to_vec),
            digest,
            bytes,
            request: Some("r-1".into()),
        }
    }

    #[test]
    fn each_state_owns_exactly_its_columns() {
        let at = "ledger_calls row k";
        let admitted = call("admitted", None, None, 7).decode(at);
        assert!(matches!(
            admitted,
            Ok(CallRow {
                state: RowState::Admitted {
                    reserved: 7,
                    request: Some(_)
                },
                ..
            })
        ));
        // A request id beside a terminal row is ignored, not refused.
        let terminal = call("terminal", Some(b"ok"), Some(vec![1; 32]), 2).decode(at);
        assert!(matches!(
            terminal,
            Ok(CallRow {
                state: RowState::Terminal { bytes: 2, .. },
                ..
            })
        ));
        assert!(matches!(
            call("unknown", None, None, 0).decode(at),
            Ok(CallRow {
                state: RowState::Unknown,
                ..
            })
        ));
        for broken in [
            call("unknown", None, None, 1),
            call("admitted", Some(b"x"), None, 0),
            call("terminal", Some(b"ok"), None, 2),
            call("terminal", Some(b"ok"), Some(vec![1; 31]), 2),
            call("running", None, None, 0),
            StoredCall {
                tool: String::new(),
                ..call("unknown", None, None, 0)
            },
            StoredCall {
                request: Some(String::new()),
                ..call("admitted", None, None, 0)
            },
        ] {
            match broken.clone().decode(at) {
                Err(LedgerError::MalformedRow { detail }) => {
                    assert!(detail.starts_with(at), "{detail}");
                }
                other => panic!("{broken:?} decoded as {other:?}"),
            }
        }
    }
}
