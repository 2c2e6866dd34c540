//! One table of stable reason strings per error enum.
//!
//! The specs and the tests name refusals by a stable reason string (usually
//! the variant's name). [`reasons!`](crate::reasons) generates an enum's
//! `reason()` from its variant list, so a reason is written once, in one
//! table, and a variant the table forgets is a compile error (the generated
//! match is exhaustive).

/// Generates `pub fn reason(&self) -> &'static str` for an enum from its
/// variant list: each variant answers its own name, or the string after
/// `=>`. Works for unit, tuple and struct variants alike; doc attributes
/// before the enum's name document the generated method.
///
/// ```
/// #[derive(Debug)]
/// pub enum Refusal {
///     Stale { seq: u64 },
///     Gone,
///     Moved(String),
/// }
///
/// custos_core::reasons! {
///     /// The stable reason string.
///     Refusal { Stale, Gone, Moved => "Relocated" }
/// }
///
/// assert_eq!(Refusal::Stale { seq: 1 }.reason(), "Stale");
/// assert_eq!(Refusal::Gone.reason(), "Gone");
/// assert_eq!(Refusal::Moved("x".into()).reason(), "Relocated");
/// ```
#[macro_export]
macro_rules! reasons {
    (@reason $variant:ident) => {
        stringify!($variant)
    };
    (@reason $variant:ident $reason:literal) => {
        $reason
    };
    (
        $(#[$doc:meta])*
        $ty:ident { $($variant:ident $(=> $reason:literal)?),+ $(,)? }
    ) => {
        impl $ty {
            $(#[$doc])*
            pub fn reason(&self) -> &'static str {
                match self {
                    $( $ty::$variant { .. } => $crate::reasons!(@reason $variant $($reason)?), )+
                }
            }
        }
    };
}
