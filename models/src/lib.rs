//! custos-models — stateright models of the custos machines.
//!
//! Every model drives the **real** decision functions of `custos-core`; the
//! environment around them is the adversary (several actors, crash and
//! restart, delayed and duplicated messages, a clock that runs past lease
//! lifetimes). Each model states its safety rules as `always` properties and
//! its interesting outcomes as `sometimes` properties, so a model that never
//! reaches anything cannot pass vacuously.
//!
//! Each model also ships **mutants**: named variations the model applies
//! around the real decision (a wrapped request, a rewritten result) that
//! reproduce a real defect class. [`check`] runs the real model exhaustively to
//! a bound and requires every property to hold, then runs every mutant and
//! requires that some `always` property yields a counterexample.
//!
//! The registry ([`registry`]) is what `custos check` runs.

use std::fmt::Debug;
use std::hash::Hash;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::Serialize;
use stateright::{Checker, Expectation, HasDiscoveries, Model};

pub mod access;
pub mod custody;
pub mod deployment;
pub mod family;
pub mod fence;
pub mod homes;
pub mod lease;
pub mod ledger;
pub mod migration;
pub mod release;
pub mod run;
pub mod trace;
pub mod world;

/// Which bound to check a model to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bound {
    /// The CI bound: the whole suite well under five minutes on two cores.
    Ci,
    /// The deep bound, for `make check-deep`.
    Deep,
}

/// The verdict on one property of the real model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PropertyReport {
    /// The property's name.
    pub name: String,
    /// `always` or `sometimes`.
    pub kind: String,
    /// For `always`: no counterexample exists within the bound. For
    /// `sometimes`: an example was reached.
    pub held: bool,
    /// For a failed `always`, the length of the counterexample.
    pub counterexample_len: Option<usize>,
    /// For a failed `always`: a shortest counterexample, step by step.
    pub trace: Option<trace::Trace>,
}

/// The verdict on one mutant.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MutantReport {
    /// The mutant's name.
    pub name: String,
    /// Whether some `always` property produced a counterexample.
    pub killed: bool,
    /// The property that killed it.
    pub killed_by: Option<String>,
    /// The number of actions in the counterexample.
    pub counterexample_len: Option<usize>,
    /// The counterexample's actions, in order.
    pub counterexample: Vec<String>,
    /// The counterexample step by step: each action and the state change
    /// it made.
    pub trace: Option<trace::Trace>,
    /// States the checker generated before stopping.
    pub states: usize,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// The result of checking one model and its mutants.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelReport {
    /// The model's name.
    pub model: String,
    /// The bound it was checked to.
    pub bound: Bound,
    /// A human description of the bound's parameters.
    pub bound_detail: String,
    /// States generated, including repeats.
    pub states: usize,
    /// Unique states.
    pub unique_states: usize,
    /// Greatest depth reached.
    pub max_depth: usize,
    /// Wall-clock seconds for the real model.
    pub seconds: f64,
    /// Whether the search ran to exhaustion within the bound.
    pub exhaustive: bool,
    /// Every property's verdict.
    pub properties: Vec<PropertyReport>,
    /// Every mutant's verdict.
    pub mutants: Vec<MutantReport>,
}

impl ModelReport {
    /// True when the search was exhaustive, every property held and every
    /// mutant was killed.
    pub fn passed(&self) -> bool {
        self.exhaustive
            && self.properties.iter().all(|p| p.held)
            && self.mutants.iter().all(|m| m.killed)
    }

    /// Properties held, as `(held, total)`.
    pub fn properties_held(&self) -> (usize, usize) {
        (
            self.properties.iter().filter(|p| p.held).count(),
            self.properties.len(),
        )
    }

    /// Mutants killed, as `(killed, total)`.
    pub fn mutants_killed(&self) -> (usize, usize) {
        (
            self.mutants.iter().filter(|m| m.killed).count(),
            self.mutants.len(),
        )
    }
}

/// A model that `custos check` can run and `custos explore` can serve.
pub trait Registered: Send + Sync {
    /// The model's name, as typed on the command line.
    fn name(&self) -> &'static str;
    /// One line on what the model proves.
    fn summary(&self) -> &'static str;
    /// Checks the real model and every mutant to `bound`.
    fn check(&self, bound: Bound, threads: usize) -> ModelReport;
    /// The mutant names.
    fn mutant_names(&self) -> Vec<&'static str>;
    /// Checks the mutant called `mutant` as if it were the real model, so
    /// the properties it breaks are reported as failed, each with its
    /// shortest counterexample; `None` when no mutant has that name.
    fn check_as_model(&self, bound: Bound, threads: usize, mutant: &str) -> Option<ModelReport>;
    /// Serves stateright's Explorer for the real model (or a mutant) on
    /// `addr`. Blocks for as long as the server runs.
    fn explore(&self, bound: Bound, mutant: Option<&str>, addr: SocketAddr) -> Result<(), String>;
}

