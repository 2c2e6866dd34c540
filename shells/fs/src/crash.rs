//! Crash states from a recorded trace (the ALICE method as a unit test).
//!
//! [`crash_states_with`] replays every prefix of a
//! [`RecordingFs`](crate::RecordingFs) trace into an in-memory [`Image`] of
//! the files that could be on disk after a power loss at that point, and
//! streams them (one image at a time: memory is one image and one prefix's
//! choices, however many states there are). An operation not yet covered
//! by a later fsync in the prefix may be lost where POSIX allows:
//!
//! - an unsynced directory entry (a created directory or file — the empty
//!   lock file an exclusive lock creates included —, a removal) may vanish, unless its parent is synced later in the prefix or — for
//!   a created entry — a later rename moved it into a directory that was
//!   then synced (the synced destination entry names it);
//! - the data of a file written and not covered by a later `SyncFile` of
//!   it may be empty, whole, or **torn**: a prefix kept at [`SECTOR`]
//!   (512-byte) granularity, `b` bytes for `b` a multiple of 512 strictly
//!   between 0 and the length (a single sector is written atomically; a
//!   file of at most 512 bytes is never torn). [`TornMode`] bounds the
//!   choices: every boundary when there are at most `max`, otherwise a
//!   deterministic sample of `max` of them that always holds the first,
//!   the last and the middle boundary, the rest evenly spaced;
//! - an unsynced rename may be absent, complete, or half-done (destination
//!   present, source still there).
//!
//! A file covered by a later `SyncFile` keeps all its data; every
//! combination of the other operations' choices is one crash state (an
//! odometer over per-operation choices, so one file's unsynced data
//! survives or not independently of another's). [`Options::sample`] bounds
//! the states of one prefix: when a prefix has more combinations than
//! `max`, `max` of them are drawn with a seeded generator (always the one
//! with every choice first and the one with every operation whole), so a
//! CI run stays short and reproducible while [`Options::deep`] enumerates
//! everything. [`Options::from_env`] selects the deep mode when
//! `CUSTOS_CRASH_DEEP=1` (`make crash-deep`). [`Distinct`] counts distinct
//! images by the SHA-256 of a canonical encoding.
//!
//! [`crash_states`] is the exhaustive collected form for small traces
//! (every combination; torn prefixes bounded by [`DEFAULT_TORN_SECTORS`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use custos_core::release::Sha256;

use crate::fs::{Op, Recorded};

/// The sector: the granularity at which a torn write keeps a prefix.
pub const SECTOR: usize = 512;

/// The torn-prefix bound of [`Options::default`] (and [`crash_states`]).
pub const DEFAULT_TORN_SECTORS: usize = 8;

/// The torn-prefix bound of [`Options::ci`].
pub const CI_TORN_SECTORS: usize = 4;

/// The most states per prefix of [`Options::ci`].
pub const CI_SAMPLE: usize = 32;

/// The seed of [`Options::ci`] (overridden by `CUSTOS_CRASH_SEED`).
pub const CI_SEED: u64 = 0x6375_7374_6f73_2d66;

/// The torn-prefix bound of [`Options::deep`]: every boundary of a write
/// up to 2 MiB.
pub const DEEP_TORN_SECTORS: usize = 4096;

/// The environment variable that selects the deep mode (`1`).
pub const DEEP_ENV: &str = "CUSTOS_CRASH_DEEP";

/// The environment variable that overrides the CI sample's seed.
pub const SEED_ENV: &str = "CUSTOS_CRASH_SEED";

/// One node of an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// A directory.
    Dir,
    /// A regular file and its bytes.
    File(Vec<u8>),
}

/// What the disk holds: absolute path → node.
pub type Image = BTreeMap<PathBuf, Node>;

/// Whether and how unsynced file data may be torn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TornMode {
    /// Unsynced data is empty or whole, never torn.
    Off,
    /// A sector-granular prefix: every boundary strictly inside the write
    /// when it has at most `max`, otherwise `max` of them (first, last,
    /// middle, the rest evenly spaced).
    Sectors {
        /// The most torn prefixes per write.
        max: usize,
    },
}

