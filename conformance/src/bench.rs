//! Workloads the shells' benches share, so that their figures compare
//! across backends: the snapshot bench's session and plan, and the access
//! bench's principals, probe order and interleaved timing loop. Nothing
//! here asserts anything about time; a bench prints what it measured.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use custos_core::catalogue::access::{
    credential_digest, Access, AccessRequest, Digest, Enrollment, Role,
};
use custos_core::catalogue::{Catalogue, Creation, Request};
use custos_core::snapshot::Plan;
use custos_core::storage::{
    Commit, KeyPrefix, Kind, Namespace, Payload, RecordId, RegisterKey, Storage, UsageFigures,
    Write,
};

// ------------------------------------------------------------- snapshot

/// The strands of the snapshot bench's session (`strand/s0..s7`).
pub const STRANDS: usize = 8;

/// Entries per commit while the snapshot bench's session is written.
pub const PER_COMMIT: usize = 1000;

fn ns(s: &str) -> Namespace {
    Namespace::new(s).unwrap()
}

fn key(s: &str) -> RegisterKey {
    RegisterKey::new(s).unwrap()
}

fn set(n: &str, k: &str, value: Vec<u8>) -> Write {
    Write::SetRegister {
        namespace: ns(n),
        key: key(k),
        value: Payload::new(value).unwrap(),
    }
}

/// Writes the snapshot bench's session into the empty store `s`: registers
/// `session/meta` and `config/c00..c19`, then a chain of `entries` entries
/// (200-byte payloads, [`PER_COMMIT`] per commit) with, every 10 entries,
/// a usage row, an `op/life/op-<i>` cell (a namespace that grows with
/// history) and the strand `strand/s<k>` naming that op as its `latest`.
pub fn write_snapshot_session<S: Storage>(s: &S, entries: usize) {
    let kind = Kind::new("m").unwrap();
    let payload = Payload::new(vec![7u8; 200]).unwrap();
    let mut setup = Commit::at(1).write(set("session", "meta", vec![b'm'; 300]));
    for i in 0..20 {
        setup = setup.write(set("config", &format!("c{i:02}"), vec![b'c'; 64]));
    }
    s.commit(&setup).unwrap();
    let mut i = 0;
    while i < entries {
        let mut c = Commit::at(i as u64 + 2);
        for _ in 0..PER_COMMIT.min(entries - i) {
            c = c.write(Write::InsertEntry {
                id: RecordId::new(format!("e{i}")).unwrap(),
                parent: (i > 0).then(|| RecordId::new(format!("e{}", i - 1)).unwrap()),
                kind: kind.clone(),
                payload: payload.clone(),
            });
            if i % 10 == 0 {
                let op = format!("op-{i}");
                let strand = format!("s{}", (i / 10) % STRANDS);
                c = c
                    .write(Write::InsertUsage {
                        id: RecordId::new(format!("u{i}")).unwrap(),
                        figures: UsageFigures {
                            input_tokens: 10,
                            ..UsageFigures::default()
                        },
                        details: Payload::new(vec![1u8; 32]).unwrap(),
                    })
                    .write(set("op", &format!("life/{op}"), vec![b'l'; 80]))
                    .write(set(
                        "strand",
                        &strand,
                        format!(r#"{{"latest":"{op}"}}"#).into_bytes(),
                    ));
            }
            i += 1;
        }
        s.commit(&c).unwrap();
    }
}

/// The snapshot bench's plan: `session/meta` exact, the `config`
/// namespace, the eight strands exact, and each strand's `latest` followed
/// into `op/life/` — 37 cells per capture of the session
/// [`write_snapshot_session`] writes.
pub fn snapshot_plan() -> Plan {
    let mut p = Plan::new()
        .exact(ns("session"), key("meta"))
        .namespace(ns("config"));
    for k in 0..STRANDS {
        let source = p.selections.len();
        p = p
            .exact(ns("strand"), key(&format!("s{k}")))
            .optional_prefixed_field(source, "latest", ns("op"), KeyPrefix::new("life/").unwrap());
    }
    p
}

// --------------------------------------------------------------- access

/// The principals the access bench loads, each with one bearer credential.
pub const PRINCIPALS: usize = 1000;

/// Calls per chunk of the access bench's interleaved loops.
pub const CHUNK: usize = 250;

/// The bearer token of principal `i` (0 is the owner).
pub fn token(i: usize) -> String {
    format!("bench-token-{i}")
}

/// Loads the access bench's principals into `c`: session `s1`, the owner
/// (principal 0) and [`PRINCIPALS`]` - 1` observers of `s1`, each with the
/// bearer credential of its [`token`]. Answers the credentials' digests in
/// principal order.
pub fn load_principals<C: Catalogue + Access>(c: &C) -> Vec<Digest> {
    c.apply(&Request::Reserve {
        session_id: "s1".into(),
        creation: Creation::local("k-s1", "bench", "/w"),
        now: 1,
    })
    .unwrap();
    let mut out = Vec::with_capacity(PRINCIPALS);
    let d = credential_digest(token(0).as_bytes());
    c.apply_access(&AccessRequest::BootstrapOwner {
        principal: "owner".into(),
        name: Some("Owner".into()),
        digest: d,
        now_ms: 1,
    })
    .unwrap();
    out.push(d);
    for i in 1..PRINCIPALS {
        let d = credential_digest(token(i).as_bytes());
        c.apply_access(&AccessRequest::InviteMember {
            principal: format!("member-{i:04}"),
            name: Some(format!("Member {i}")),
            session_id: "s1".into(),
            role: Role::Observer,
            enrollment: Enrollment::Digest(d),
            now_ms: 2,
        })
        .unwrap();
        out.push(d);
    }
    out
}

/// The order the access bench probes the principals in: a fixed shuffle
/// (an LCG), so that neither loop walks the keys in order.
pub fn probe_order() -> Vec<usize> {
    let mut order: Vec<usize> = (0..PRINCIPALS).collect();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..order.len()).rev() {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let j = usize::try_from(x >> 33).unwrap() % (i + 1);
        order.swap(i, j);
    }
    order
}

