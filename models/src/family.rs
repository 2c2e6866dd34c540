//! A model family — one model at each bound plus its named mutants — and the
//! [`Registered`] entry every family gets for free.
//!
//! # Writing a new model
//!
//! A model file needs three things; everything else (checking the real model
//! and every mutant, the mutant lookup by name, the Explorer, the error
//! report of a model that cannot be built) is written once, here.
//!
//! 1. Its mutants, declared with [`mutants!`](crate::mutants): the enum, its
//!    stable command-line names and [`MutantSet::ALL`] in one table. The
//!    order of the table is the order `custos check` prints.
//!
//!    ```
//!    custos_models::mutants! {
//!        /// A defect the model can be made to exhibit.
//!        pub enum Mutant {
//!            /// The commit check compares only the owner.
//!            OwnerOnly => "commit-compares-only-owner",
//!            /// A release forgets the fence.
//!            ForgetsFence => "release-forgets-fence",
//!        }
//!    }
//!
//!    use custos_models::family::MutantSet;
//!    assert_eq!(Mutant::ALL, [Mutant::OwnerOnly, Mutant::ForgetsFence]);
//!    assert_eq!(Mutant::ForgetsFence.name(), "release-forgets-fence");
//!    ```
//!
//! 2. A `stateright::Model` that holds an `Option<Mutant>` and applies it
//!    around the real core decision (never a switch in core).
//!
//! 3. An `impl MutantModel for ThatModel` with `type Mutant`, `NAME`,
//!    `SUMMARY`, [`at`](MutantModel::at) (the real model at a bound; `Err`
//!    when its fixture cannot be built), [`mutant_slot`](MutantModel::mutant_slot)
//!    (the model's `mutant` field, which the provided
//!    [`with_mutant`](MutantModel::with_mutant) sets) and
//!    [`describe_bound`](MutantModel::describe_bound):
//!
//!    ```ignore
//!    impl MutantModel for FooModel {
//!        type Mutant = Mutant;
//!        const NAME: &'static str = "foo";
//!        const SUMMARY: &'static str = "one line on what the model proves";
//!
//!        fn at(bound: Bound) -> Result<Self, String> {
//!            Ok(FooModel { max_time: match bound { Bound::Ci => 4, Bound::Deep => 6 }, mutant: None })
//!        }
//!
//!        fn mutant_slot(&mut self) -> &mut Option<Mutant> {
//!            &mut self.mutant
//!        }
//!
//!        fn describe_bound(&self) -> String {
//!            format!("clock <= {}", self.max_time)
//!        }
//!    }
//!    ```
//!
//! Then `registry()` in `lib.rs` lists `family::family::<FooModel>()`, and
//! `tests/ci_bound.rs` pins its unique-state count at the CI bound.

use std::fmt::Debug;
use std::hash::Hash;
use std::marker::PhantomData;
use std::net::SocketAddr;

use stateright::Model;

use crate::{Bound, ModelReport, Registered};

/// A closed set of named mutants. Implement it with
/// [`mutants!`](crate::mutants), which writes the enum, [`ALL`](Self::ALL)
/// and [`name`](Self::name) from one table.
pub trait MutantSet: Copy + Send + Sync + 'static {
    /// Every mutant, in the order `custos check` prints them.
    const ALL: &'static [Self];
    /// The mutant's stable name, as typed on the command line.
    fn name(self) -> &'static str;
    /// The mutant called `name`, if any.
    fn named(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|m| m.name() == name)
    }
}

/// Declares a model's mutant enum and its [`MutantSet`] implementation from
/// one table: each variant (with its doc comment) `=>` its stable name. The
/// enum derives `Clone, Copy, Debug, PartialEq, Eq, Hash`; further behaviour
/// (say, the wrapped decision a mutant stands for) goes in an ordinary
/// `impl` block beside it. See the [module docs](crate::family) for an
/// example.
#[macro_export]
macro_rules! mutants {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $label:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $crate::family::MutantSet for $name {
            const ALL: &'static [Self] = &[ $( $name::$variant, )+ ];

            fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $label, )+
                }
            }
        }
    };
}

