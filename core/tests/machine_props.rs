//! Property tests: random request streams through the lease and fence
//! machines never break the invariants `custos_testkit::streams` checks — and
//! the checkers catch a broken machine, so they are not vacuous.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::{fence, lease};
use custos_testkit::streams::fence::{check_fence_stream, check_fence_stream_with, FenceOp};
use custos_testkit::streams::lease::{
    check_lease_stream, check_lease_stream_with, FenceChoice, LeaseOp,
};
use proptest::prelude::*;

fn fence_choice() -> impl Strategy<Value = FenceChoice> {
    prop_oneof![3 => Just(FenceChoice::Believed), 1 => (0u8..6).prop_map(FenceChoice::Raw)]
}

fn lease_op() -> impl Strategy<Value = LeaseOp> {
    prop_oneof![
        (0u8..3, 0u8..6).prop_map(|(owner, ttl)| LeaseOp::Acquire { owner, ttl }),
        (0u8..3, fence_choice(), 0u8..6).prop_map(|(owner, fence, ttl)| LeaseOp::Renew {
            owner,
            fence,
            ttl
        }),
        (0u8..3, fence_choice(), 0u8..6).prop_map(|(owner, fence, ttl)| LeaseOp::Commit {
            owner,
            fence,
            ttl
        }),
        (0u8..3, fence_choice()).prop_map(|(owner, fence)| LeaseOp::Release { owner, fence }),
        (0u8..3).prop_map(|owner| LeaseOp::ReleaseByOwner { owner }),
        (0u8..4).prop_map(LeaseOp::Advance),
    ]
}

