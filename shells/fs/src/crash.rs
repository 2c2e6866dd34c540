//! Crash states from a recorded trace (the ALICE method as a unit test).
//!
//! [`crash_states`] replays every prefix of a [`RecordingFs`](crate::RecordingFs)
//! trace into an in-memory [`Image`] of the files that could be on disk after
//! a power loss at that point. An operation not yet covered by a later fsync
//! in the prefix may be lost where POSIX allows: an unsynced directory entry
//! may vanish (unless a later rename moved it into a directory that was then
//! synced), unsynced file data may be empty, and an unsynced rename may be
//! absent, complete, or half-done (destination present, source still there).
//! Every combination of those choices is one crash state.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::fs::{Op, Recorded};

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

/// One way an uncovered operation may have reached the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Lost,
    Whole,
    /// File entry without its data.
    Empty,
    /// Rename: destination linked, source not yet unlinked.
    Half,
}

fn parent(p: &Path) -> PathBuf {
    p.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The ways operation `i` of `ops` may have reached disk when the prefix is
/// `ops` (only later syncs within it count).
fn variants(ops: &[Op], i: usize) -> Vec<Variant> {
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
    match ops.get(i) {
        Some(Op::CreateDir(p)) | Some(Op::RemoveDirAll(p)) | Some(Op::RemoveFile(p)) => {
            let relinked = matches!(ops.get(i), Some(Op::CreateDir(_))) && relinked(p);
            if relinked || dir_synced(&parent(p)) {
                vec![Variant::Whole]
            } else {
                vec![Variant::Lost, Variant::Whole]
            }
        }
        Some(Op::WriteNew(p, _)) => {
            let mut v = Vec::new();
            if !dir_synced(&parent(p)) && !relinked(p) {
                v.push(Variant::Lost);
            }
            v.push(Variant::Whole);
            if !file_synced(p) {
                v.push(Variant::Empty);
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

fn apply(image: &mut Image, op: &Op, variant: Variant) {
    if variant == Variant::Lost {
        return;
    }
    match op {
        Op::CreateDir(p) | Op::CreateDirAll(p) if image.contains_key(&parent(p)) => {
            image.insert(p.clone(), Node::Dir);
        }
        Op::WriteNew(p, data) if image.contains_key(&parent(p)) => {
            let bytes = if variant == Variant::Empty {
                Vec::new()
            } else {
                data.clone()
            };
            image.insert(p.clone(), Node::File(bytes));
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
}

/// Every crash state of every prefix of `trace`, starting from the durable
/// image `initial`. Each state is given with its prefix length (the number
/// of trace entries issued before the crash; `trace.len()` means the
/// operation returned). Failed operations are skipped.
pub fn crash_states(initial: &Image, trace: &[Recorded]) -> Vec<(usize, Image)> {
    let mut out = Vec::new();
    for k in 0..=trace.len() {
        let ops: Vec<Op> = trace
            .get(..k)
            .unwrap_or(&[])
            .iter()
            .filter(|r| r.ok)
            .map(|r| r.op.clone())
            .collect();
        let choices: Vec<Vec<Variant>> = (0..ops.len()).map(|i| variants(&ops, i)).collect();
        let mut pick = vec![0usize; ops.len()];
        loop {
            let mut image = initial.clone();
            for (i, op) in ops.iter().enumerate() {
                let v = choices
                    .get(i)
                    .and_then(|c| c.get(pick.get(i).copied().unwrap_or(0)))
                    .copied()
                    .unwrap_or(Variant::Whole);
                apply(&mut image, op, v);
            }
            out.push((k, image));
            // Next combination (odometer); stop after the last.
            let mut i = 0;
            while let Some(slot) = pick.get_mut(i) {
                *slot += 1;
                if *slot < choices.get(i).map_or(1, Vec::len) {
                    break;
                }
                *slot = 0;
                i += 1;
            }
            if i >= pick.len() {
                break;
            }
        }
    }
    out
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
