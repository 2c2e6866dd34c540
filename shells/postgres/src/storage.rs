//! (placeholder: the storage port is being written)