fn fence_op() -> impl Strategy<Value = FenceOp> {
    prop_oneof![
        (0u8..2, 0u8..3).prop_map(|(world, writer)| FenceOp::Acquire { world, writer }),
        (0u8..2, 0u8..3).prop_map(|(world, writer)| FenceOp::Write { world, writer }),
        (0u8..2, 0u8..8).prop_map(|(world, epoch)| FenceOp::RawWrite { world, epoch }),
        (0u8..2, 0u8..8).prop_map(|(world, floor)| FenceOp::ImportFloor { world, floor }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn lease_invariants_hold(ops in proptest::collection::vec(lease_op(), 0..64)) {
        prop_assert_eq!(check_lease_stream(&ops), Ok(()));
    }

    #[test]
    fn fence_invariants_hold(ops in proptest::collection::vec(fence_op(), 0..64)) {
        prop_assert_eq!(check_fence_stream(&ops), Ok(()));
    }
}

/// A lease machine whose commit check compares only the owner.
fn owner_only_commit(
    s: &lease::LeaseState,
    r: &lease::Request,
) -> Result<lease::Decision, lease::LeaseError> {
    match r {
        lease::Request::Commit {
            owner, now, ttl, ..
        } => {
            let fence = s.holder.as_ref().map_or(0, |h| h.fence);
            lease::decide(
                s,
                &lease::Request::Commit {
                    owner: owner.clone(),
                    fence,
                    now: *now,
                    ttl: *ttl,
                },
            )
        }
        _ => lease::decide(s, r),
    }
}

/// A lease machine that renews expired leases.
fn renews_expired(
    s: &lease::LeaseState,
    r: &lease::Request,
) -> Result<lease::Decision, lease::LeaseError> {
    match r {
        lease::Request::Renew {
            owner, fence, ttl, ..
        } => {
            let now = s
                .holder
                .as_ref()
                .map_or(0, |h| h.expires_at.saturating_sub(1));
            lease::decide(
                s,
                &lease::Request::Renew {
                    owner: owner.clone(),
                    fence: *fence,
                    now,
                    ttl: *ttl,
                },
            )
        }
        _ => lease::decide(s, r),
    }
}

/// A lease machine whose release by owner deletes whichever lease holds the
/// slot (the model's `release-by-owner-of-any-holder`).
fn releases_any_holder(
    s: &lease::LeaseState,
    r: &lease::Request,
) -> Result<lease::Decision, lease::LeaseError> {
    match (r, &s.holder) {
        (lease::Request::ReleaseByOwner { .. }, Some(h)) => lease::decide(
            s,
            &lease::Request::ReleaseByOwner {
                owner: h.owner.clone(),
            },
        ),
        _ => lease::decide(s, r),
    }
}

/// A fence machine whose floor import overwrites.
fn overwriting_floor(
    s: &fence::WorldFence,
    r: &fence::Request,
) -> Result<fence::Decision, fence::FenceError> {
    let mut d = fence::decide(s, r)?;
    if let fence::Request::ImportFloor { floor } = r {
        d.next.floor = *floor;
    }
    Ok(d)
}

#[test]
fn the_lease_checker_catches_an_owner_only_commit_check() {
    // a acquires (fence 1), restarts and acquires again (fence 2); its old
    // incarnation's commit under fence 1 must be refused.
    let ops = [
        LeaseOp::Acquire { owner: 0, ttl: 5 },
        LeaseOp::Acquire { owner: 0, ttl: 5 },
        LeaseOp::Commit {
            owner: 0,
            fence: FenceChoice::Raw(1),
            ttl: 5,
        },
    ];
    assert_eq!(check_lease_stream(&ops), Ok(()));
    let v = check_lease_stream_with(owner_only_commit, &ops).unwrap_err();
    assert_eq!(v.invariant, "admitted-only-for-the-live-exact-pair");
    assert_eq!(v.step, 2);
}

#[test]
fn the_lease_checker_catches_renewal_of_an_expired_lease() {
    let ops = [
        LeaseOp::Acquire { owner: 1, ttl: 2 },
        LeaseOp::Advance(3),
        LeaseOp::Renew {
            owner: 1,
            fence: FenceChoice::Believed,
            ttl: 2,
        },
    ];
    assert_eq!(check_lease_stream(&ops), Ok(()));
    let v = check_lease_stream_with(renews_expired, &ops).unwrap_err();
    assert_eq!(v.invariant, "admitted-only-for-the-live-exact-pair");
}

#[test]
fn the_lease_checker_catches_a_release_by_owner_of_another_owners_lease() {
    // b holds the slot; a's release by owner must leave b's lease alone, and
    // b's own release by owner frees it under whichever fence.
    let ops = [
        LeaseOp::Acquire { owner: 1, ttl: 5 },
        LeaseOp::ReleaseByOwner { owner: 0 },
        LeaseOp::ReleaseByOwner { owner: 1 },
    ];
    assert_eq!(check_lease_stream(&ops), Ok(()));
    let v = check_lease_stream_with(releases_any_holder, &ops).unwrap_err();
    assert_eq!(
        v.invariant,
        "release-by-owner-deletes-only-that-owners-lease"
    );
    assert_eq!(v.step, 1);
}

#[test]
fn the_fence_checker_catches_a_lowering_floor_import() {
    let ops = [
        FenceOp::ImportFloor { world: 0, floor: 5 },
        FenceOp::ImportFloor { world: 0, floor: 2 },
        FenceOp::Acquire {
            world: 0,
            writer: 0,
        },
    ];
    assert_eq!(check_fence_stream(&ops), Ok(()));
    let v = check_fence_stream_with(overwriting_floor, &ops).unwrap_err();
    assert_eq!(v.invariant, "fence-state-monotonic");
    assert_eq!(v.step, 1);
}

/// A lease machine whose release hands the backend no row to write: its
/// decided state drops the holder, its effects keep it.
fn release_unwritten(
    s: &lease::LeaseState,
    r: &lease::Request,
) -> Result<lease::Decision, lease::LeaseError> {
    let mut d = lease::decide(s, r)?;
    d.effects
        .retain(|e| !matches!(e, lease::Effect::DeleteHolder { .. }));
    Ok(d)
}

#[test]
fn the_lease_checker_catches_effects_that_do_not_write_the_decision() {
    let ops = [
        LeaseOp::Acquire { owner: 1, ttl: 5 },
        LeaseOp::ReleaseByOwner { owner: 1 },
    ];
    assert_eq!(check_lease_stream(&ops), Ok(()));
    let v = check_lease_stream_with(release_unwritten, &ops).unwrap_err();
    assert_eq!(v.invariant, "effects-write-the-decided-state");
    assert_eq!(v.step, 1);
}
