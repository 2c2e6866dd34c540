//! (placeholder: the catalogue port is being written)
