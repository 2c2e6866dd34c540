//! The manifest's declared exports against what the component bytes export.

use std::collections::BTreeSet;

use thiserror::Error;

use crate::contract::Contract;

/// The manifest's declared exports disagree with the component's.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DeclaredExportsError {
    /// A name is declared more than once.
    #[error("InvalidManifest: export `{name}` is declared more than once")]
    Duplicate {
        /// The repeated name.
        name: String,
    },
    /// The declared set and the exported set differ.
    #[error(
        "InvalidManifest: declared exports do not match the component: \
         declared but not exported {missing:?}; exported but not declared {undeclared:?}"
    )]
    Mismatch {
        /// Declared by the manifest, absent from the component (sorted).
        missing: Vec<String>,
        /// Exported by the component, not declared by the manifest (sorted).
        undeclared: Vec<String>,
    },
}

impl DeclaredExportsError {
    /// The failure's [`Class`](custos_core::Class): what the caller does next
    /// (always of the input).
    pub fn class(&self) -> custos_core::Class {
        use custos_core::Class;
        match self {
            DeclaredExportsError::Duplicate { .. } => Class::InvalidArgument,
            DeclaredExportsError::Mismatch { .. } => Class::InvalidArgument,
        }
    }
}

/// Checks that `declared` (the manifest's export list) names exactly the
/// interfaces and top-level functions `extracted` exports (its interface
/// names: a top-level function is an interface named after it): no duplicate, none
/// missing, none extra. Order does not matter.
pub fn check_declared_exports(
    declared: &[String],
    extracted: &Contract,
) -> Result<(), DeclaredExportsError> {
    let mut want = BTreeSet::new();
    for name in declared {
        if !want.insert(name.as_str()) {
            return Err(DeclaredExportsError::Duplicate { name: name.clone() });
        }
    }
    let exported = extracted.export_names();
    let have: BTreeSet<&str> = exported.iter().map(String::as_str).collect();
    let missing: Vec<String> = want.difference(&have).map(|s| s.to_string()).collect();
    let undeclared: Vec<String> = have.difference(&want).map(|s| s.to_string()).collect();
    if missing.is_empty() && undeclared.is_empty() {
        Ok(())
    } else {
        Err(DeclaredExportsError::Mismatch {
            missing,
            undeclared,
        })
    }
}