/// What [`interleave`] measured, the warm-up chunk left out.
#[derive(Clone, Debug, Default)]
pub struct Interleaved {
    /// Time in the raw loop.
    pub raw: Duration,
    /// Time in the port's loop.
    pub ours: Duration,
    /// Each chunk's port time over its raw time.
    pub ratios: Vec<f64>,
    /// Lookups that found a row (raw) and a principal (the port).
    pub found: (usize, usize),
    /// What the meter counted over the port's chunks.
    pub metered: u64,
}

/// Probes the principals in [`probe_order`], `calls` per loop: chunks of
/// [`CHUNK`] picks, each probed first by `raw` then by `ours` (both answer
/// whether they found their row), the first chunk a warm-up. `meter` is
/// read before and after each of `ours`' chunks (a round-trip counter; a
/// constant when there is none).
pub fn interleave(
    calls: usize,
    mut raw: impl FnMut(usize) -> bool,
    mut ours: impl FnMut(usize) -> bool,
    mut meter: impl FnMut() -> u64,
) -> Interleaved {
    let order = probe_order();
    let mut k = 0usize;
    let mut next = || {
        k += 1;
        order[k % PRINCIPALS]
    };
    let mut out = Interleaved::default();
    for round in 0..=calls / CHUNK {
        let picks: Vec<usize> = (0..CHUNK).map(|_| next()).collect();
        let t = Instant::now();
        for &i in &picks {
            out.found.0 += usize::from(black_box(raw(i)));
        }
        let r = t.elapsed();
        let before = meter();
        let t = Instant::now();
        for &i in &picks {
            out.found.1 += usize::from(black_box(ours(i)));
        }
        let o = t.elapsed();
        if round == 0 {
            continue; // warm-up
        }
        out.metered += meter() - before;
        out.raw += r;
        out.ours += o;
        out.ratios.push(o.as_secs_f64() / r.as_secs_f64());
    }
    out.ratios.sort_by(f64::total_cmp);
    out
}

impl Interleaved {
    /// The calls measured per loop (the warm-up left out).
    #[must_use]
    pub fn calls(&self) -> f64 {
        (self.ratios.len() * CHUNK) as f64
    }

    /// Microseconds per raw call.
    #[must_use]
    pub fn raw_us(&self) -> f64 {
        self.raw.as_secs_f64() * 1e6 / self.calls()
    }

    /// Microseconds per call of the port.
    #[must_use]
    pub fn ours_us(&self) -> f64 {
        self.ours.as_secs_f64() * 1e6 / self.calls()
    }

    /// The line that compares the two loops: the overall and the median
    /// chunk ratio, and the lookups found.
    #[must_use]
    pub fn ratio_line(&self) -> String {
        let median = self.ratios[self.ratios.len() / 2];
        format!(
            "ratio authenticate / raw: {:.2} overall, {median:.2} median of {} interleaved chunks (goal ≤ 2); {} + {} lookups found",
            self.ours_us() / self.raw_us(),
            self.ratios.len(),
            self.found.0,
            self.found.1
        )
    }
}