/// How [`crash_states_with`] enumerates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Torn writes.
    pub torn: TornMode,
    /// `Some((seed, max))`: at most `max` states per prefix, drawn with
    /// `seed` when a prefix has more; `None`: every combination.
    pub sample: Option<(u64, usize)>,
}

impl Default for Options {
    /// Every combination, torn prefixes bounded by [`DEFAULT_TORN_SECTORS`].
    fn default() -> Self {
        Options {
            torn: TornMode::Sectors {
                max: DEFAULT_TORN_SECTORS,
            },
            sample: None,
        }
    }
}

impl Options {
    /// The deep run: every combination, every torn boundary up to
    /// [`DEEP_TORN_SECTORS`].
    pub fn deep() -> Self {
        Options {
            torn: TornMode::Sectors {
                max: DEEP_TORN_SECTORS,
            },
            sample: None,
        }
    }

    /// The bounded CI sample: [`CI_TORN_SECTORS`] torn prefixes per write,
    /// at most [`CI_SAMPLE`] states per prefix drawn with `seed`.
    pub fn ci(seed: u64) -> Self {
        Options {
            torn: TornMode::Sectors {
                max: CI_TORN_SECTORS,
            },
            sample: Some((seed, CI_SAMPLE)),
        }
    }

    /// Whether these options enumerate everything (no sample).
    pub fn is_deep(&self) -> bool {
        self.sample.is_none()
    }

    /// [`Options::deep`] when `CUSTOS_CRASH_DEEP=1`, else [`Options::ci`]
    /// with [`CI_SEED`] or `CUSTOS_CRASH_SEED`. Any other value of either
    /// variable is an error (never a silent fallback).
    pub fn from_env() -> Result<Self, String> {
        let deep = match std::env::var(DEEP_ENV) {
            Err(std::env::VarError::NotPresent) => false,
            Ok(v) if v.is_empty() || v == "0" => false,
            Ok(v) if v == "1" => true,
            Ok(v) => return Err(format!("{DEEP_ENV}={v}: expected 1 or 0")),
            Err(e) => return Err(format!("{DEEP_ENV}: {e}")),
        };
        if deep {
            return Ok(Options::deep());
        }
        let seed = match std::env::var(SEED_ENV) {
            Err(std::env::VarError::NotPresent) => CI_SEED,
            Ok(v) => v
                .parse()
                .map_err(|e| format!("{SEED_ENV}={v}: not a u64 ({e})"))?,
            Err(e) => return Err(format!("{SEED_ENV}: {e}")),
        };
        Ok(Options::ci(seed))
    }
}

/// One way an uncovered operation may have reached the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Lost,
    Whole,
    /// File entry without its data.
    Empty,
    /// File entry with the first `n` bytes of its data (a sector multiple).
    Torn(usize),
    /// Rename: destination linked, source not yet unlinked.
    Half,
}

