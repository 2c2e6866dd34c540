//! (placeholder: the ledger port is being written)
