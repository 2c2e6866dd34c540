//! One table of stable reason strings per error enum.
//!
//! The docs and the tests name refusals by a stable reason string (usually
//! the variant's name). [`reasons!`](crate::reasons) generates an enum's
//! `reason()` from its variant list, so a reason is written once, in one
//! table, and a variant the table forgets is a compile error (the generated
//! match is exhaustive).

/// Generates `pub fn reason(&self) -> &'static str` for an enum from its
/// variant list: each variant answers its own name, or the string after
/// `=>`; a variant that wraps another error with its own reason (its first
/// tuple field) names a binding and answers an expression over it,
/// `Wrapped(e) => e.reason()`. Works for unit, tuple and struct variants
/// alike; doc attributes before the enum's name document the generated
/// method.
///
/// ```
/// #[derive(Debug)]
/// pub enum Inner {
///     Lost,
/// }
///
/// custos_core::reasons! {
///     /// The stable reason string.
///     Inner { Lost }
/// }
///
/// #[derive(Debug)]
/// pub enum Refusal {
///     Stale { seq: u64 },
///     Gone,
///     Moved(String),
///     Wrapped(Inner),
/// }
///
/// custos_core::reasons! {
///     /// The stable reason string.
///     Refusal { Stale, Gone, Moved => "Relocated", Wrapped(e) => e.reason() }
/// }
///
/// assert_eq!(Refusal::Stale { seq: 1 }.reason(), "Stale");
/// assert_eq!(Refusal::Gone.reason(), "Gone");
/// assert_eq!(Refusal::Moved("x".into()).reason(), "Relocated");
/// assert_eq!(Refusal::Wrapped(Inner::Lost).reason(), "Lost");
/// ```
#[macro_export]
macro_rules! reasons {
    (@reason $variant:ident) => {
        stringify!($variant)
    };
    (@reason $variant:ident $reason:expr) => {
        $reason
    };
    (
        $(#[$doc:meta])*
        $ty:ident { $($variant:ident $(($inner:ident))? $(=> $reason:expr)?),+ $(,)? }
    ) => {
        impl $ty {
            $(#[$doc])*
            pub fn reason(&self) -> &'static str {
                match self {
                    $( $ty::$variant { $(0: $inner,)? .. } => $crate::reasons!(@reason $variant $($reason)?), )+
                }
            }
        }
    };
}
