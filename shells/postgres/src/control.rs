//! (placeholder: the control port is being written)