fn parent(p: &Path) -> PathBuf {
    p.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The torn prefix lengths of a write of `len` bytes under `mode`.
fn torn_points(len: usize, mode: TornMode) -> Vec<usize> {
    let TornMode::Sectors { max } = mode else {
        return Vec::new();
    };
    // Boundaries 1..=n (in sectors) lie strictly inside the write.
    let n = len.saturating_sub(1) / SECTOR;
    if n == 0 || max == 0 {
        return Vec::new();
    }
    if n <= max {
        return (1..=n).map(|i| i * SECTOR).collect();
    }
    let mut pick = BTreeSet::from([1]);
    if max >= 2 {
        pick.insert(n);
    }
    if max >= 3 {
        pick.insert(n.div_ceil(2));
    }
    let slots = max.saturating_sub(1).max(1);
    for j in 0..=slots {
        if pick.len() >= max {
            break;
        }
        pick.insert(1 + j * (n - 1) / slots);
    }
    pick.into_iter().map(|i| i * SECTOR).collect()
}

/// The ways operation `i` of `ops` may have reached disk when the prefix is
/// `ops` (only later syncs within it count).
fn variants(ops: &[&Op], i: usize, torn: TornMode) -> Vec<Variant> {
    let later = ops.get(i + 1..).unwrap_or(&[]);
    let dir_synced = |d: &Path| later.iter().any(|o| matches!(o, Op::SyncDir(p) if p == d));
    let file_synced = |f: &Path| later.iter().any(|o| matches!(o, Op::SyncFile(p) if p == f));
    // A created directory or file is also durably linked once a later
    // rename moves it into a directory that is then synced: the synced
    // destination entry names it, whatever became of the source entry.
    let relinked = |p: &Path| {
        later.iter().enumerate().any(|(j, o)| {
            matches!(o, Op::Rename(from, to) if from == p
                && later.get(j + 1..).unwrap_or(&[]).iter().any(
                    |s| matches!(s, Op::SyncDir(d) if *d == parent(to))))
        })
    };
    match ops.get(i).copied() {
        Some(op @ (Op::CreateDir(p) | Op::RemoveDirAll(p) | Op::RemoveFile(p) | Op::Lock(p))) => {
            let relinked = matches!(op, Op::CreateDir(_)) && relinked(p);
            if relinked || dir_synced(&parent(p)) {
                vec![Variant::Whole]
            } else {
                vec![Variant::Lost, Variant::Whole]
            }
        }
        Some(Op::WriteNew(p, data)) => {
            let mut v = Vec::new();
            if !dir_synced(&parent(p)) && !relinked(p) {
                v.push(Variant::Lost);
            }
            v.push(Variant::Whole);
            if !file_synced(p) {
                v.push(Variant::Empty);
                v.extend(torn_points(data.len(), torn).into_iter().map(Variant::Torn));
            }
            v
        }
        Some(Op::Rename(_, to)) => {
            if dir_synced(&parent(to)) {
                vec![Variant::Whole]
            } else {
                vec![Variant::Lost, Variant::Whole, Variant::Half]
            }
        }
        _ => vec![Variant::Whole],
    }
}

fn under<'a>(image: &'a Image, root: &'a Path) -> impl Iterator<Item = PathBuf> + 'a {
    image.keys().filter(move |k| k.starts_with(root)).cloned()
}

/// Applies `op` as `variant`; answers whether it left a torn file.
fn apply(image: &mut Image, op: &Op, variant: Variant) -> bool {
    if variant == Variant::Lost {
        return false;
    }
    match op {
        Op::CreateDir(p) | Op::CreateDirAll(p) if image.contains_key(&parent(p)) => {
            image.insert(p.clone(), Node::Dir);
        }
        Op::WriteNew(p, data) if image.contains_key(&parent(p)) => {
            let (bytes, torn) = match variant {
                Variant::Empty => (Vec::new(), false),
                Variant::Torn(n) => (data.get(..n).unwrap_or(data).to_vec(), true),
                _ => (data.clone(), false),
            };
            image.insert(p.clone(), Node::File(bytes));
            return torn;
        }
        Op::Rename(from, to) => {
            let moved: Vec<PathBuf> = under(image, from).collect();
            for old in moved {
                let Ok(rest) = old.strip_prefix(from) else {
                    continue;
                };
                let node = if variant == Variant::Half {
                    image.get(&old).cloned()
                } else {
                    image.remove(&old)
                };
                if let Some(node) = node {
                    image.insert(to.join(rest), node);
                }
            }
        }
        // Taking the exclusive lock creates an empty lock file if missing.
        Op::Lock(p) if image.contains_key(&parent(p)) && !image.contains_key(p) => {
            image.insert(p.clone(), Node::File(Vec::new()));
        }
        Op::RemoveFile(p) => {
            image.remove(p);
        }
        Op::RemoveDirAll(p) => {
            let gone: Vec<PathBuf> = under(image, p).collect();
            for g in gone {
                image.remove(&g);
            }
        }
        _ => {}
    }
    false
}

/// One crash state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashState {
    /// The number of trace entries issued before the crash
    /// (`trace.len()`: the operation returned).
    pub prefix: usize,
    /// What the disk holds.
    pub image: Image,
    /// How many writes this state applied torn (a sector prefix kept).
    pub torn: usize,
}

