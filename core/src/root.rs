//! Which directory a catalog may adopt: the rule every root custos owns
//! (the release catalog, the deployment catalog, artifact roots) follows
//! before it locks, initializes or cleans anything.
//!
//! A root is **initialized** exactly when it holds its durable mode marker,
//! the regular file [`MARKER_FILE`] whose bytes name the kind of catalog
//! ([`Layout::marker`]). The presence of a directory is never the marker: a
//! marked root whose state directories are missing is corruption, not a new
//! catalog.
//!
//! An unmarked directory is adopted — initialized — only when it is empty,
//! or holds nothing but what an interrupted initialization of this layout
//! leaves behind: the lock file, empty state directories, and the marker's
//! staging file no longer than the marker. Anything else (a user's file, a
//! non-empty `.tmp/`, a catalog of another kind) is refused, and the shell
//! leaves the directory byte-untouched: it has not yet created the lock
//! file.
//!
//! Initialization writes the marker last: state directories, then
//! [`MARKER_PENDING`] (synced), renamed to [`MARKER_FILE`], then the root
//! synced. So a marker implies a whole layout, and a crash before it leaves
//! a root this rule still calls fresh.
//!
//! Three ways to open ([`Access`]): a writing open initializes a fresh root
//! and opens a marked one; a reading open only opens a marked one and never
//! creates anything; an explicit upgrade also adopts an unmarked root made
//! only of this layout's names (a catalog predating the marker), which the
//! shell then verifies in full before writing the marker.

use crate::class::Class;
use thiserror::Error;

/// The durable mode marker directly under a root.
pub const MARKER_FILE: &str = "INITIALIZED";

/// The marker's staging file during initialization.
pub const MARKER_PENDING: &str = ".INITIALIZED.pending";

/// The ownership lock file directly under a root.
pub const LOCK_FILE: &str = ".catalog.lock";

/// The fixed names of one kind of root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The kind, for messages ("release catalog").
    pub kind: &'static str,
    /// The exact bytes of [`MARKER_FILE`] for this kind.
    pub marker: &'static [u8],
    /// The state directories initialization creates, directly under the
    /// root. Empty in an interrupted initialization.
    pub dirs: &'static [&'static str],
    /// The scratch directory among [`Layout::dirs`], if any, which a
    /// writing open of an initialized root clears (its content is abandoned
    /// stages).
    pub staging: Option<&'static str>,
    /// State files directly under the root that the **caller** writes
    /// durably after an [`OpenPlan::Initialize`] and before the marker
    /// (the deployment catalog's `catalog.json`). A marked root lacks one
    /// only through corruption. An unmarked root holding them next to the
    /// lock file is an interrupted initialization ([`Standing::Interrupted`]);
    /// without the lock file, they may be anyone's ([`Standing::Unmarked`]).
    pub files: &'static [&'static str],
    /// Scratch files directly under the root (a pending record being
    /// staged): a writing open removes them under the lock. Tolerated only
    /// beside the lock file, which custos creates before any of them.
    pub scratch: &'static [&'static str],
    /// Files directly under the root that the caller writes when it first
    /// has something to record (the release catalog's lifecycle head):
    /// never required, and in an unmarked root a sign that the root was
    /// this kind's — an interrupted initialization beside the lock file
    /// ([`Standing::Interrupted`]), otherwise [`Standing::Unmarked`].
    pub signs: &'static [&'static str],
}

/// What a directory entry directly under a root is, as the shell saw it
/// (`lstat`: a symbolic link is [`Seen::Other`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// A regular file of this length.
    File {
        /// Its length in bytes.
        len: u64,
    },
    /// A directory, and whether it is empty.
    Dir {
        /// `true` when it has no entries.
        empty: bool,
    },
    /// A symbolic link, a device, a socket, a fifo.
    Other,
}

/// One entry directly under a root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listed<'a> {
    /// Its name.
    pub name: &'a str,
    /// What it is.
    pub seen: Seen,
}

