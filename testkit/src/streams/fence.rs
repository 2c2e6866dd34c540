//! The fence stream checker: three writers acquiring epochs and writing on
//! two worlds, floors imported, through [`custos_core::fence::decide`].

use super::{violation, Violation};
use custos_core::fence::{self, Epoch, Holder, WorldFence};

/// One step of a fence request stream over two worlds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum FenceOp {
    /// Writer `writer` (mod 3) acquires a fence on `world` (mod 2).
    Acquire {
        /// World index.
        world: u8,
        /// Writer index.
        writer: u8,
    },
    /// Writer `writer` writes to `world` with the epoch it last acquired there.
    Write {
        /// World index.
        world: u8,
        /// Writer index.
        writer: u8,
    },
    /// A write carrying an arbitrary epoch.
    RawWrite {
        /// World index.
        world: u8,
        /// The epoch carried.
        epoch: u8,
    },
    /// Import a floor into `world`.
    ImportFloor {
        /// World index.
        world: u8,
        /// The floor.
        floor: u8,
    },
}

/// Runs a fence request stream and checks, after every step:
///
/// - epochs strictly increase per world, above every floor ever imported;
/// - the floor never decreases;
/// - a write is admitted only at the most recently issued epoch of its world,
///   never at an epoch a later acquisition staled, never at or below a floor.
pub fn check_fence_stream(ops: &[FenceOp]) -> Result<(), Violation> {
    check_fence_stream_with(fence::decide, ops)
}

/// The decision function of the fence machine, as the checker takes it.
pub type FenceDecide =
    fn(&WorldFence, &fence::Request) -> Result<fence::Decision, fence::FenceError>;

/// The world, request and (for an acquisition) writer index one
/// operation stands for; a write carries the epoch its writer believes.
fn request_of(
    op: FenceOp,
    step: usize,
    believed: &[[Epoch; 3]; 2],
) -> Result<(usize, fence::Request, Option<usize>), Violation> {
    Ok(match op {
        FenceOp::Acquire { world, writer } => {
            let holder = Holder::new(format!("writer-{}", writer % 3))
                .map_err(|e| violation("holder-valid", step, e.to_string()))?;
            (
                usize::from(world % 2),
                fence::Request::Acquire { holder },
                Some(usize::from(writer % 3)),
            )
        }
        FenceOp::Write { world, writer } => {
            let w = usize::from(world % 2);
            let epoch = believed[w][usize::from(writer % 3)];
            (w, fence::Request::AdmitWrite { epoch }, None)
        }
        FenceOp::RawWrite { world, epoch } => (
            usize::from(world % 2),
            fence::Request::AdmitWrite {
                epoch: Epoch::from(epoch),
            },
            None,
        ),
        FenceOp::ImportFloor { world, floor } => (
            usize::from(world % 2),
            fence::Request::ImportFloor {
                floor: Epoch::from(floor),
            },
            None,
        ),
    })
}

/// [`check_fence_stream`] over any decision function with the fence machine's
/// signature.
pub fn check_fence_stream_with(decide: FenceDecide, ops: &[FenceOp]) -> Result<(), Violation> {
    let mut worlds = [WorldFence::default(), WorldFence::default()];
    let mut believed = [[0 as Epoch; 3]; 2];
    let mut max_issued = [0 as Epoch; 2];
    let mut max_floor = [0 as Epoch; 2];
    for (step, op) in ops.iter().enumerate() {
        let (w, req, writer) = request_of(*op, step, &believed)?;
        let before = worlds[w].clone();
        let Ok(decision) = decide(&before, &req) else {
            continue;
        };
        if decision.next.floor < before.floor || decision.next.issued < before.issued {
            return Err(violation(
                "fence-state-monotonic",
                step,
                format!("{before:?} -> {:?}", decision.next),
            ));
        }
        match (&req, &decision.outcome) {
            (fence::Request::Acquire { .. }, fence::Outcome::Acquired { epoch, .. }) => {
                if *epoch <= max_issued[w] || *epoch <= max_floor[w] {
                    return Err(violation(
                        "epochs-strictly-increase-above-floors",
                        step,
                        format!(
                            "issued {epoch}, earlier max {}, floor {}",
                            max_issued[w], max_floor[w]
                        ),
                    ));
                }
                max_issued[w] = *epoch;
                if let Some(i) = writer {
                    believed[w][i] = *epoch;
                }
            }
            (fence::Request::AdmitWrite { epoch }, fence::Outcome::Admitted) => {
                if *epoch != max_issued[w] || *epoch <= max_floor[w] {
                    return Err(violation(
                        "write-only-at-current-epoch",
                        step,
                        format!(
                            "epoch {epoch} admitted; latest {}, floor {}",
                            max_issued[w], max_floor[w]
                        ),
                    ));
                }
            }
            (fence::Request::ImportFloor { floor }, fence::Outcome::FloorImported { .. }) => {
                max_floor[w] = max_floor[w].max(*floor);
                if decision.next.floor != max_floor[w] {
                    return Err(violation(
                        "floor-is-max-of-imports",
                        step,
                        format!(
                            "floor {} after imports up to {}",
                            decision.next.floor, max_floor[w]
                        ),
                    ));
                }
            }
            (req, outcome) => {
                return Err(violation(
                    "outcome-matches-request",
                    step,
                    format!("{req:?} answered {outcome:?}"),
                ))
            }
        }
        worlds[w] = decision.next;
    }
    Ok(())
}

/// Decodes `data` as an operation stream (with `arbitrary`) and runs
/// [`check_fence_stream`]. Undecodable tails are ignored.
#[cfg(feature = "arbitrary")]
pub fn check_fence_bytes(data: &[u8]) -> Result<(), Violation> {
    /// Streams longer than this are truncated: bounded work per input.
    const MAX_OPS: usize = 4096;
    check_fence_stream(&super::decode_ops::<FenceOp>(data, MAX_OPS))
}