/// Which combinations of one prefix are still to come.
#[derive(Debug)]
enum Plan {
    /// Every combination: the next one (`None`: done).
    Odometer(Option<Vec<usize>>),
    /// A sample: combination indices (mixed radix, operation 0 least
    /// significant) and the next to yield.
    Sampled(Vec<u128>, usize),
}

/// The stream of crash states of [`crash_states_with`].
#[derive(Debug)]
pub struct CrashStates<'a> {
    initial: &'a Image,
    trace: &'a [Recorded],
    options: Options,
    /// The prefix being enumerated.
    k: usize,
    ops: Vec<&'a Op>,
    choices: Vec<Vec<Variant>>,
    plan: Option<Plan>,
}

/// SplitMix64: a small, seeded, deterministic generator (no dependency).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl CrashStates<'_> {
    /// Computes prefix `k`'s operations, choices and plan.
    fn prepare(&mut self) {
        let k = self.k;
        self.ops = self
            .trace
            .get(..k)
            .unwrap_or(&[])
            .iter()
            .filter(|r| r.ok)
            .map(|r| &r.op)
            .collect();
        self.choices = (0..self.ops.len())
            .map(|i| variants(&self.ops, i, self.options.torn))
            .collect();
        let total = self.choices.iter().fold(1u128, |t, c| {
            t.saturating_mul(u128::try_from(c.len()).unwrap_or(u128::MAX))
        });
        let plan = match self.options.sample {
            Some((seed, max)) if total > u128::try_from(max).unwrap_or(u128::MAX) => {
                // Always the all-first combination and the all-whole one
                // (the disk as the operations left it), then seeded draws.
                let whole = self.choices.iter().rev().fold(0u128, |idx, c| {
                    let radix = u128::try_from(c.len()).unwrap_or(1);
                    let digit = c.iter().position(|v| *v == Variant::Whole).unwrap_or(0);
                    idx.saturating_mul(radix)
                        .saturating_add(u128::try_from(digit).unwrap_or(0))
                });
                let mut pick = BTreeSet::from([0, whole]);
                let mut state = seed ^ (k as u64).wrapping_mul(0xa076_1d64_78bd_642f);
                let mut tries = 0;
                while pick.len() < max && tries < 8 * max {
                    let r =
                        (u128::from(splitmix(&mut state)) << 64) | u128::from(splitmix(&mut state));
                    pick.insert(r % total);
                    tries += 1;
                }
                Plan::Sampled(pick.into_iter().take(max.max(1)).collect(), 0)
            }
            _ => Plan::Odometer(Some(vec![0; self.ops.len()])),
        };
        self.plan = Some(plan);
    }

    /// The image of one combination.
    fn build(&self, pick: &[usize]) -> CrashState {
        let mut image = self.initial.clone();
        let mut torn = 0;
        for (i, op) in self.ops.iter().enumerate() {
            let v = self
                .choices
                .get(i)
                .and_then(|c| c.get(pick.get(i).copied().unwrap_or(0)))
                .copied()
                .unwrap_or(Variant::Whole);
            if apply(&mut image, op, v) {
                torn += 1;
            }
        }
        CrashState {
            prefix: self.k,
            image,
            torn,
        }
    }

    /// Decodes a mixed-radix combination index.
    fn decode(&self, mut idx: u128) -> Vec<usize> {
        self.choices
            .iter()
            .map(|c| {
                let radix = u128::try_from(c.len().max(1)).unwrap_or(1);
                let digit = usize::try_from(idx % radix).unwrap_or(0);
                idx /= radix;
                digit
            })
            .collect()
    }

    /// The next combination after `pick` (odometer), `None` after the last.
    fn advance(&self, mut pick: Vec<usize>) -> Option<Vec<usize>> {
        let mut i = 0;
        while let Some(slot) = pick.get_mut(i) {
            *slot += 1;
            if *slot < self.choices.get(i).map_or(1, Vec::len) {
                return Some(pick);
            }
            *slot = 0;
            i += 1;
        }
        None
    }
}