/// A model with a CI and a deep bound and a closed set of mutants, each a
/// variation the model applies around the real decision. See the
/// [module docs](crate::family) for what a new model implements.
pub trait MutantModel: Model + Clone + Send + Sync + 'static
where
    Self::State: Clone + Debug + Hash + PartialEq + Send + Sync,
    Self::Action: Clone + Debug + PartialEq + Send + Sync,
{
    /// The mutant type, declared with [`mutants!`](crate::mutants).
    type Mutant: MutantSet;
    /// The name typed on the command line.
    const NAME: &'static str;
    /// One line on what the model proves.
    const SUMMARY: &'static str;
    /// The real model at `bound`, or why it cannot be built (an invalid
    /// fixture): `custos check` then reports the model as not exhaustive,
    /// with the reason as its bound detail.
    fn at(bound: Bound) -> Result<Self, String>;
    /// The model's `mutant: Option<Self::Mutant>` field: `None` for the
    /// real model.
    fn mutant_slot(&mut self) -> &mut Option<Self::Mutant>;
    /// This model exhibiting `mutant`. The default sets
    /// [`mutant_slot`](Self::mutant_slot); a model whose mutant also changes
    /// its fixture overrides it.
    fn with_mutant(mut self, mutant: Self::Mutant) -> Self {
        *self.mutant_slot() = Some(mutant);
        self
    }
    /// A one-line description of this model's bound.
    fn describe_bound(&self) -> String;
}

/// The registry entry of a [`MutantModel`].
pub struct Family<M>(PhantomData<fn() -> M>);

/// The registry entry of model `M`.
pub fn family<M>() -> Family<M> {
    Family(PhantomData)
}

impl<M> Registered for Family<M>
where
    M: MutantModel,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync,
    M::Action: Clone + Debug + PartialEq + Send + Sync,
{
    fn name(&self) -> &'static str {
        M::NAME
    }

    fn summary(&self) -> &'static str {
        M::SUMMARY
    }

    fn check(&self, bound: Bound, threads: usize) -> ModelReport {
        let real = match M::at(bound) {
            Ok(real) => real,
            Err(e) => return unbuilt(M::NAME, bound, e),
        };
        let mutants = <M::Mutant as MutantSet>::ALL
            .iter()
            .map(|m| (m.name(), real.clone().with_mutant(*m)))
            .collect();
        crate::check(
            M::NAME,
            bound,
            real.describe_bound(),
            threads,
            real,
            mutants,
        )
    }

    fn check_as_model(&self, bound: Bound, threads: usize, mutant: &str) -> Option<ModelReport> {
        let m = M::Mutant::named(mutant)?;
        let real = match M::at(bound) {
            Ok(real) => real,
            Err(e) => return Some(unbuilt(M::NAME, bound, e)),
        };
        let model = real.with_mutant(m);
        let detail = format!("{} (mutant {mutant})", model.describe_bound());
        Some(crate::check(
            M::NAME,
            bound,
            detail,
            threads,
            model,
            Vec::new(),
        ))
    }

    fn mutant_names(&self) -> Vec<&'static str> {
        <M::Mutant as MutantSet>::ALL
            .iter()
            .map(|m| m.name())
            .collect()
    }

    fn explore(&self, bound: Bound, mutant: Option<&str>, addr: SocketAddr) -> Result<(), String> {
        let mut model = M::at(bound)?;
        if let Some(name) = mutant {
            let m = M::Mutant::named(name)
                .ok_or_else(|| format!("unknown mutant {name:?} of model {}", M::NAME))?;
            model = model.with_mutant(m);
        }
        crate::serve(model, addr)
    }
}

/// The report of a model that could not be built at `bound`: nothing
/// explored, not exhaustive (so it fails), the reason as its bound detail.
fn unbuilt(name: &str, bound: Bound, reason: String) -> ModelReport {
    ModelReport {
        model: name.to_string(),
        bound,
        bound_detail: reason,
        states: 0,
        unique_states: 0,
        max_depth: 0,
        seconds: 0.0,
        exhaustive: false,
        properties: Vec::new(),
        mutants: Vec::new(),
    }
}