/// How the caller means to use the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Publish, apply — a command that adds content: may create and
    /// initialize a fresh root, clears the staging directory of a marked
    /// one, takes the exclusive lock.
    Write,
    /// Revoke, retire, delete — a command that changes what exists but
    /// adds nothing: like [`Access::Write`] on an initialized root, but a
    /// missing, empty or unmarked root is refused and nothing is created
    /// (a mistyped path never becomes a catalog).
    Modify,
    /// List, show, verify: opens only a marked root, with a shared lock,
    /// and creates, cleans or syncs nothing.
    Read,
    /// An explicit operator upgrade: adopts an unmarked root made only of
    /// this layout's names, to be verified and then marked; opens a marked
    /// one like [`Access::Modify`]. Adds nothing, so a missing or empty
    /// root is refused, never created.
    Upgrade,
}

impl Access {
    /// Whether this access writes.
    pub fn writes(self) -> bool {
        !matches!(self, Access::Read)
    }
}

/// What a root is, from its listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// The marker is present (its bytes are checked by [`check_marker`]).
    Marked,
    /// Empty, or only what an interrupted initialization leaves.
    Fresh,
    /// Unmarked, holding the lock file and this layout's state files (and
    /// nothing foreign): an initialization interrupted after its state was
    /// written and before the marker. A writing open verifies the state
    /// and completes the marker ([`OpenPlan::Upgrade`]).
    Interrupted,
    /// Unmarked, holding only this layout's names, some not in their
    /// initial state: a catalog predating the marker, or a damaged one.
    Unmarked {
        /// Whether the staging directory is empty or absent (an upgrade
        /// clears it, so it must hold nothing of anyone's).
        staging_empty: bool,
    },
    /// Holds an entry this layout does not own, or owns in another shape.
    Foreign(RootRefusal),
}

/// What the shell does after the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpenPlan {
    /// Open the initialized root.
    Open,
    /// Initialize the fresh root (state directories, then the marker; for
    /// a layout with [`Layout::files`], the caller writes them and then
    /// the marker).
    Initialize,
    /// Verify the unmarked root in full, bootstrap its state, then write
    /// the marker.
    Upgrade,
}

/// Why a root is refused. Every refusal leaves the directory as it was.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RootRefusal {
    /// The path is not a directory.
    #[error("NotADirectory: the {kind} root is not a directory")]
    NotADirectory {
        /// The layout's kind.
        kind: &'static str,
    },
    /// The root does not exist (only an open that adds content creates one).
    #[error("NotFound: no {kind} here (the directory does not exist)")]
    Missing {
        /// The layout's kind.
        kind: &'static str,
    },
    /// The root has no marker and nothing of a catalog (an open that adds
    /// nothing).
    #[error("NotFound: no {kind} here (the directory holds no {marker} marker)")]
    NotInitialized {
        /// The layout's kind.
        kind: &'static str,
        /// [`MARKER_FILE`].
        marker: &'static str,
    },
    /// An entry the layout does not own: the directory is not this
    /// catalog, and custos does not adopt it.
    #[error(
        "NotACatalog: this directory is not a {kind}: it has no {marker} marker and holds \
         {name:?}, which a {kind} does not own ({why}); custos initializes only a \
         nonexistent or empty directory and left this one untouched"
    )]
    ForeignEntry {
        /// The layout's kind.
        kind: &'static str,
        /// [`MARKER_FILE`].
        marker: &'static str,
        /// The entry's name, escaped for printing.
        name: String,
        /// How it differs from what the layout owns.
        why: &'static str,
    },
    /// Unmarked but made of this layout's names: only an explicit upgrade
    /// adopts it.
    #[error(
        "NotACatalog: this directory has a {kind}'s entries but no {marker} marker: either a \
         {kind} written before the marker existed (upgrade it explicitly, after stopping \
         every process that uses it) or the remains of a damaged one; custos left it untouched"
    )]
    Unmarked {
        /// The layout's kind.
        kind: &'static str,
        /// [`MARKER_FILE`].
        marker: &'static str,
    },
    /// An upgrade would clear a staging directory that holds something:
    /// custos does not delete what it cannot tell is its own.
    #[error(
        "NotACatalog: {staging}/ of this unmarked {kind} is not empty; custos deletes nothing \
         it cannot tell is its own: inspect it, move its content away, and upgrade again"
    )]
    StagingNotEmpty {
        /// The layout's kind.
        kind: &'static str,
        /// The staging directory.
        staging: String,
    },
    /// The marker is exactly another kind's: the directory is a root of
    /// that kind, named where this kind's is wanted (two catalogs' paths
    /// swapped, say). Nothing is wrong with it, and nothing was changed.
    #[error("NotThisKind: this directory is a {other}, not a {kind} (its {marker} marker says so); name the {kind}'s own directory (nothing was changed)")]
    OtherKind {
        /// The layout's kind.
        kind: &'static str,
        /// [`MARKER_FILE`].
        marker: &'static str,
        /// The kind the marker names.
        other: &'static str,
    },
    /// The marker is not a regular file, or its bytes are no kind's.
    #[error("CorruptArtifact: the {marker} marker of this {kind} is {why}; preserve the directory and restore it from a backup")]
    BadMarker {
        /// The layout's kind.
        kind: &'static str,
        /// [`MARKER_FILE`].
        marker: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// A marked root lacks one of its state directories or files.
    #[error("CorruptArtifact: this {kind} is initialized ({marker} is present) but its {dir} {why}; custos does not re-create lost state: preserve the directory and restore it from a backup")]
    MissingState {
        /// The layout's kind.
        kind: &'static str,
        /// [`MARKER_FILE`].
        marker: &'static str,
        /// The missing entry, as shown (a directory with a trailing `/`).
        dir: String,
        /// What is wrong: missing, or of the wrong kind.
        why: &'static str,
    },
}

