//! The control-catalog stream checker ([`custos_core::world::decide`]),
//! shared by the fuzz target (`fuzz/fuzz_targets/world.rs`), the property
//! test and the corpus replay (`core/tests/world_corpus.rs`).
//!
//! Two worlds, each with two candidate identities and three writer modes
//! (one of them unknown to this build), two tables and two schemas (plus a
//! forged fingerprint). A stream of small operations becomes real
//! [`Request`]s decided against the world's stored [`WorldSlot`]; after
//! every step the checker checks rules stated independently of how
//! `decide` works:
//!
//! - `changed` is exactly "the next slot differs from the stored one";
//! - an existing row's identity and writer mode never change;
//! - destroyed is monotonic, and a registration of a destroyed world is
//!   refused;
//! - the tick head never moves backwards;
//! - a row appears only as an active registration or a destroyed tombstone
//!   carrying the request's identity;
//! - signatures stay sorted, distinct by table and valid, and a recorded
//!   signature never changes; a forged fingerprint is never recorded;
//! - the decision's effects, applied to the stored slot as a backend
//!   applies them, write exactly the decided slot;
//! - the same request decided again right after a success is an
//!   unchanged repeat.

use super::{violation, Violation};
use custos_core::schema::{Field, LogicalType, Schema};
use custos_core::world::{
    apply_effect, decide, Decision, Request, Signature, WorldError, WorldIdentity, WorldRecord,
    WorldSlot, WorldStatus, WriterMode,
};

/// The decision function of the control catalog, as the checker takes it
/// (a mutant can be passed to show the checker catches it).
pub type WorldDecide = fn(&WorldSlot, &Request) -> Result<Decision, WorldError>;

/// One step of a control-catalog stream. Indices are taken modulo the
/// sizes of the checker's small universes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum WorldOp {
    /// Register `world` with identity `variant` and writer `mode`.
    Register {
        /// World index.
        world: u8,
        /// Identity variant index.
        variant: u8,
        /// Writer mode index.
        mode: u8,
    },
    /// Retire `world` exactly, carrying identity `variant`, `mode` and `tick`.
    Retire {
        /// World index.
        world: u8,
        /// Identity variant index.
        variant: u8,
        /// Writer mode index.
        mode: u8,
        /// The tick head carried.
        tick: u8,
    },
    /// Advance `world`'s tick head to `tick`.
    Advance {
        /// World index.
        world: u8,
        /// The tick reached.
        tick: u8,
    },
    /// Record signature `table` with `schema` (a forged fingerprint when
    /// `forge % 4 == 0`).
    Sign {
        /// World index.
        world: u8,
        /// Table index.
        table: u8,
        /// Schema index.
        schema: u8,
        /// Forgery selector.
        forge: u8,
    },
}

const WORLDS: [&str; 2] = ["world-a", "world-b"];

fn mode(i: u8) -> WriterMode {
    match i % 3 {
        0 => WriterMode::Resumable,
        1 => WriterMode::CleanupOnly,
        _ => WriterMode::parse(Some("v9-future")),
    }
}

fn record(world: u8, variant: u8, m: u8) -> WorldRecord {
    let w = WORLDS[usize::from(world % 2)];
    let mut id = WorldIdentity::new(w, format!("{w} v{}", variant % 2));
    id.run_id = (variant % 2 == 1).then(|| "run-1".to_owned());
    WorldRecord::active(id, mode(m))
}

fn signature(table: u8, schema: u8, forge: u8) -> Signature {
    let ty = if schema % 2 == 0 {
        LogicalType::Int {
            bits: 64,
            signed: true,
        }
    } else {
        LogicalType::Utf8 { large: false }
    };
    let s = Schema::new(vec![Field::new("value", ty, true)]);
    let mut sig = Signature::new(vec!["Score".into()], s, format!("table-{}", table % 2));
    if forge % 4 == 0 {
        sig.fingerprint = "0".repeat(64);
    }
    sig
}

/// The request an operation stands for.
pub fn request(op: &WorldOp) -> Request {
    match *op {
        WorldOp::Register {
            world,
            variant,
            mode,
        } => Request::Register {
            record: record(world, variant, mode),
        },
        WorldOp::Retire {
            world,
            variant,
            mode,
            tick,
        } => {
            let mut r = record(world, variant, mode).destroyed();
            r.tick_head = u64::from(tick);
            Request::Retire { record: r }
        }
        WorldOp::Advance { world, tick } => Request::AdvanceTick {
            world_id: WORLDS[usize::from(world % 2)].to_owned(),
            tick: u64::from(tick),
        },
        WorldOp::Sign {
            world,
            table,
            schema,
            forge,
        } => Request::RegisterSignature {
            world_id: WORLDS[usize::from(world % 2)].to_owned(),
            signature: signature(table, schema, forge),
        },
    }
}