impl Iterator for CrashStates<'_> {
    type Item = CrashState;

    fn next(&mut self) -> Option<CrashState> {
        loop {
            if self.k > self.trace.len() {
                return None;
            }
            if self.plan.is_none() {
                self.prepare();
            }
            let pick = match self.plan.take() {
                Some(Plan::Odometer(Some(pick))) => {
                    let state = self.build(&pick);
                    self.plan = Some(Plan::Odometer(self.advance(pick)));
                    return Some(state);
                }
                Some(Plan::Sampled(indices, at)) => match indices.get(at).copied() {
                    Some(idx) => {
                        self.plan = Some(Plan::Sampled(indices, at + 1));
                        self.decode(idx)
                    }
                    None => {
                        self.k += 1;
                        continue;
                    }
                },
                Some(Plan::Odometer(None)) | None => {
                    self.k += 1;
                    continue;
                }
            };
            return Some(self.build(&pick));
        }
    }
}

/// Every crash state of every prefix of `trace`, starting from the durable
/// image `initial`, streamed in prefix order (failed operations are
/// skipped; see the module docs for the rules and `options` for the
/// bounds).
pub fn crash_states_with<'a>(
    initial: &'a Image,
    trace: &'a [Recorded],
    options: &Options,
) -> CrashStates<'a> {
    CrashStates {
        initial,
        trace,
        options: *options,
        k: 0,
        ops: Vec::new(),
        choices: Vec::new(),
        plan: None,
    }
}

/// Every crash state of every prefix of `trace`, starting from the durable
/// image `initial`, collected: [`crash_states_with`] with
/// [`Options::default`] (every combination, torn prefixes bounded by
/// [`DEFAULT_TORN_SECTORS`]), for small traces. Each state is given with
/// its prefix length (`trace.len()` means the operation returned).
pub fn crash_states(initial: &Image, trace: &[Recorded]) -> Vec<(usize, Image)> {
    crash_states_with(initial, trace, &Options::default())
        .map(|s| (s.prefix, s.image))
        .collect()
}

/// The SHA-256 of an image's canonical encoding: per entry in path order,
/// the path's length and bytes, then `D`, or `F`, the length and the
/// SHA-256 of the bytes.
pub fn digest(image: &Image) -> [u8; 32] {
    let mut enc = Vec::with_capacity(image.len() * 80);
    for (path, node) in image {
        let p = path.as_os_str().as_bytes();
        enc.extend_from_slice(&(p.len() as u64).to_le_bytes());
        enc.extend_from_slice(p);
        match node {
            Node::Dir => enc.push(b'D'),
            Node::File(bytes) => {
                enc.push(b'F');
                enc.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                enc.extend_from_slice(&Sha256::of(bytes).0);
            }
        }
    }
    Sha256::of(&enc).0
}

/// Distinct crash images of one protocol, by [`digest`].
#[derive(Debug, Default)]
pub struct Distinct {
    seen: HashSet<[u8; 32]>,
    torn: usize,
}

impl Distinct {
    /// Counts `state`; answers whether its image is new (a new torn image
    /// also counts as torn).
    pub fn insert(&mut self, state: &CrashState) -> bool {
        self.insert_digest(digest(&state.image), state.torn > 0)
    }

    /// Counts an image by its [`digest`].
    pub fn insert_digest(&mut self, digest: [u8; 32], torn: bool) -> bool {
        let new = self.seen.insert(digest);
        if new && torn {
            self.torn += 1;
        }
        new
    }

    /// The number of distinct images.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether no image was counted.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// The number of distinct images first seen with a torn write.
    pub fn torn(&self) -> usize {
        self.torn
    }
}

