//! A model family — one model at each bound plus its named mutants — and the
//! [`Registered`] entry every family gets for free.
//!
//! A model file implements [`MutantModel`]; `registry()` lists
//! `family::<ThatModel>()`. The checking, the mutant lookup and the Explorer
//! are written once, here.

use std::fmt::Debug;
use std::hash::Hash;
use std::marker::PhantomData;
use std::net::SocketAddr;

use stateright::Model;

use crate::{Bound, ModelReport, Registered};

/// A model with a CI and a deep bound and a closed set of mutants, each a
/// variation the model applies around the real decision.
pub trait MutantModel: Model + Clone + Send + Sync + 'static
where
    Self::State: Clone + Debug + Hash + PartialEq + Send + Sync,
    Self::Action: Clone + Debug + PartialEq + Send + Sync,
{
    /// The mutant type (usually a fieldless enum).
    type Mutant: Copy + Send + Sync + 'static;
    /// The name typed on the command line.
    const NAME: &'static str;
    /// One line on what the model proves.
    const SUMMARY: &'static str;
    /// The real model at `bound`.
    fn at(bound: Bound) -> Self;
    /// Every mutant.
    fn mutants() -> &'static [Self::Mutant];
    /// A mutant's stable name.
    fn mutant_name(mutant: Self::Mutant) -> &'static str;
    /// This model exhibiting `mutant`.
    fn with_mutant(self, mutant: Self::Mutant) -> Self;
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
        let real = M::at(bound);
        let mutants = M::mutants()
            .iter()
            .map(|m| (M::mutant_name(*m), real.clone().with_mutant(*m)))
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

    fn mutant_names(&self) -> Vec<&'static str> {
        M::mutants().iter().map(|m| M::mutant_name(*m)).collect()
    }

    fn explore(&self, bound: Bound, mutant: Option<&str>, addr: SocketAddr) -> Result<(), String> {
        let mut model = M::at(bound);
        if let Some(name) = mutant {
            let m = M::mutants()
                .iter()
                .find(|m| M::mutant_name(**m) == name)
                .ok_or_else(|| format!("unknown mutant {name:?} of model {}", M::NAME))?;
            model = model.with_mutant(*m);
        }
        crate::serve(model, addr)
    }
}