fn check_step(
    decide: WorldDecide,
    step: usize,
    prev: &WorldSlot,
    req: &Request,
) -> Result<WorldSlot, Violation> {
    let d = match decide(prev, req) {
        Ok(d) => d,
        Err(e) => {
            check_refusal(step, prev, req, &e)?;
            return Ok(prev.clone());
        }
    };
    let next = &d.next;
    if d.changed != (next != prev) {
        return Err(violation(
            "changed means the slot changed",
            step,
            format!("changed={} for {req:?}", d.changed),
        ));
    }
    check_record(step, req, prev.record.as_ref(), next.record.as_ref())?;
    check_signatures(step, prev, next)?;
    let mut written = prev.clone();
    for e in &d.effects {
        apply_effect(&mut written, e);
    }
    if &written != next {
        return Err(violation(
            "the effects write the decided slot",
            step,
            format!("{req:?}: effects {:?}", d.effects),
        ));
    }
    match decide(next, req) {
        Ok(again) if !again.changed => {}
        other => {
            return Err(violation(
                "a repeat right after a success is unchanged",
                step,
                format!("{req:?}: {other:?}"),
            ))
        }
    }
    Ok(d.next)
}

/// A refusal is never the answer to an identical re-registration of an
/// active world, nor to an exact retirement.
fn check_refusal(
    step: usize,
    prev: &WorldSlot,
    req: &Request,
    e: &WorldError,
) -> Result<(), Violation> {
    if let (Request::Register { record }, Some(r)) = (req, &prev.record) {
        if r.status == WorldStatus::Active && r.same_identity(record) {
            return Err(violation(
                "identical re-registration is a no-op",
                step,
                e.to_string(),
            ));
        }
    }
    if let (Request::Retire { record }, Some(r)) = (req, &prev.record) {
        if r.same_identity(record) {
            return Err(violation(
                "an exact retirement succeeds",
                step,
                e.to_string(),
            ));
        }
    }
    Ok(())
}

/// The row's rules: identity immutable, destroyed monotonic and never
/// re-registered, the tick head never backwards, rows never removed, and a
/// row appears only as an active registration or a destroyed tombstone
/// carrying the request's identity.
fn check_record(
    step: usize,
    req: &Request,
    prev: Option<&WorldRecord>,
    next: Option<&WorldRecord>,
) -> Result<(), Violation> {
    match (prev, next) {
        (Some(a), Some(b)) => {
            if !a.same_identity(b) {
                return Err(violation(
                    "identity is immutable",
                    step,
                    format!("{a:?} -> {b:?}"),
                ));
            }
            if a.status == WorldStatus::Destroyed && b.status != WorldStatus::Destroyed {
                return Err(violation(
                    "destroyed is monotonic",
                    step,
                    format!("{req:?}"),
                ));
            }
            if a.status == WorldStatus::Destroyed && matches!(req, Request::Register { .. }) {
                return Err(violation(
                    "a destroyed world is never re-registered",
                    step,
                    format!("{req:?}"),
                ));
            }
            if b.tick_head < a.tick_head {
                return Err(violation(
                    "the tick head never moves backwards",
                    step,
                    format!("{} -> {}", a.tick_head, b.tick_head),
                ));
            }
        }
        (Some(_), None) => {
            return Err(violation(
                "rows are never removed",
                step,
                format!("{req:?}"),
            ))
        }
        (None, Some(b)) => {
            let ok = match req {
                Request::Register { record } => b == record && b.status == WorldStatus::Active,
                Request::Retire { record } => b == record && b.status == WorldStatus::Destroyed,
                _ => false,
            };
            if !ok {
                return Err(violation(
                    "a row appears only by registration or tombstone",
                    step,
                    format!("{req:?} made {b:?}"),
                ));
            }
        }
        (None, None) => {}
    }
    Ok(())
}

/// Signatures stay sorted, distinct by table and valid, and a recorded one
/// never changes.
fn check_signatures(step: usize, prev: &WorldSlot, next: &WorldSlot) -> Result<(), Violation> {
    if next
        .signatures
        .windows(2)
        .any(|w| w[0].table_id >= w[1].table_id)
    {
        return Err(violation(
            "signatures sorted and distinct",
            step,
            format!("{:?}", next.signatures),
        ));
    }
    if let Some(bad) = next.signatures.iter().find(|s| s.validate().is_err()) {
        return Err(violation(
            "only valid signatures are recorded",
            step,
            format!("{bad:?}"),
        ));
    }
    for old in &prev.signatures {
        if !next.signatures.contains(old) {
            return Err(violation(
                "a recorded signature never changes",
                step,
                format!("{} lost or changed", old.table_id),
            ));
        }
    }
    Ok(())
}

/// Runs `ops` against two worlds, checking every rule after every step.
pub fn check_world_stream(ops: &[WorldOp]) -> Result<(), Violation> {
    check_world_stream_with(decide, ops)
}

/// [`check_world_stream`] with another decision function.
pub fn check_world_stream_with(decide: WorldDecide, ops: &[WorldOp]) -> Result<(), Violation> {
    let mut slots = [WorldSlot::default(), WorldSlot::default()];
    for (step, op) in ops.iter().enumerate() {
        let req = request(op);
        let i = usize::from(WORLDS[1] == req.world_id());
        slots[i] = check_step(decide, step, &slots[i], &req)?;
    }
    Ok(())
}

/// Decodes `data` as an operation stream (with `arbitrary`) and runs
/// [`check_world_stream`]. Undecodable tails are ignored.
#[cfg(feature = "arbitrary")]
pub fn check_world_bytes(data: &[u8]) -> Result<(), Violation> {
    /// Streams longer than this are truncated: bounded work per input.
    const MAX_OPS: usize = 2048;
    check_world_stream(&super::decode_ops::<WorldOp>(data, MAX_OPS))
}