impl RootRefusal {
    /// The error class: `NotFound`, `InvalidArgument` (a directory custos
    /// will not adopt) or `CorruptArtifact`.
    pub fn class(&self) -> Class {
        match self {
            RootRefusal::Missing { .. } | RootRefusal::NotInitialized { .. } => Class::NotFound,
            RootRefusal::NotADirectory { .. }
            | RootRefusal::ForeignEntry { .. }
            | RootRefusal::Unmarked { .. }
            | RootRefusal::StagingNotEmpty { .. }
            | RootRefusal::OtherKind { .. } => Class::InvalidArgument,
            RootRefusal::BadMarker { .. } | RootRefusal::MissingState { .. } => {
                Class::CorruptArtifact
            }
        }
    }
}

/// A name made safe to print: control characters and quotes escaped.
pub fn printable(name: &str) -> String {
    name.escape_debug().to_string()
}

fn foreign(layout: &Layout, name: &str, why: &'static str) -> Standing {
    Standing::Foreign(RootRefusal::ForeignEntry {
        kind: layout.kind,
        marker: MARKER_FILE,
        name: printable(name),
        why,
    })
}

/// Classifies a root from its listing (every entry directly under it).
pub fn classify(layout: &Layout, entries: &[Listed<'_>]) -> Standing {
    if entries.iter().any(|e| e.name == MARKER_FILE) {
        return Standing::Marked;
    }
    let locked = entries
        .iter()
        .any(|e| e.name == LOCK_FILE && e.seen == Seen::File { len: 0 });
    let mut fresh = true;
    let mut staging_empty = true;
    let mut state_files = false;
    for e in entries {
        let owned_dir = layout.dirs.contains(&e.name);
        match (e.name, e.seen) {
            (LOCK_FILE, Seen::File { len: 0 }) => {}
            (LOCK_FILE, Seen::File { .. }) => fresh = false,
            (MARKER_PENDING, Seen::File { len })
                if len <= u64::try_from(layout.marker.len()).unwrap_or(u64::MAX) => {}
            (MARKER_PENDING, Seen::File { .. }) => {
                return foreign(layout, e.name, "a marker staging file longer than a marker")
            }
            (LOCK_FILE | MARKER_PENDING, _) => {
                return foreign(layout, e.name, "not a regular file")
            }
            (name, Seen::File { .. }) if layout.scratch.contains(&name) => {
                if !locked {
                    return foreign(layout, e.name, "a scratch file without the lock file");
                }
            }
            (name, Seen::File { .. })
                if layout.files.contains(&name) || layout.signs.contains(&name) =>
            {
                fresh = false;
                state_files = true;
            }
            (name, _)
                if layout.scratch.contains(&name)
                    || layout.files.contains(&name)
                    || layout.signs.contains(&name) =>
            {
                return foreign(layout, e.name, "not a regular file")
            }
            (_, Seen::Dir { empty }) if owned_dir => {
                fresh &= empty;
                if Some(e.name) == layout.staging {
                    staging_empty = empty;
                }
            }
            (_, _) if owned_dir => return foreign(layout, e.name, "not a directory"),
            _ => return foreign(layout, e.name, "not one of its entries"),
        }
    }
    if fresh {
        Standing::Fresh
    } else if state_files && locked {
        Standing::Interrupted
    } else {
        Standing::Unmarked { staging_empty }
    }
}

/// The decision: what an open with `access` does with a root of
/// `standing`. A root that does not exist is [`Standing::Fresh`] for a
/// writing open (the shell creates it) and refused by
/// [`decide_missing`] for a reading one.
pub fn decide(
    layout: &Layout,
    standing: &Standing,
    access: Access,
) -> Result<OpenPlan, RootRefusal> {
    match (standing, access) {
        (Standing::Foreign(r), _) => Err(r.clone()),
        (Standing::Marked, _) => Ok(OpenPlan::Open),
        (Standing::Fresh, Access::Write) => Ok(OpenPlan::Initialize),
        (Standing::Interrupted, Access::Write | Access::Modify | Access::Upgrade) => {
            Ok(OpenPlan::Upgrade)
        }
        (Standing::Interrupted, Access::Read) => Err(RootRefusal::NotInitialized {
            kind: layout.kind,
            marker: MARKER_FILE,
        }),
        (
            Standing::Unmarked {
                staging_empty: true,
            },
            Access::Upgrade,
        ) => Ok(OpenPlan::Upgrade),
        (
            Standing::Unmarked {
                staging_empty: false,
            },
            Access::Upgrade,
        ) => Err(RootRefusal::StagingNotEmpty {
            kind: layout.kind,
            staging: layout.staging.unwrap_or_default().to_owned(),
        }),
        (Standing::Fresh, Access::Read | Access::Modify | Access::Upgrade) => {
            Err(RootRefusal::NotInitialized {
                kind: layout.kind,
                marker: MARKER_FILE,
            })
        }
        (Standing::Unmarked { .. }, Access::Write | Access::Modify | Access::Read) => {
            Err(RootRefusal::Unmarked {
                kind: layout.kind,
                marker: MARKER_FILE,
            })
        }
    }
}

/// A root path that does not exist: an open that adds content
/// ([`Access::Write`]) creates it (and then initializes it); every other
/// open is refused, and nothing is created.
pub fn decide_missing(layout: &Layout, access: Access) -> Result<OpenPlan, RootRefusal> {
    if access == Access::Write {
        Ok(OpenPlan::Initialize)
    } else {
        Err(RootRefusal::Missing { kind: layout.kind })
    }
}

/// Checks the marker's bytes (read with a bound of the longest marker of
/// `layout` and `others`) against the layout. Bytes that are exactly
/// another layout's marker are [`RootRefusal::OtherKind`]: a root of that
/// kind named in this one's place.
pub fn check_marker(
    layout: &Layout,
    others: &[&Layout],
    seen: Seen,
    bytes: &[u8],
) -> Result<(), RootRefusal> {
    let bad = |why: String| RootRefusal::BadMarker {
        kind: layout.kind,
        marker: MARKER_FILE,
        why,
    };
    if !matches!(seen, Seen::File { .. }) {
        return Err(bad("not a regular file".into()));
    }
    if bytes == layout.marker {
        return Ok(());
    }
    if let Some(other) = others.iter().find(|o| o.marker == bytes) {
        return Err(RootRefusal::OtherKind {
            kind: layout.kind,
            marker: MARKER_FILE,
            other: other.kind,
        });
    }
    let shown: String = String::from_utf8_lossy(bytes.get(..64).unwrap_or(bytes)).into_owned();
    Err(bad(format!(
        "not this kind's marker (it reads {:?}; a {} reads {:?})",
        printable(shown.trim_end()),
        layout.kind,
        printable(String::from_utf8_lossy(layout.marker).trim_end())
    )))
}

/// Checks that every state directory and state file of a marked root is
/// present. `seen(name)` is what the shell found at that name (`None`:
/// nothing). The staging directory may be missing (it is scratch; a
/// writing open re-creates it).
pub fn check_state(
    layout: &Layout,
    seen: impl Fn(&str) -> Option<Seen>,
) -> Result<(), RootRefusal> {
    let missing = |dir: String, why| RootRefusal::MissingState {
        kind: layout.kind,
        marker: MARKER_FILE,
        dir,
        why,
    };
    for &dir in layout.dirs {
        let why = match seen(dir) {
            Some(Seen::Dir { .. }) => continue,
            None if Some(dir) == layout.staging => continue,
            None => "is missing",
            Some(_) => "is not a directory",
        };
        return Err(missing(format!("{dir}/"), why));
    }
    for &file in layout.files {
        let why = match seen(file) {
            Some(Seen::File { .. }) => continue,
            None => "is missing",
            Some(_) => "is not a regular file",
        };
        return Err(missing(file.to_owned(), why));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Layout = Layout {
        kind: "test catalog",
        marker: b"custos test catalog 1\n",
        dirs: &[".tmp", "releases", "lifecycle"],
        staging: Some(".tmp"),
        files: &[],
        scratch: &[],
        signs: &[],
    };

    fn f(name: &str, len: u64) -> Listed<'_> {
        Listed {
            name,
            seen: Seen::File { len },
        }
    }
    fn d(name: &str, empty: bool) -> Listed<'_> {
        Listed {
            name,
            seen: Seen::Dir { empty },
        }
    }

    #[test]
    fn empty_and_interrupted_initializations_are_fresh() {
        assert_eq!(classify(&L, &[]), Standing::Fresh);
        let partial = [
            f(LOCK_FILE, 0),
            d(".tmp", true),
            d("releases", true),
            f(MARKER_PENDING, 3),
        ];
        assert_eq!(classify(&L, &partial), Standing::Fresh);
        assert_eq!(
            decide(&L, &Standing::Fresh, Access::Write),
            Ok(OpenPlan::Initialize)
        );
        assert!(decide(&L, &Standing::Fresh, Access::Read).is_err());
    }

    /// Only an open that adds content creates or initializes a root: a
    /// missing or empty root is refused for every other access, and an
    /// initialized one opens for all of them.
    #[test]
    fn only_adding_content_creates_or_initializes_a_root() {
        for access in [Access::Read, Access::Modify, Access::Upgrade] {
            assert_eq!(
                decide_missing(&L, access),
                Err(RootRefusal::Missing { kind: L.kind }),
                "{access:?}"
            );
            let e = decide(&L, &Standing::Fresh, access).unwrap_err();
            assert_eq!(e.class(), Class::NotFound, "{access:?}");
            assert_eq!(decide(&L, &Standing::Marked, access), Ok(OpenPlan::Open));
        }
        assert_eq!(decide_missing(&L, Access::Write), Ok(OpenPlan::Initialize));
        assert!(Access::Modify.writes() && Access::Upgrade.writes() && !Access::Read.writes());
        assert_eq!(
            decide(&L, &Standing::Interrupted, Access::Modify),
            Ok(OpenPlan::Upgrade)
        );
        let unmarked = Standing::Unmarked {
            staging_empty: true,
        };
        assert_eq!(
            decide(&L, &unmarked, Access::Modify).unwrap_err().class(),
            Class::InvalidArgument
        );
        assert_eq!(
            decide(&L, &unmarked, Access::Upgrade),
            Ok(OpenPlan::Upgrade)
        );
    }

    #[test]
    fn a_user_file_anywhere_makes_the_root_foreign() {
        // The example of the issue: releases/ and a user's .tmp/cache/….
        let listing = [d("releases", true), d(".tmp", false)];
        let s = classify(&L, &listing);
        assert_eq!(
            s,
            Standing::Unmarked {
                staging_empty: false
            }
        );
        for access in [Access::Write, Access::Read] {
            assert!(matches!(
                decide(&L, &s, access),
                Err(RootRefusal::Unmarked { .. })
            ));
        }
        // Not even an explicit upgrade clears a .tmp it did not fill.
        assert!(matches!(
            decide(&L, &s, Access::Upgrade),
            Err(RootRefusal::StagingNotEmpty { .. })
        ));
        for listing in [
            vec![f("notes.txt", 1)],
            vec![d("releases", true), f("releases.bak", 0)],
            vec![f("releases", 0)],
            vec![d(LOCK_FILE, true)],
            vec![f(MARKER_PENDING, 4096)],
            vec![Listed {
                name: "lifecycle",
                seen: Seen::Other,
            }],
        ] {
            let s = classify(&L, &listing);
            assert!(matches!(s, Standing::Foreign(_)), "{listing:?}: {s:?}");
            assert!(decide(&L, &s, Access::Upgrade).is_err());
        }
    }

    #[test]
    fn the_marker_decides_not_the_directories() {
        let s = classify(&L, &[f(MARKER_FILE, 22)]);
        assert_eq!(s, Standing::Marked);
        assert_eq!(decide(&L, &s, Access::Read), Ok(OpenPlan::Open));
        let lost = check_state(&L, |n| {
            (n == "releases").then_some(Seen::Dir { empty: false })
        });
        assert!(matches!(
            lost,
            Err(RootRefusal::MissingState { dir, .. }) if dir == "lifecycle/"
        ));
        let ok = check_state(&L, |n| (n != ".tmp").then_some(Seen::Dir { empty: true }));
        assert_eq!(ok, Ok(()));
        assert!(check_marker(&L, &[], Seen::File { len: 22 }, L.marker).is_ok());
        assert!(check_marker(&L, &[], Seen::File { len: 5 }, b"other").is_err());
        assert!(check_marker(&L, &[], Seen::Dir { empty: true }, L.marker).is_err());
        // Another kind's marker names that kind, as invalid input (not
        // corruption); unknown bytes stay corruption.
        const OTHER: Layout = Layout {
            kind: "other catalog",
            marker: b"custos other catalog 1\n",
            ..L
        };
        let e = check_marker(&L, &[&OTHER], Seen::File { len: 23 }, OTHER.marker).unwrap_err();
        assert!(
            matches!(
                e,
                RootRefusal::OtherKind {
                    other: "other catalog",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(e.class(), Class::InvalidArgument);
        let e = check_marker(&L, &[&OTHER], Seen::File { len: 5 }, b"other").unwrap_err();
        assert_eq!(e.class(), Class::CorruptArtifact);
    }

    #[test]
    fn only_an_upgrade_adopts_an_unmarked_catalog() {
        let old = [d("releases", false), f(LOCK_FILE, 0)];
        let s = classify(&L, &old);
        assert_eq!(
            s,
            Standing::Unmarked {
                staging_empty: true
            }
        );
        assert_eq!(decide(&L, &s, Access::Upgrade), Ok(OpenPlan::Upgrade));
        assert!(decide(&L, &s, Access::Write).is_err());
    }

    #[test]
    fn printed_names_cannot_forge_lines() {
        assert_eq!(printable("a\nb\u{1b}[2J"), "a\\nb\\u{1b}[2J");
    }

    const D: Layout = Layout {
        kind: "file catalog",
        marker: b"custos file catalog 1\n",
        dirs: &[],
        staging: None,
        files: &["catalog.json"],
        scratch: &[".catalog.pending"],
        signs: &[],
    };

    #[test]
    fn state_files_scratch_and_the_interrupted_initialization() {
        assert_eq!(classify(&D, &[]), Standing::Fresh);
        // The first record being staged beside the lock: still fresh.
        let staging = [f(LOCK_FILE, 0), f(".catalog.pending", 900)];
        assert_eq!(classify(&D, &staging), Standing::Fresh);
        // Scratch without the lock could be anyone's.
        assert!(matches!(
            classify(&D, &[f(".catalog.pending", 1)]),
            Standing::Foreign(_)
        ));
        // State written, marker not yet: a writing open completes it.
        let interrupted = [
            f(LOCK_FILE, 0),
            f("catalog.json", 900),
            f(MARKER_PENDING, 2),
        ];
        assert_eq!(classify(&D, &interrupted), Standing::Interrupted);
        assert_eq!(
            decide(&D, &Standing::Interrupted, Access::Write),
            Ok(OpenPlan::Upgrade)
        );
        assert!(decide(&D, &Standing::Interrupted, Access::Read).is_err());
        // A user's catalog.json without our lock file is not adopted.
        let user = [f("catalog.json", 10)];
        assert_eq!(
            classify(&D, &user),
            Standing::Unmarked {
                staging_empty: true
            }
        );
        assert!(decide(&D, &classify(&D, &user), Access::Write).is_err());
        assert!(matches!(
            classify(&D, &[d("catalog.json", true)]),
            Standing::Foreign(_)
        ));
        // A marked root without its state file is corruption.
        assert!(matches!(
            check_state(&D, |_| None),
            Err(RootRefusal::MissingState { dir, .. }) if dir == "catalog.json"
        ));
        assert_eq!(check_state(&D, |_| Some(Seen::File { len: 1 })), Ok(()));
    }
}