/// The image of everything under `root` on the real disk: each directory
/// and each regular file with its bytes (`root` included; symbolic links
/// and other kinds are left out). Tests compare two of these to show a
/// command left a directory byte-untouched, and crash tests start from one.
pub fn image_of(root: &Path) -> io::Result<Image> {
    let mut out = Image::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        let meta = std::fs::symlink_metadata(&p)?;
        if meta.is_dir() {
            for e in std::fs::read_dir(&p)? {
                todo.push(e?.path());
            }
            out.insert(p, Node::Dir);
        } else if meta.is_file() {
            let bytes = std::fs::read(&p)?;
            out.insert(p, Node::File(bytes));
        }
    }
    Ok(out)
}

/// Writes the part of `image` under `from` into the directory `to`
/// (created as needed): the inverse of [`image_of`], to reopen a crash
/// state on real files.
pub fn materialize(image: &Image, from: &Path, to: &Path) -> io::Result<()> {
    // Keys are ordered by components: a parent comes before its children.
    for (path, node) in image {
        let path: PathBuf = path.components().collect();
        let Ok(rel) = path.strip_prefix(from) else {
            continue;
        };
        let dest = to.join(rel);
        match node {
            Node::Dir => std::fs::create_dir_all(&dest)?,
            Node::File(bytes) => std::fs::write(&dest, bytes)?,
        }
    }
    Ok(())
}

/// The real filesystem with every fsync made a no-op: for reopening crash
/// states, thousands of them, where what is checked is the recovery logic
/// and not the disk (the states themselves come from recorded, fully
/// synced traces). Everything else is [`RealFs`](crate::RealFs). Never
/// keep data through it: nothing it writes is durable.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoSync;

impl crate::Fs for NoSync {
    fn current_dir(&self) -> io::Result<PathBuf> {
        crate::RealFs.current_dir()
    }
    fn create_dir_all(&self, p: &Path) -> io::Result<()> {
        crate::RealFs.create_dir_all(p)
    }
    fn create_dir(&self, p: &Path) -> io::Result<()> {
        crate::RealFs.create_dir(p)
    }
    fn canonicalize(&self, p: &Path) -> io::Result<PathBuf> {
        crate::RealFs.canonicalize(p)
    }
    fn write_new(&self, p: &Path, d: &[u8]) -> io::Result<()> {
        crate::RealFs.write_new(p, d)
    }
    fn sync_file(&self, _: &Path) -> io::Result<()> {
        Ok(())
    }
    fn sync_dir(&self, _: &Path) -> io::Result<()> {
        Ok(())
    }
    fn rename(&self, f: &Path, t: &Path) -> io::Result<()> {
        crate::RealFs.rename(f, t)
    }
    fn remove_dir_all(&self, p: &Path) -> io::Result<()> {
        crate::RealFs.remove_dir_all(p)
    }
    fn remove_file(&self, p: &Path) -> io::Result<()> {
        crate::RealFs.remove_file(p)
    }
    fn try_lock_shared(&self, p: &Path) -> io::Result<Option<Box<dyn crate::fs::LockGuard>>> {
        crate::RealFs.try_lock_shared(p)
    }
    fn file_id(&self, p: &Path) -> io::Result<Option<crate::fs::FileId>> {
        crate::RealFs.file_id(p)
    }
    fn try_lock_exclusive(&self, p: &Path) -> io::Result<Option<Box<dyn crate::fs::LockGuard>>> {
        crate::RealFs.try_lock_exclusive(p)
    }
    fn metadata(&self, p: &Path) -> io::Result<Option<crate::fs::Meta>> {
        crate::RealFs.metadata(p)
    }
    fn read_dir(&self, p: &Path) -> io::Result<Vec<String>> {
        crate::RealFs.read_dir(p)
    }
    fn read_bounded(&self, p: &Path, limit: u64) -> io::Result<Vec<u8>> {
        crate::RealFs.read_bounded(p, limit)
    }
    fn open_read(&self, p: &Path) -> io::Result<Box<dyn io::Read + Send>> {
        crate::RealFs.open_read(p)
    }
    fn write_new_from(&self, p: &Path, src: &mut dyn io::Read) -> io::Result<u64> {
        crate::RealFs.write_new_from(p, src)
    }
}
