//! The catalogue over a backend's rows: what each read and each write
//! loads, written once.
//!
//! A backend that keeps the catalogue in rows implements
//! [`CatalogueRows`]: the head (revision and recent-folder sequence) and
//! the row sets a [`Load`] names, put into a partial [`CatalogueState`]
//! through its `put_stored_*` checks. Everything else is here: which row
//! sets a read needs ([`reads`]) and a write's footprint
//! ([`Footprint::loads`]), in which order, and the answer, which the
//! partial state gives exactly as the whole one would. A backend writes
//! one statement per [`Load`] and applies the decision's
//! [`Effect`](super::Effect)s; it holds no rule of its own.

use super::{
    Catalogue, CatalogueError, CatalogueState, Custody, Delegate, Deletion, Footprint, Move,
    Outcome, Page, Recent, Registration, Request, Visibility, LISTING_LIMIT,
};

/// Which sessions a [`Load::Sessions`] reads (each with every side row).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sessions<'a> {
    /// The session with this id.
    Id(&'a str),
    /// The session created under this request key.
    CreationKey(&'a str),
    /// One page of a listing: archived or not, ids after `after` in id
    /// order, at most `fetch` rows (one more than the page, so the state
    /// can tell whether another follows).
    Page {
        /// Archived sessions, or the others.
        archived: bool,
        /// Only ids greater than this one.
        after: Option<&'a str>,
        /// The most rows to read.
        fetch: u64,
    },
    /// Every session whose move is in progress.
    Moving,
    /// Every session marked for deletion.
    Deleting,
}

/// Which workspace defaults a [`Load::Defaults`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Defaults<'a> {
    /// The default of this workspace.
    Workspace(&'a str),
    /// Every default naming this session.
    Naming(&'a str),
}

/// Which delegate rows a [`Load::Delegates`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Delegates<'a> {
    /// The row of a spawner and parent session.
    Pair(&'a str, &'a str),
    /// Every row of a spawner.
    Spawner(&'a str),
    /// The row naming this session.
    Session(&'a str),
}

/// One set of rows a backend loads into a partial state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Load<'a> {
    /// Session rows.
    Sessions(Sessions<'a>),
    /// Workspace-default rows.
    Defaults(Defaults<'a>),
    /// Every recent folder.
    Recent,
    /// Every remembered deletion.
    Deleted,
    /// Delegate rows.
    Delegates(Delegates<'a>),
}

impl Footprint {
    /// The row sets of this footprint, in the order a backend loads them
    /// (after the head, which every write reads first).
    pub fn loads(&self) -> Vec<Load<'_>> {
        let mut out: Vec<Load<'_>> = Vec::new();
        out.extend(
            self.sessions
                .iter()
                .map(|id| Load::Sessions(Sessions::Id(id))),
        );
        if let Some(k) = &self.creation_key {
            out.push(Load::Sessions(Sessions::CreationKey(k)));
        }
        out.extend(
            self.defaults
                .iter()
                .map(|ws| Load::Defaults(Defaults::Workspace(ws))),
        );
        if let Some(id) = &self.defaults_naming {
            out.push(Load::Defaults(Defaults::Naming(id)));
        }
        if self.recent {
            out.push(Load::Recent);
        }
        if self.deleted {
            out.push(Load::Deleted);
        }
        if let Some((sp, pa)) = &self.delegate_pair {
            out.push(Load::Delegates(Delegates::Pair(sp, pa)));
        }
        if let Some(sp) = &self.delegates_of_spawner {
            out.push(Load::Delegates(Delegates::Spawner(sp)));
        }
        if let Some(id) = &self.delegate_of {
            out.push(Load::Delegates(Delegates::Session(id)));
        }
        out
    }
}

/// A backend's catalogue rows, read inside one transaction (a read's
/// snapshot, or a write's after its head lock).
pub trait CatalogueRows {
    /// The backend's error; a refusal of core's is one of them.
    type Error: From<CatalogueError>;

    /// Puts the head row (revision and recent-folder sequence) into `s`.
    fn head(&mut self, s: &mut CatalogueState) -> Result<(), Self::Error>;

    /// Puts the rows `load` names into `s`, each through the state's
    /// `put_stored_*` checks.
    fn load(&mut self, load: Load<'_>, s: &mut CatalogueState) -> Result<(), Self::Error>;
}

/// The partial state a write decides on: the head, then every row set of
/// `fp` ([`Footprint::loads`]).
pub fn load_footprint<R: CatalogueRows + ?Sized>(
    rows: &mut R,
    fp: &Footprint,
) -> Result<CatalogueState, R::Error> {
    let mut s = CatalogueState::default();
    rows.head(&mut s)?;
    for load in fp.loads() {
        rows.load(load, &mut s)?;
    }
    Ok(s)
}

/// A read over the catalogue rows of one transaction
/// ([`RowsCatalogue::read_rows`]).
pub type RowsRead<'f, T, E> = dyn FnMut(&mut dyn CatalogueRows<Error = E>) -> Result<T, E> + 'f;

/// A catalogue kept in a backend's rows. Implement this, and
/// [`Catalogue`] follows: every read is the [`reads`] function of the
/// same name over the rows of one read transaction, and a write is the
/// backend's own transaction (its head lock, [`load_footprint`],
/// [`decide`](super::decide), its effects applied in order).
pub trait RowsCatalogue {
    /// The error of the backend's rows; the read's end maps it to a
    /// [`CatalogueError`].
    type RowsError: From<CatalogueError>;

    /// Decides and persists one write request atomically
    /// ([`Catalogue::apply`]).
    fn write(&self, req: &Request) -> Result<Outcome, CatalogueError>;

    /// Runs `f` over the rows of one read transaction. A backend that
    /// retries a busy read may call `f` again; `f` writes nothing.
    fn read_rows<T>(&self, f: &mut RowsRead<'_, T, Self::RowsError>) -> Result<T, CatalogueError>;
}

impl<B: RowsCatalogue> Catalogue for B {
    fn apply(&self, req: &Request) -> Result<Outcome, CatalogueError> {
        self.write(req)
    }

    fn get(&self, session_id: &str) -> Result<Option<Registration>, CatalogueError> {
        self.read_rows(&mut |r| reads::get(r, session_id))
    }

    fn by_request_key(&self, key: &str) -> Result<Option<Registration>, CatalogueError> {
        self.read_rows(&mut |r| reads::by_request_key(r, key))
    }

    fn page(
        &self,
        visibility: Visibility,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, CatalogueError> {
        self.read_rows(&mut |r| reads::page(r, visibility, after, limit))
    }

    fn workspace_default(&self, workspace: &str) -> Result<Option<String>, CatalogueError> {
        self.read_rows(&mut |r| reads::workspace_default(r, workspace))
    }

    fn recent_folders(&self) -> Result<Vec<Recent>, CatalogueError> {
        self.read_rows(&mut |r| reads::recent_folders(r))
    }

    fn custody(&self, session_id: &str) -> Result<Custody, CatalogueError> {
        self.read_rows(&mut |r| reads::custody(r, session_id))
    }

    fn moving(&self) -> Result<Vec<Move>, CatalogueError> {
        self.read_rows(&mut |r| reads::moving(r))
    }

    fn deletion(&self, session_id: &str) -> Result<Deletion, CatalogueError> {
        self.read_rows(&mut |r| reads::deletion(r, session_id))
    }

    fn deleting(&self) -> Result<Vec<String>, CatalogueError> {
        self.read_rows(&mut |r| reads::deleting(r))
    }

    fn delegate_for(
        &self,
        spawner: &str,
        parent_session: &str,
    ) -> Result<Option<Delegate>, CatalogueError> {
        // A malformed pair is refused before a read is opened.
        reads::check_delegate_pair(spawner, parent_session)?;
        self.read_rows(&mut |r| reads::delegate_for(r, spawner, parent_session))
    }

    fn delegate_of(&self, session_id: &str) -> Result<Option<Delegate>, CatalogueError> {
        self.read_rows(&mut |r| reads::delegate_of(r, session_id))
    }

    fn delegates_held(&self, spawner: &str) -> Result<u32, CatalogueError> {
        self.read_rows(&mut |r| reads::delegates_held(r, spawner))
    }

    fn revision(&self) -> Result<u64, CatalogueError> {
        self.read_rows(&mut |r| reads::revision(r))
    }
}

/// The catalogue's reads over a backend's rows: each loads the row sets
/// it needs into an empty state and answers from it, as
/// [`CatalogueState`]'s method of the same name answers from the whole.
pub mod reads {
    use super::*;

    fn with<R: CatalogueRows + ?Sized>(
        rows: &mut R,
        loads: &[Load<'_>],
    ) -> Result<CatalogueState, R::Error> {
        let mut s = CatalogueState::default();
        for l in loads {
            rows.load(*l, &mut s)?;
        }
        Ok(s)
    }

    fn session<R: CatalogueRows + ?Sized>(
        rows: &mut R,
        id: &str,
    ) -> Result<CatalogueState, R::Error> {
        with(rows, &[Load::Sessions(Sessions::Id(id))])
    }

    /// [`CatalogueState::get`].
    pub fn get<R: CatalogueRows + ?Sized>(
        rows: &mut R,
        id: &str,
    ) -> Result<Option<Registration>, R::Error> {
        Ok(session(rows, id)?.get(id))
    }

    /// [`CatalogueState::by_request_key`].
    pub fn by_request_key<R: CatalogueRows + ?Sized>(
        rows: &mut R,
        key: &str,
    ) -> Result<Option<Registration>, R::Error> {
        let s = with(rows, &[Load::Sessions(Sessions::CreationKey(key))])?;
        Ok(s.by_request_key(key))
    }

    /// [`CatalogueState::page`]: the head (for the revision) and one row
    /// more than the page.
    pub fn page<R: CatalogueRows + ?Sized>(
        rows: &mut R,
        visibility: Visibility,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, R::Error> {
        let mut s = CatalogueState::default();
        rows.head(&mut s)?;
        let fetch = u64::try_from(limit.min(LISTING_LIMIT) + 1).unwrap_or(u64::MAX);
        let archived = matches!(visibility, Visibility::Archived);
        let page = Sessions::Page {
            archived,
            after,
            fetch,
        };
        rows.load(Load::Sessions(page), &mut s)?;
        Ok(s.page(visibility, after, limit))
    }

    /// [`CatalogueState::workspace_default`]: the default, then the
    /// session it names.
    pub fn workspace_default<R: CatalogueRows + ?Sized>(
        rows: &mut R,
        workspace: &str,
    ) -> Result<Option<String>, R::Error> {
        let mut s = with(rows, &[Load::Defaults(Defaults::Workspace(workspace))])?;
        if let Some(id) = s.workspace_defaults.get(workspace).cloned() {
            rows.load(Load::Sessions(Sessions::Id(&id)), &mut s)?;
        }
        Ok(s.workspace_default(workspace)?)
    }

    /// [`CatalogueState::recent_folders`].
    pub fn recent_folders<R: CatalogueRows + ?Sized>(
        rows: &mut R,
    ) -> Result<Vec<Recent>, R::Error> {
        Ok(with(rows, &[Load::Recent])?.recent_folders())
    }

    /// [`CatalogueState::custody`].
    pub fn custody<R: CatalogueRows + ?Sized>(rows: &mut R, id: &str) -> Result<Custody, R::Error> {
        Ok(session(rows, id)?.custody(id)?)
    }

    /// [`CatalogueState::moving`].
    pub fn moving<R: CatalogueRows + ?Sized>(rows: &mut R) -> Result<Vec<Move>, R::Error> {
        Ok(with(rows, &[Load::Sessions(Sessions::Moving)])?.moving())
    }

    /// [`CatalogueState::deletion`].
    pub fn deletion<R: CatalogueRows + ?Sized>(
        rows: &mut R,
        id: &str,
    ) -> Result<Deletion, R::Error> {
        Ok(session(rows, id)?.deletion(id)?)
    }

    /// [`CatalogueState::deleting`].
    pub fn deleting<R: CatalogueRows + ?Sized>(rows: &mut R) -> Result<Vec<String>, R::Error> {
        Ok(with(rows, &[Load::Sessions(Sessions::Deleting)])?.deleting())
    }

    /// [`CatalogueState::delegate_for`]. Call [`check_delegate_pair`]
    /// before opening the read: a malformed pair is refused before
    /// anything is read.
    pub fn delegate_for<R: CatalogueRows + ?Sized>(
        rows: &mut R,
        spawner: &str,
        parent: &str,
    ) -> Result<Option<Delegate>, R::Error> {
        let s = with(rows, &[Load::Delegates(Delegates::Pair(spawner, parent))])?;
        Ok(s.delegate_for(spawner, parent)?)
    }

    /// Refuses a malformed spawner and parent pair, reading nothing.
    pub fn check_delegate_pair(spawner: &str, parent: &str) -> Result<(), CatalogueError> {
        CatalogueState::default()
            .delegate_for(spawner, parent)
            .map(drop)
    }

    /// [`CatalogueState::delegate_of`].
    pub fn delegate_of<R: CatalogueRows + ?Sized>(
        rows: &mut R,
        id: &str,
    ) -> Result<Option<Delegate>, R::Error> {
        let s = with(rows, &[Load::Delegates(Delegates::Session(id))])?;
        Ok(s.delegate_of(id))
    }

    /// [`CatalogueState::delegates_held`].
    pub fn delegates_held<R: CatalogueRows + ?Sized>(
        rows: &mut R,
        spawner: &str,
    ) -> Result<u32, R::Error> {
        let s = with(rows, &[Load::Delegates(Delegates::Spawner(spawner))])?;
        Ok(s.delegates_held(spawner))
    }

    /// The revision, from the head alone.
    pub fn revision<R: CatalogueRows + ?Sized>(rows: &mut R) -> Result<u64, R::Error> {
        let mut s = CatalogueState::default();
        rows.head(&mut s)?;
        Ok(s.revision)
    }
}