/// Every registered model, in the order `custos check` prints them.
pub fn registry() -> Vec<Box<dyn Registered>> {
    vec![
        Box::new(family::family::<lease::LeaseModel>()),
        Box::new(family::family::<fence::FenceModel>()),
        Box::new(family::family::<custody::CustodyModel>()),
        Box::new(family::family::<ledger::LedgerModel>()),
        Box::new(family::family::<migration::MigrationModel>()),
        Box::new(family::family::<homes::HomesModel>()),
        Box::new(family::family::<run::RunModel>()),
        Box::new(family::family::<world::WorldModel>()),
        Box::new(family::family::<release::ReleaseModel>()),
        Box::new(family::family::<deployment::DeploymentModel>()),
        Box::new(family::family::<access::AccessModel>()),
    ]
}

/// Checks `real` exhaustively and every mutant until its first `always`
/// counterexample. The generic engine behind every [`Registered::check`].
pub fn check<M>(
    name: &str,
    bound: Bound,
    bound_detail: String,
    threads: usize,
    real: M,
    mutants: Vec<(&'static str, M)>,
) -> ModelReport
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync,
    M::Action: Clone + Debug + PartialEq + Send + Sync,
{
    let properties = real.properties();
    let started = Instant::now();
    // Breadth-first at the CI bound; depth-first at the deep bound, where a
    // breadth-first frontier of full states would not fit in memory (the
    // visited set holds only fingerprints).
    let run = match bound {
        Bound::Ci => summarize(
            real.clone()
                .checker()
                .threads(threads.max(1))
                .spawn_bfs()
                .join(),
            &properties,
        ),
        Bound::Deep => summarize(
            real.clone()
                .checker()
                .threads(threads.max(1))
                .spawn_dfs()
                .join(),
            &properties,
        ),
    };
    let seconds = started.elapsed().as_secs_f64();
    let mut properties_report = run.properties;
    for report in properties_report
        .iter_mut()
        .filter(|r| !r.held && r.kind == "always")
    {
        if let Some(p) = properties.iter().find(|p| p.name == report.name) {
            if let Some((name, path)) = shortest(&real, std::slice::from_ref(p)) {
                report.counterexample_len = Some(path.len().saturating_sub(1));
                report.trace = Some(trace::Trace::from_path(name, &path));
            }
        }
    }
    let mutant_reports = mutants
        .into_iter()
        .map(|(mutant, model)| check_mutant(mutant, model))
        .collect();
    ModelReport {
        model: name.to_string(),
        bound,
        bound_detail,
        states: run.states,
        unique_states: run.unique_states,
        max_depth: run.max_depth,
        seconds,
        exhaustive: run.exhaustive,
        properties: properties_report,
        mutants: mutant_reports,
    }
}

/// What one finished search of the real model found.
struct Run {
    states: usize,
    unique_states: usize,
    max_depth: usize,
    exhaustive: bool,
    properties: Vec<PropertyReport>,
}

fn summarize<M, C>(checker: C, properties: &[stateright::Property<M>]) -> Run
where
    M: Model,
    M::State: Clone + PartialEq,
    M::Action: Clone + PartialEq,
    C: Checker<M>,
{
    let reports = properties
        .iter()
        .map(|p| {
            let found = checker.discovery(p.name);
            let (kind, held) = match p.expectation {
                Expectation::Always => ("always", found.is_none()),
                Expectation::Sometimes => ("sometimes", found.is_some()),
                Expectation::Eventually => ("eventually", found.is_none()),
            };
            PropertyReport {
                name: p.name.to_string(),
                kind: kind.to_string(),
                held,
                counterexample_len: match p.expectation {
                    Expectation::Sometimes => None,
                    _ => found.map(|path| path.into_actions().len()),
                },
                trace: None,
            }
        })
        .collect();
    Run {
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        exhaustive: checker.is_done(),
        properties: reports,
    }
}

/// Runs one mutant breadth-first on one thread (so the counterexample is a
/// shortest one) until some `always` property fails.
fn check_mutant<M>(name: &'static str, model: M) -> MutantReport
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync,
    M::Action: Clone + Debug + PartialEq + Send + Sync,
{
    let always: Vec<stateright::Property<M>> = model
        .properties()
        .into_iter()
        .filter(|p| matches!(p.expectation, Expectation::Always))
        .collect();
    let started = Instant::now();
    let checker = model
        .clone()
        .checker()
        .threads(1)
        .finish_when(HasDiscoveries::AnyFailures)
        .timeout(Duration::from_secs(600))
        .spawn_bfs()
        .join();
    let mut states = checker.state_count();
    let killer = first_violation(&checker, &always).map(|found| {
        let (k, extra) = shortest_counted(&model, &always, found);
        states += extra;
        k
    });
    let seconds = started.elapsed().as_secs_f64();
    let actions = |path: &[(M::State, Option<M::Action>)]| -> Vec<String> {
        path.iter()
            .filter_map(|(_, a)| a.as_ref().map(|a| format!("{a:?}")))
            .collect()
    };
    MutantReport {
        name: name.to_string(),
        killed: killer.is_some(),
        killed_by: killer.as_ref().map(|(p, _)| p.to_string()),
        counterexample_len: killer.as_ref().map(|(_, path)| actions(path).len()),
        counterexample: killer
            .as_ref()
            .map(|(_, path)| actions(path))
            .unwrap_or_default(),
        trace: killer
            .as_ref()
            .map(|(p, path)| trace::Trace::from_path(p, path)),
        states,
        seconds,
    }
}

/// A path of states, each with the action taken from it (the last: none).
type StatePath<M> = Vec<(<M as Model>::State, Option<<M as Model>::Action>)>;

/// A shortest path to a violation of one of `always`, if any is reachable.
fn shortest<M>(
    model: &M,
    always: &[stateright::Property<M>],
) -> Option<(&'static str, StatePath<M>)>
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync,
    M::Action: Clone + Debug + PartialEq + Send + Sync,
{
    let names = always.iter().map(|p| p.name).collect();
    let first = model
        .clone()
        .checker()
        .threads(1)
        .finish_when(HasDiscoveries::AnyOf(names))
        .timeout(Duration::from_secs(600))
        .spawn_bfs()
        .join();
    let found = first_violation(&first, always)?;
    Some(shortest_counted(model, always, found).0)
}

/// `found`, or a shorter violation of one of `always` if one exists, and
/// the states generated looking. stateright keeps the last violating state
/// of a block, not the first, so a path from one breadth-first search may
/// not be a shortest one: this deepens from one action to one less than
/// `found` has.
fn shortest_counted<M>(
    model: &M,
    always: &[stateright::Property<M>],
    found: (&'static str, StatePath<M>),
) -> ((&'static str, StatePath<M>), usize)
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync,
    M::Action: Clone + Debug + PartialEq + Send + Sync,
{
    let names: std::collections::BTreeSet<&'static str> = always.iter().map(|p| p.name).collect();
    let actions = found.1.len().saturating_sub(1);
    let mut states = 0;
    for depth in 1..actions {
        let shallow = model
            .clone()
            .checker()
            .threads(1)
            .finish_when(HasDiscoveries::AnyOf(names.clone()))
            // The initial state has depth 1, and states at the target depth are
            // not checked: this checks every path of at most `depth` actions.
            .target_max_depth(depth + 2)
            .spawn_bfs()
            .join();
        states += shallow.state_count();
        if let Some(k) = first_violation(&shallow, always) {
            return (k, states);
        }
    }
    (found, states)
}

/// The shortest prefix, over the failed `always` properties, of a discovered
/// path that ends at the property's first violation: `(property, path)`,
/// the path's last state the first that violates the property.
fn first_violation<M, C>(
    checker: &C,
    always: &[stateright::Property<M>],
) -> Option<(&'static str, StatePath<M>)>
where
    M: Model,
    M::State: Clone + PartialEq,
    M::Action: Clone + Debug + PartialEq,
    C: Checker<M>,
{
    always
        .iter()
        .filter_map(|p| {
            let mut path = checker.discovery(p.name)?.into_vec();
            let first_bad = path
                .iter()
                .position(|(state, _)| !(p.condition)(checker.model(), state))?;
            path.truncate(first_bad + 1);
            if let Some((_, last)) = path.last_mut() {
                *last = None;
            }
            Some((p.name, path))
        })
        .min_by_key(|(_, path)| path.len())
}

/// Serves the Explorer for `model` on `addr` and blocks.
pub fn serve<M>(model: M, addr: SocketAddr) -> Result<(), String>
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync,
    M::Action: Clone + Debug + PartialEq + Send + Sync,
{
    if !addr.ip().is_loopback() {
        return Err(format!(
            "refusing to serve the Explorer on non-loopback {addr}"
        ));
    }
    // The Explorer's server panics on a bind failure; find out first.
    drop(std::net::TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?);
    // Blocks while the server runs.
    let _checker = model.checker().serve(addr);
    Ok(())
}
