//! The control catalog of worlds: identity, writer mode, status,
//! advisory tick head and archetype signatures, and the `ControlCatalog` port.
//!
//! The catalog is authoritative for a world's **identity** (`world_id`,
//! `name`, `run_id`, `parent_world_id`), its immutable [`WriterMode`] and its
//! [`WorldStatus`]; it is advisory for the tick head. Rules, all in
//! [`decide`]:
//!
//! - **Registration**: an absent world is created active; an identical
//!   re-registration (identity and writer mode) is a no-op; a differing one
//!   is `CatalogConflict`; a registration on a destroyed row is refused
//!   (`CatalogConflict`: the tombstone wins, so a delayed registration never
//!   resurrects a retired writer).
//! - **Retirement** carries the complete record with `status = destroyed`:
//!   an absent row becomes a destroyed tombstone for the supplied identity;
//!   the exact active row becomes destroyed; the exact destroyed row is an
//!   idempotent success; a different identity conflicts without mutation.
//! - **Destroyed is monotonic**: no request turns a destroyed row active.
//! - **Tick head**: advances monotonically on an active world; advisory.
//! - **Signatures**: immutable per `(world, table_id)`; the fingerprint must
//!   be the schema's ([`crate::schema::fingerprint`]).
//!
//! - **Writer fences** ([`crate::fence`], stored in the slot): an
//!   `AcquireFence` issues an epoch strictly above every one issued and the
//!   imported floor, staling every earlier writer; for a resume the world
//!   must be active and `resumable` (checked first, nothing fenced
//!   otherwise), for a migration merely active. A `CommitTick` is admitted
//!   only at the current epoch; once a world is fenced an unfenced
//!   `AdvanceTick` is `StaleFence` at epoch 0.
//!
//! [`check_mutable_resume`] fails closed for `cleanup_only` and unknown
//! writer modes (and for destroyed worlds): a caller runs it before it opens
//! storage or fences a writer.
//!
//! A shell loads one world's [`WorldSlot`] inside its write transaction,
//! calls [`decide`], and writes [`Decision::next`] back when
//! [`Decision::changed`]. [`MemoryControlCatalog`](crate::control_memory::MemoryControlCatalog) is the port over the pure
//! state.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::fence::{self, Epoch, FenceError, Holder, WorldFence};
use crate::schema::{self, Schema};

/// The longest id or name accepted, in bytes.
pub const MAX_ID_LEN: usize = 256;

/// A world's immutable identity.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorldIdentity {
    /// The world's id.
    pub world_id: String,
    /// Its name.
    pub name: String,
    /// The run that created it.
    pub run_id: Option<String>,
    /// The world it was forked from.
    pub parent_world_id: Option<String>,
}

impl WorldIdentity {
    /// An identity with no run and no parent.
    pub fn new(world_id: impl Into<String>, name: impl Into<String>) -> Self {
        WorldIdentity {
            world_id: world_id.into(),
            name: name.into(),
            run_id: None,
            parent_world_id: None,
        }
    }

    /// Checks every part: ids non-empty, every part at most [`MAX_ID_LEN`]
    /// bytes without control characters.
    pub fn validate(&self) -> Result<(), WorldError> {
        let check = |what: &'static str, s: &str, may_be_empty: bool| {
            if (!may_be_empty && s.is_empty())
                || s.len() > MAX_ID_LEN
                || s.chars().any(char::is_control)
            {
                Err(WorldError::Invalid {
                    what,
                    detail: format!("{} bytes or a control character", s.len()),
                })
            } else {
                Ok(())
            }
        };
        check("world_id", &self.world_id, false)?;
        check("name", &self.name, true)?;
        if let Some(r) = &self.run_id {
            check("run_id", r, false)?;
        }
        if let Some(p) = &self.parent_world_id {
            check("parent_world_id", p, false)?;
        }
        Ok(())
    }
}

/// The immutable writer mode, kept exactly as read.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum WriterMode {
    /// A writer may resume the world mutably.
    Resumable,
    /// The world may only be cleaned up; mutable resume fails closed.
    CleanupOnly,
    /// A mode this build does not know; mutable resume fails closed.
    Unknown(String),
}

impl WriterMode {
    /// The stored string: `resumable`, `cleanup_only`, or the unknown text.
    pub fn as_str(&self) -> &str {
        match self {
            WriterMode::Resumable => "resumable",
            WriterMode::CleanupOnly => "cleanup_only",
            WriterMode::Unknown(s) => s,
        }
    }

    /// Reads a stored string; legacy rows without a mode read as
    /// [`WriterMode::Resumable`] (the shell passes `None`).
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            None | Some("resumable") => WriterMode::Resumable,
            Some("cleanup_only") => WriterMode::CleanupOnly,
            Some(other) => WriterMode::Unknown(other.to_owned()),
        }
    }
}

impl From<String> for WriterMode {
    fn from(s: String) -> Self {
        WriterMode::parse(Some(&s))
    }
}

impl From<WriterMode> for String {
    fn from(m: WriterMode) -> Self {
        m.as_str().to_owned()
    }
}

/// A world's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorldStatus {
    /// Live.
    Active,
    /// Destroyed (a tombstone, or a retired world). Monotonic.
    Destroyed,
}

impl WorldStatus {
    /// `active` or `destroyed`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorldStatus::Active => "active",
            WorldStatus::Destroyed => "destroyed",
        }
    }

    /// Parses the stored string; anything else is `None` (a malformed row).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(WorldStatus::Active),
            "destroyed" => Some(WorldStatus::Destroyed),
            _ => None,
        }
    }
}

/// One world's catalog row.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorldRecord {
    /// The immutable identity.
    pub identity: WorldIdentity,
    /// The immutable writer mode.
    pub writer_mode: WriterMode,
    /// Active or destroyed.
    pub status: WorldStatus,
    /// The advisory tick head.
    pub tick_head: u64,
}

impl WorldRecord {
    /// An active record at tick 0.
    pub fn active(identity: WorldIdentity, writer_mode: WriterMode) -> Self {
        WorldRecord {
            identity,
            writer_mode,
            status: WorldStatus::Active,
            tick_head: 0,
        }
    }

    /// The same record with `status = destroyed` (what retirement carries).
    pub fn destroyed(&self) -> Self {
        WorldRecord {
            status: WorldStatus::Destroyed,
            ..self.clone()
        }
    }

    /// Whether the immutable parts (identity and writer mode) equal `other`'s.
    pub fn same_identity(&self, other: &WorldRecord) -> bool {
        self.identity == other.identity && self.writer_mode == other.writer_mode
    }
}

/// An archetype signature: the durable descriptor of one table.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Signature {
    /// The component names, sorted and distinct.
    pub components: Vec<String>,
    /// The table's logical schema.
    pub schema: Schema,
    /// [`schema::fingerprint`] of `schema`.
    pub fingerprint: String,
    /// The table's identity in the data plane.
    pub table_id: String,
}

impl Signature {
    /// A signature whose fingerprint is computed from `schema`; components
    /// are sorted and deduplicated.
    pub fn new(components: Vec<String>, schema: Schema, table_id: impl Into<String>) -> Self {
        let mut components = components;
        components.sort();
        components.dedup();
        Signature {
            fingerprint: schema::fingerprint(&schema),
            components,
            schema,
            table_id: table_id.into(),
        }
    }

    /// Checks the fingerprint against the schema and the components' order.
    pub fn validate(&self) -> Result<(), WorldError> {
        if self.table_id.is_empty() || self.table_id.len() > MAX_ID_LEN {
            return Err(WorldError::Invalid {
                what: "table_id",
                detail: format!("{} bytes", self.table_id.len()),
            });
        }
        if self.components.is_empty() || self.components.windows(2).any(|w| w[0] >= w[1]) {
            return Err(WorldError::Invalid {
                what: "components",
                detail: "must be non-empty, sorted and distinct".into(),
            });
        }
        let want = schema::fingerprint(&self.schema);
        if self.fingerprint != want {
            return Err(WorldError::Invalid {
                what: "fingerprint",
                detail: format!("{} is not the schema's {want}", self.fingerprint),
            });
        }
        Ok(())
    }
}

/// The stored state of one world: its row (if any), its signatures,
/// sorted by `table_id`, and its writer fence.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WorldSlot {
    /// The catalog row.
    pub record: Option<WorldRecord>,
    /// Signatures, sorted by table id.
    pub signatures: Vec<Signature>,
    /// The writer fence (all zero before the first acquire or import).
    #[serde(default)]
    pub fence: WorldFence,
}

impl WorldSlot {
    /// What `open_world_readonly` answers from this slot of `world_id`:
    /// its record, signatures and fence, or `NotFound` for a World the
    /// catalog does not hold.
    pub fn into_info(self, world_id: &str) -> Result<WorldInfo, WorldError> {
        match self.record {
            Some(record) => Ok(WorldInfo {
                record,
                signatures: self.signatures,
                fence: self.fence,
            }),
            None => Err(WorldError::NotFound {
                world_id: world_id.to_owned(),
            }),
        }
    }
}

/// Why a fence is acquired; it decides what the world's writer mode must
/// allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FencePurpose {
    /// A mutable resume: the world must be active and `resumable`
    /// ([`check_mutable_resume`]); cleanup-only and unknown modes fail
    /// closed before anything is fenced.
    Resume,
    /// A migration planning its move: every active world is
    /// fenced, whatever its writer mode, so that no earlier writer can
    /// commit after the plan is frozen. A destroyed world is not fenced.
    Migration,
}

/// A request to the control catalog about one world.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Request {
    /// Register a world (create/fork time). `record.status` must be active.
    Register {
        /// The record to register.
        record: WorldRecord,
    },
    /// Retire a world exactly. `record.status` must be destroyed.
    Retire {
        /// The complete record: identity, writer mode, destroyed, tick head.
        record: WorldRecord,
    },
    /// Advance the advisory tick head.
    AdvanceTick {
        /// The world.
        world_id: String,
        /// The tick reached.
        tick: u64,
    },
    /// Record an archetype signature of the world.
    RegisterSignature {
        /// The world.
        world_id: String,
        /// The signature.
        signature: Signature,
    },
    /// Issue a new writer-fence epoch to `holder`, staling every earlier
    /// writer ([`custos_core::fence`](crate::fence)).
    AcquireFence {
        /// The world.
        world_id: String,
        /// Who takes the fence (never exported or imported).
        holder: Holder,
        /// What the fence is for.
        purpose: FencePurpose,
    },
    /// Commit a tick under a writer epoch: admitted only at the world's
    /// current epoch, then the tick head advances as [`Request::AdvanceTick`]
    /// does.
    CommitTick {
        /// The world.
        world_id: String,
        /// The writer's epoch.
        epoch: Epoch,
        /// The tick committed.
        tick: u64,
    },
}

impl Request {
    /// The world the request is about.
    pub fn world_id(&self) -> &str {
        match self {
            Request::Register { record } | Request::Retire { record } => &record.identity.world_id,
            Request::AdvanceTick { world_id, .. }
            | Request::RegisterSignature { world_id, .. }
            | Request::AcquireFence { world_id, .. }
            | Request::CommitTick { world_id, .. } => world_id,
        }
    }
}

/// How a retirement was applied (the four retirement cases, less the
/// conflict: a different immutable identity, refused without mutation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Retirement {
    /// The row was absent: a destroyed tombstone now holds the identity.
    Tombstoned,
    /// The exact active row became destroyed.
    Destroyed,
    /// The exact row was already destroyed.
    AlreadyDestroyed,
}

/// What a successful request did.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// The world is registered; `created` is false for an identical repeat.
    Registered {
        /// Whether a row was written.
        created: bool,
    },
    /// The world is destroyed.
    Retired(Retirement),
    /// The tick head now stands at `head`.
    TickAdvanced {
        /// The head after the request.
        head: u64,
    },
    /// The signature is recorded; `created` is false for an identical repeat.
    SignatureRegistered {
        /// Whether a row was written.
        created: bool,
    },
    /// A new writer epoch was issued.
    FenceAcquired {
        /// The new current epoch.
        epoch: Epoch,
        /// The writer epoch it staled, if one was current.
        staled: Option<Epoch>,
    },
}

/// A decision: the outcome and the row writes to apply in the same
/// transaction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Decision {
    /// What happened.
    pub outcome: Outcome,
    /// The rows to write, in order; empty when nothing changed.
    pub effects: Vec<Effect>,
    /// The decided slot: the loaded slot with `effects` applied.
    pub next: WorldSlot,
    /// Whether `next` differs from the loaded state.
    pub changed: bool,
}

/// One row write of the control catalog, as a decision hands it to a
/// backend. A backend maps each to one statement, in order; it keeps no diff
/// of its own. [`effects`] derives them and [`apply_effect`] is the memory
/// backend's writer (and the oracle the SQL backends are compared with).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Effect {
    /// Insert the world's row; when it exists, set its status and tick head
    /// only (its identity and writer mode never change once recorded).
    PutWorld(WorldRecord),
    /// Insert or replace the world's fence row.
    PutFence {
        /// The world.
        world_id: String,
        /// The fence.
        fence: WorldFence,
    },
    /// Insert a table's signature (a recorded signature is never
    /// rewritten, and a decision puts only a table the slot does not hold,
    /// so a backend may insert without an upsert).
    PutSignature {
        /// The world.
        world_id: String,
        /// The signature.
        signature: Signature,
    },
}

/// The effects that turn `before` (the loaded slot) into `next`: the world
/// row, then the fence, then each new signature by table id. A slot without
/// a record writes nothing.
pub fn effects(before: &WorldSlot, next: &WorldSlot) -> Vec<Effect> {
    let Some(r) = &next.record else {
        return Vec::new();
    };
    let world_id = &r.identity.world_id;
    let mut out = Vec::new();
    if before.record != next.record {
        out.push(Effect::PutWorld(r.clone()));
    }
    if before.fence != next.fence {
        out.push(Effect::PutFence {
            world_id: world_id.clone(),
            fence: next.fence.clone(),
        });
    }
    for s in &next.signatures {
        if before
            .signatures
            .binary_search_by(|x| x.table_id.cmp(&s.table_id))
            .is_err()
        {
            out.push(Effect::PutSignature {
                world_id: world_id.clone(),
                signature: s.clone(),
            });
        }
    }
    out
}

/// Applies one effect to a slot, as a backend applies it to its rows.
pub fn apply_effect(slot: &mut WorldSlot, e: &Effect) {
    match e {
        Effect::PutWorld(r) => match &mut slot.record {
            Some(old) => {
                old.status = r.status;
                old.tick_head = r.tick_head;
            }
            None => slot.record = Some(r.clone()),
        },
        Effect::PutFence { fence, .. } => slot.fence = fence.clone(),
        Effect::PutSignature { signature, .. } => {
            let at = &signature.table_id;
            if let Err(i) = slot.signatures.binary_search_by(|x| x.table_id.cmp(at)) {
                slot.signatures.insert(i, signature.clone());
            }
        }
    }
}

/// Why a control-catalog request was refused. Nothing changes on a refusal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum WorldError {
    /// A differing immutable identity (writer mode included) for the same
    /// world or table.
    #[error("CatalogConflict: world {world_id}: {detail}")]
    Conflict {
        /// The world.
        world_id: String,
        /// What differs.
        detail: String,
    },
    /// The world is destroyed; a registration or update would resurrect it.
    #[error("CatalogConflict: world {world_id} is destroyed")]
    Destroyed {
        /// The world.
        world_id: String,
    },
    /// The world is not recorded.
    #[error("NotFound: world {world_id} is not recorded")]
    NotFound {
        /// The world.
        world_id: String,
    },
    /// Mutable resume refused: the writer mode is not `resumable`.
    #[error(
        "ResumeRefused: world {world_id} has writer mode {mode:?}; mutable resume fails closed"
    )]
    ResumeRefused {
        /// The world.
        world_id: String,
        /// The stored mode.
        mode: String,
    },
    /// A write under an epoch that is not the world's current writer epoch
    /// (staled by a later acquire, at or below an imported floor, or an
    /// unfenced tick on a fenced world: epoch 0). Nothing changed.
    #[error("StaleFence: world {world_id}: epoch {epoch} is not the current writer epoch (current {current:?}, floor {floor})")]
    StaleFence {
        /// The world.
        world_id: String,
        /// The epoch the writer carried (0: none).
        epoch: Epoch,
        /// The current epoch, if any.
        current: Option<Epoch>,
        /// The imported floor.
        floor: Epoch,
    },
    /// Every epoch value of the world has been issued.
    #[error("FenceExhausted: world {world_id}: no epoch above {issued} can be issued")]
    FenceExhausted {
        /// The world.
        world_id: String,
        /// The highest epoch issued or imported.
        issued: Epoch,
    },
    /// A malformed request or stored value.
    #[error("Invalid: {what}: {detail}")]
    Invalid {
        /// Which value.
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// The backend failed; the catalog is unavailable.
    #[error("BackendFault: {reason}")]
    BackendFault {
        /// What failed.
        reason: String,
    },
    /// The backend could not be reached
    /// ([`Class::Unavailable`](crate::Class::Unavailable)): retry the same request.
    #[error("Unavailable: {reason}")]
    Unavailable {
        /// What failed (never a credential).
        reason: String,
    },
}

/// A stored column that breaks its rule is `Invalid`, `what` being the
/// column, the detail naming the table and the row too.
impl From<crate::columns::ColumnError> for WorldError {
    fn from(e: crate::columns::ColumnError) -> Self {
        WorldError::Invalid {
            what: e.column,
            detail: e.to_string(),
        }
    }
}

impl WorldError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (a stale writer epoch or a destroyed world is `FailedPrecondition`).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            WorldError::Conflict { .. } => Class::StateConflict,
            WorldError::Destroyed { .. } => Class::FailedPrecondition,
            WorldError::NotFound { .. } => Class::NotFound,
            WorldError::ResumeRefused { .. } => Class::FailedPrecondition,
            WorldError::StaleFence { .. } => Class::FailedPrecondition,
            WorldError::FenceExhausted { .. } => Class::ResourceExhausted,
            WorldError::Invalid { .. } => Class::InvalidArgument,
            WorldError::BackendFault { .. } => Class::Internal,
            WorldError::Unavailable { .. } => Class::Unavailable,
        }
    }
}

crate::reasons! {
    /// The stable reason string: the variant name, except that both
    /// conflicts (a differing identity, a destroyed world) are
    /// `CatalogConflict`.
    WorldError {
        Conflict => "CatalogConflict",
        Destroyed => "CatalogConflict",
        NotFound,
        ResumeRefused,
        StaleFence,
        FenceExhausted,
        Invalid,
        BackendFault,
        Unavailable,
    }
}

fn fence_error(world_id: &str, e: FenceError) -> WorldError {
    match e {
        FenceError::StaleFence {
            epoch,
            current,
            floor,
        } => WorldError::StaleFence {
            world_id: world_id.to_owned(),
            epoch,
            current,
            floor,
        },
        FenceError::FenceExhausted(issued) => WorldError::FenceExhausted {
            world_id: world_id.to_owned(),
            issued,
        },
        FenceError::InvalidHolder { len } => WorldError::Invalid {
            what: "holder",
            detail: format!("{len} bytes"),
        },
    }
}

fn conflict(world_id: &str, stored: &WorldRecord, asked: &WorldRecord) -> WorldError {
    let detail = if stored.identity != asked.identity {
        format!(
            "stored identity {:?} differs from {:?}",
            stored.identity, asked.identity
        )
    } else {
        format!(
            "stored writer mode {:?} differs from {:?}",
            stored.writer_mode.as_str(),
            asked.writer_mode.as_str()
        )
    };
    WorldError::Conflict {
        world_id: world_id.to_owned(),
        detail,
    }
}

fn done(outcome: Outcome, next: WorldSlot, changed: bool) -> Result<Decision, WorldError> {
    Ok(Decision {
        outcome,
        effects: Vec::new(),
        next,
        changed,
    })
}

/// Decides one request against one world's stored state. A slot loaded for
/// another world is `Invalid`. One function per request below; this is only
/// the dispatch.
pub fn decide(state: &WorldSlot, req: &Request) -> Result<Decision, WorldError> {
    let world_id = req.world_id();
    if let Some(r) = &state.record {
        if r.identity.world_id != world_id {
            return Err(WorldError::Invalid {
                what: "slot",
                detail: format!("loaded world {} for {world_id}", r.identity.world_id),
            });
        }
    }
    let mut d = match req {
        Request::Register { record } => register(state, record),
        Request::Retire { record } => retire(state, record),
        Request::AdvanceTick { tick, .. } => advance_tick(state, world_id, *tick),
        Request::RegisterSignature { signature, .. } => {
            register_signature(state, world_id, signature)
        }
        Request::AcquireFence {
            holder, purpose, ..
        } => acquire_fence(state, world_id, holder, *purpose),
        Request::CommitTick { epoch, tick, .. } => commit_tick(state, world_id, *epoch, *tick),
    }?;
    if d.changed {
        d.effects = effects(state, &d.next);
    }
    Ok(d)
}

/// `AcquireFence`: the world must be recorded and active; a resume also
/// needs a `resumable` writer mode ([`check_mutable_resume`]), checked
/// before anything is fenced. The epoch is [`fence::decide`]'s: strictly
/// above every epoch issued here and the imported floor.
fn acquire_fence(
    state: &WorldSlot,
    world_id: &str,
    holder: &Holder,
    purpose: FencePurpose,
) -> Result<Decision, WorldError> {
    let r = active(state, world_id)?;
    if purpose == FencePurpose::Resume {
        check_mutable_resume(r)?;
    }
    let d = fence::decide(
        &state.fence,
        &fence::Request::Acquire {
            holder: holder.clone(),
        },
    )
    .map_err(|e| fence_error(world_id, e))?;
    let fence::Outcome::Acquired { epoch, staled } = d.outcome else {
        return Err(WorldError::Invalid {
            what: "fence",
            detail: "an acquire decided something else".into(),
        });
    };
    let mut next = state.clone();
    next.fence = d.next;
    done(Outcome::FenceAcquired { epoch, staled }, next, true)
}

/// `CommitTick`: admitted only at the current writer epoch
/// ([`fence::decide`]'s `AdmitWrite`); then the head advances as
/// [`advance_head`] does (a tick at or below the head is answered
/// unchanged).
fn commit_tick(
    state: &WorldSlot,
    world_id: &str,
    epoch: Epoch,
    tick: u64,
) -> Result<Decision, WorldError> {
    let r = active(state, world_id)?;
    fence::decide(&state.fence, &fence::Request::AdmitWrite { epoch })
        .map_err(|e| fence_error(world_id, e))?;
    advance_head(state, r, tick)
}

/// `Register`: an active record registers an absent world; an identical
/// repeat is unchanged; a differing identity or writer mode is
/// `CatalogConflict`, and so is a destroyed world (never resurrected).
fn register(state: &WorldSlot, record: &WorldRecord) -> Result<Decision, WorldError> {
    check_request(record, WorldStatus::Active, "a registration is active")?;
    let world_id = &record.identity.world_id;
    match &state.record {
        None => {
            let mut next = state.clone();
            next.record = Some(record.clone());
            done(Outcome::Registered { created: true }, next, true)
        }
        Some(stored) if !stored.same_identity(record) => Err(conflict(world_id, stored, record)),
        Some(stored) if stored.status == WorldStatus::Destroyed => Err(WorldError::Destroyed {
            world_id: world_id.clone(),
        }),
        Some(_) => done(Outcome::Registered { created: false }, state.clone(), false),
    }
}

/// `Retire`, exactly: an absent world gets a destroyed tombstone carrying
/// the request's identity; the exact active row becomes destroyed, keeping
/// the higher tick head; an exact destroyed row is unchanged; a differing
/// identity or writer mode is `CatalogConflict`.
fn retire(state: &WorldSlot, record: &WorldRecord) -> Result<Decision, WorldError> {
    check_request(
        record,
        WorldStatus::Destroyed,
        "a retirement carries status destroyed",
    )?;
    match &state.record {
        None => {
            let mut next = state.clone();
            next.record = Some(record.clone());
            done(Outcome::Retired(Retirement::Tombstoned), next, true)
        }
        Some(stored) if !stored.same_identity(record) => {
            Err(conflict(&record.identity.world_id, stored, record))
        }
        Some(stored) if stored.status == WorldStatus::Destroyed => done(
            Outcome::Retired(Retirement::AlreadyDestroyed),
            state.clone(),
            false,
        ),
        Some(stored) => {
            let mut next = state.clone();
            next.record = Some(WorldRecord {
                status: WorldStatus::Destroyed,
                tick_head: stored.tick_head.max(record.tick_head),
                ..stored.clone()
            });
            done(Outcome::Retired(Retirement::Destroyed), next, true)
        }
    }
}

/// `AdvanceTick`, the unfenced advisory update: the head of an active world
/// moves forward only; a tick at or below it answers the standing head
/// unchanged. Once the world has a fence (an epoch issued or a floor
/// imported) its ticks are [`Request::CommitTick`]s and an unfenced one is
/// `StaleFence` at epoch 0: a writer from before the fence cannot move the
/// head.
fn advance_tick(state: &WorldSlot, world_id: &str, tick: u64) -> Result<Decision, WorldError> {
    let r = active(state, world_id)?;
    if state.fence != WorldFence::default() {
        return Err(fence_error(
            world_id,
            FenceError::StaleFence {
                epoch: 0,
                current: state.fence.current(),
                floor: state.fence.floor,
            },
        ));
    }
    advance_head(state, r, tick)
}

/// Moves the head of the active record `r` forward to `tick`, or answers
/// the standing head.
fn advance_head(state: &WorldSlot, r: &WorldRecord, tick: u64) -> Result<Decision, WorldError> {
    if tick <= r.tick_head {
        return done(
            Outcome::TickAdvanced { head: r.tick_head },
            state.clone(),
            false,
        );
    }
    let mut next = state.clone();
    next.record = Some(WorldRecord {
        tick_head: tick,
        ..r.clone()
    });
    done(Outcome::TickAdvanced { head: tick }, next, true)
}

/// `RegisterSignature`: a valid signature of an active world is recorded
/// in table order; an identical repeat is unchanged; another descriptor
/// for a recorded table is `CatalogConflict`.
fn register_signature(
    state: &WorldSlot,
    world_id: &str,
    signature: &Signature,
) -> Result<Decision, WorldError> {
    signature.validate()?;
    active(state, world_id)?;
    match state
        .signatures
        .binary_search_by(|s| s.table_id.cmp(&signature.table_id))
    {
        Ok(i) if state.signatures.get(i) == Some(signature) => done(
            Outcome::SignatureRegistered { created: false },
            state.clone(),
            false,
        ),
        Ok(_) => Err(WorldError::Conflict {
            world_id: world_id.to_owned(),
            detail: format!(
                "table {} is recorded with another descriptor",
                signature.table_id
            ),
        }),
        Err(i) => {
            let mut next = state.clone();
            next.signatures.insert(i, signature.clone());
            done(Outcome::SignatureRegistered { created: true }, next, true)
        }
    }
}

/// A request's record: a valid identity, and the status the request
/// carries (`rule` says which).
fn check_request(record: &WorldRecord, status: WorldStatus, rule: &str) -> Result<(), WorldError> {
    record.identity.validate()?;
    if record.status != status {
        return Err(WorldError::Invalid {
            what: "status",
            detail: rule.into(),
        });
    }
    Ok(())
}

/// The slot's record when the world is recorded and active: `NotFound`
/// without a row, `CatalogConflict` (destroyed) for a destroyed one.
fn active<'s>(state: &'s WorldSlot, world_id: &str) -> Result<&'s WorldRecord, WorldError> {
    match &state.record {
        None => Err(WorldError::NotFound {
            world_id: world_id.to_owned(),
        }),
        Some(r) if r.status == WorldStatus::Destroyed => Err(WorldError::Destroyed {
            world_id: world_id.to_owned(),
        }),
        Some(r) => Ok(r),
    }
}

/// Mutable resume admission: only an active `resumable` world may be
/// resumed. Run before opening storage or fencing a writer.
pub fn check_mutable_resume(record: &WorldRecord) -> Result<(), WorldError> {
    let world_id = record.identity.world_id.clone();
    if record.status == WorldStatus::Destroyed {
        return Err(WorldError::Destroyed { world_id });
    }
    match &record.writer_mode {
        WriterMode::Resumable => Ok(()),
        other => Err(WorldError::ResumeRefused {
            world_id,
            mode: other.as_str().to_owned(),
        }),
    }
}

/// A world's durable descriptor, as `open_world_readonly` returns it: never
/// a mutable handle.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WorldInfo {
    /// The catalog row.
    pub record: WorldRecord,
    /// The world's signatures, sorted by table id.
    pub signatures: Vec<Signature>,
    /// The world's writer fence.
    #[serde(default)]
    pub fence: WorldFence,
}

/// A signature with the world it was registered under.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SignatureRecord {
    /// The world.
    pub world_id: String,
    /// The signature.
    pub signature: Signature,
}

/// The control-catalog port: one catalog per storage identity.
pub trait ControlCatalog {
    /// Decides and applies one request atomically.
    fn apply(&self, req: &Request) -> Result<Outcome, WorldError>;

    /// Every world ever registered (destroyed included), by `world_id`.
    fn discover_worlds(&self) -> Result<Vec<WorldRecord>, WorldError>;

    /// The durable descriptor of one world, or `NotFound`.
    fn open_world_readonly(&self, world_id: &str) -> Result<WorldInfo, WorldError>;

    /// Every recorded signature, by `(world_id, table_id)`.
    fn list_signatures(&self) -> Result<Vec<SignatureRecord>, WorldError>;

    /// Registers a world.
    fn register(&self, record: &WorldRecord) -> Result<Outcome, WorldError> {
        self.apply(&Request::Register {
            record: record.clone(),
        })
    }

    /// Retires a world exactly (`record` is the full record; its status is
    /// set to destroyed here).
    fn retire(&self, record: &WorldRecord) -> Result<Outcome, WorldError> {
        self.apply(&Request::Retire {
            record: record.destroyed(),
        })
    }

    /// Acquires a writer fence on `world_id` for `purpose`: the new epoch
    /// and the one it staled.
    fn acquire_fence(
        &self,
        world_id: &str,
        holder: &Holder,
        purpose: FencePurpose,
    ) -> Result<(Epoch, Option<Epoch>), WorldError> {
        match self.apply(&Request::AcquireFence {
            world_id: world_id.to_owned(),
            holder: holder.clone(),
            purpose,
        })? {
            Outcome::FenceAcquired { epoch, staled } => Ok((epoch, staled)),
            other => Err(WorldError::BackendFault {
                reason: format!("an acquire answered {other:?}"),
            }),
        }
    }

    /// Commits `tick` on `world_id` under the writer epoch `epoch`: the
    /// head after the commit.
    fn commit_tick(&self, world_id: &str, epoch: Epoch, tick: u64) -> Result<u64, WorldError> {
        match self.apply(&Request::CommitTick {
            world_id: world_id.to_owned(),
            epoch,
            tick,
        })? {
            Outcome::TickAdvanced { head } => Ok(head),
            other => Err(WorldError::BackendFault {
                reason: format!("a tick commit answered {other:?}"),
            }),
        }
    }
}

/// Text encodings a shell stores a signature's columns in (JSON), so that
/// every backend stores and decodes descriptors the same way; and the rows
/// a backend reads back, as plain columns, checked here once
/// ([`codec::StoredWorld`], [`codec::StoredSignature`], [`codec::StoredFence`]): a backend
/// decodes each column's type and byte bound and nothing else.
pub mod codec {
    use super::{
        Holder, Schema, Signature, SignatureRecord, WorldError, WorldFence, WorldIdentity,
        WorldRecord, WorldStatus, WriterMode, MAX_ID_LEN,
    };
    use crate::columns::{Cells, ColumnError, Columns, MAX_WORD_LEN};
    use crate::fence::MAX_HOLDER_LEN;

    /// The bound on a stored signature's JSON column (components, schema).
    pub const MAX_SIGNATURE_JSON_LEN: usize = 4 * 1024 * 1024;

    fn bad(what: &'static str, detail: String) -> WorldError {
        WorldError::Invalid { what, detail }
    }

    /// A stored integer that must be a `u64`: `table`'s row `row`, column
    /// `what`.
    pub fn unsigned(v: i64, what: &'static str, table: &str, row: &str) -> Result<u64, WorldError> {
        u64::try_from(v).map_err(|_| {
            bad(
                what,
                format!("{table} row {row}: column {what}: negative value {v}"),
            )
        })
    }

    /// A `control_worlds` row as stored.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct StoredWorld {
        /// The world id.
        pub world_id: String,
        /// Its name.
        pub name: String,
        /// The run that made it, if any.
        pub run_id: Option<String>,
        /// Its parent world, if any.
        pub parent_world_id: Option<String>,
        /// The writer mode's word, if any.
        pub writer_mode: Option<String>,
        /// The status word.
        pub status: String,
        /// The tick head as stored.
        pub tick_head: i64,
    }

    impl StoredWorld {
        /// The record: a known status word and a non-negative tick head.
        pub fn decode(self) -> Result<WorldRecord, WorldError> {
            let t = "control_worlds";
            let id = self.world_id;
            let status = WorldStatus::parse(&self.status).ok_or_else(|| {
                bad(
                    "status",
                    format!(
                        "{t} row {id}: column status: unknown status {:?}",
                        self.status
                    ),
                )
            })?;
            let tick_head = unsigned(self.tick_head, "tick_head", t, &id)?;
            Ok(WorldRecord {
                identity: WorldIdentity {
                    world_id: id,
                    name: self.name,
                    run_id: self.run_id,
                    parent_world_id: self.parent_world_id,
                },
                writer_mode: WriterMode::parse(self.writer_mode.as_deref()),
                status,
                tick_head,
            })
        }
    }

    /// A `control_signatures` row as stored.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct StoredSignature {
        /// The world id.
        pub world_id: String,
        /// The table id.
        pub table_id: String,
        /// The component names, as [`components_to_json`] wrote them.
        pub components: String,
        /// The schema, as [`schema_to_json`] wrote it.
        pub schema: String,
        /// The fingerprint.
        pub fingerprint: String,
    }

    impl StoredWorld {
        /// A `control_worlds` row from `c`, in the order `world_id, name,
        /// run_id, parent_world_id, writer_mode, status, tick_head`, every
        /// text bounded before it is copied; `c` names the row by its id.
        pub fn read<C: Columns>(c: &mut Cells<C>) -> Result<Self, ColumnError> {
            let world_id = c.text(0, "world_id", MAX_ID_LEN)?;
            c.at(world_id.as_str());
            Ok(StoredWorld {
                name: c.text(1, "name", MAX_ID_LEN)?,
                run_id: c.opt_text(2, "run_id", MAX_ID_LEN)?,
                parent_world_id: c.opt_text(3, "parent_world_id", MAX_ID_LEN)?,
                writer_mode: c.opt_text(4, "writer_mode", MAX_WORD_LEN)?,
                status: c.text(5, "status", MAX_WORD_LEN)?,
                tick_head: c.int(6, "tick_head")?,
                world_id,
            })
        }
    }

    impl StoredSignature {
        /// A `control_signatures` row from `c`, in the order `world_id,
        /// table_id, components, schema, fingerprint`, every text bounded
        /// before it is copied; `c` names the row by its pair of ids.
        pub fn read<C: Columns>(c: &mut Cells<C>) -> Result<Self, ColumnError> {
            let world_id = c.text(0, "world_id", MAX_ID_LEN)?;
            c.at(world_id.as_str());
            let table_id = c.text(1, "table_id", MAX_ID_LEN)?;
            c.at(format!("({world_id}, {table_id})"));
            Ok(StoredSignature {
                components: c.text(2, "components", MAX_SIGNATURE_JSON_LEN)?,
                schema: c.text(3, "schema", MAX_SIGNATURE_JSON_LEN)?,
                // A fingerprint is a SHA-256 in hex; the id bound is generous.
                fingerprint: c.text(4, "fingerprint", MAX_ID_LEN)?,
                world_id,
                table_id,
            })
        }

        /// The record: both JSON columns decode and the signature is valid
        /// (its fingerprint is its schema's).
        pub fn decode(self) -> Result<SignatureRecord, WorldError> {
            let signature = Signature {
                components: components_from_json(&self.components)?,
                schema: schema_from_json(&self.schema)?,
                fingerprint: self.fingerprint,
                table_id: self.table_id,
            };
            signature.validate()?;
            Ok(SignatureRecord {
                world_id: self.world_id,
                signature,
            })
        }
    }

    /// A `control_fences` row as stored.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct StoredFence {
        /// The highest epoch issued.
        pub issued: i64,
        /// The floor.
        pub floor: i64,
        /// The holder, if any.
        pub holder: Option<String>,
    }

    impl StoredFence {
        /// A `control_fences` row of `world_id` from `c`, in the order
        /// `issued, floor, holder`.
        pub fn read<C: Columns>(c: &mut Cells<C>, world_id: &str) -> Result<Self, ColumnError> {
            c.at(world_id);
            Ok(StoredFence {
                issued: c.int(0, "issued")?,
                floor: c.int(1, "floor")?,
                holder: c.opt_text(2, "holder", MAX_HOLDER_LEN)?,
            })
        }

        /// The fence of `world_id`: non-negative epochs and a holder in
        /// its grammar.
        pub fn decode(self, world_id: &str) -> Result<WorldFence, WorldError> {
            let t = "control_fences";
            let holder =
                self.holder.map(Holder::new).transpose().map_err(|e| {
                    bad("holder", format!("{t} row {world_id}: column holder: {e}"))
                })?;
            Ok(WorldFence {
                issued: unsigned(self.issued, "issued", t, world_id)?,
                floor: unsigned(self.floor, "floor", t, world_id)?,
                holder,
            })
        }
    }

    fn invalid(what: &'static str, e: serde_json::Error) -> WorldError {
        bad(what, e.to_string())
    }

    /// The schema as JSON.
    pub fn schema_to_json(schema: &Schema) -> Result<String, WorldError> {
        serde_json::to_string(schema).map_err(|e| invalid("schema", e))
    }

    /// A schema from JSON; a malformed one is `Invalid`.
    pub fn schema_from_json(text: &str) -> Result<Schema, WorldError> {
        serde_json::from_str(text).map_err(|e| invalid("schema", e))
    }

    /// Component names as a JSON array.
    pub fn components_to_json(components: &[String]) -> Result<String, WorldError> {
        serde_json::to_string(components).map_err(|e| invalid("components", e))
    }

    /// Component names from a JSON array; a malformed one is `Invalid`.
    pub fn components_from_json(text: &str) -> Result<Vec<String>, WorldError> {
        serde_json::from_str(text).map_err(|e| invalid("components", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Field, LogicalType};

    fn rec(mode: WriterMode) -> WorldRecord {
        WorldRecord::active(WorldIdentity::new("w1", "world one"), mode)
    }

    fn slot(r: Option<WorldRecord>) -> WorldSlot {
        WorldSlot {
            record: r,
            signatures: vec![],
            fence: WorldFence::default(),
        }
    }

    #[test]
    fn identities_are_checked_part_by_part() {
        let ok = |id: &WorldIdentity| id.validate().is_ok();
        let what = |id: &WorldIdentity| match id.validate() {
            Err(WorldError::Invalid { what, .. }) => what,
            other => panic!("{id:?}: {other:?}"),
        };
        let full = WorldIdentity {
            world_id: "w".repeat(MAX_ID_LEN),
            name: String::new(),
            run_id: Some("r".repeat(MAX_ID_LEN)),
            parent_world_id: Some("p".into()),
        };
        assert!(ok(&full), "the longest parts and an empty name are allowed");
        let mut id = full.clone();
        id.world_id = String::new();
        assert_eq!(what(&id), "world_id");
        id.world_id = "w".repeat(MAX_ID_LEN + 1);
        assert_eq!(what(&id), "world_id");
        id.world_id = "w\u{7}".into();
        assert_eq!(what(&id), "world_id");
        let mut id = full.clone();
        id.name = "n\n".into();
        assert_eq!(what(&id), "name");
        let mut id = full.clone();
        id.run_id = Some(String::new());
        assert_eq!(what(&id), "run_id");
        let mut id = full.clone();
        id.parent_world_id = Some("p".repeat(MAX_ID_LEN + 1));
        assert_eq!(what(&id), "parent_world_id");
        id.parent_world_id = None;
        id.run_id = None;
        assert!(ok(&id));
    }

    #[test]
    fn a_status_reads_back_from_its_stored_word_and_nothing_else_parses() {
        for st in [WorldStatus::Active, WorldStatus::Destroyed] {
            assert_eq!(WorldStatus::parse(st.as_str()), Some(st));
            assert_eq!(
                serde_json::to_string(&st).unwrap(),
                format!("\"{}\"", st.as_str())
            );
        }
        assert_eq!(WorldStatus::Active.as_str(), "active");
        for bad in ["", "Active", "retired", "destroyed "] {
            assert_eq!(WorldStatus::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_shell_codecs_round_trip_and_refuse_malformed_text() {
        let schema = Schema::new(vec![
            Field::new("x", LogicalType::Bool, true),
            Field::new("y", LogicalType::Utf8 { large: true }, false),
        ]);
        let text = codec::schema_to_json(&schema).unwrap();
        assert!(text.contains("\"x\"") && text.contains("\"y\""), "{text}");
        assert_eq!(codec::schema_from_json(&text).unwrap(), schema);
        assert!(codec::schema_from_json("{").is_err());
        let components = vec!["a".to_owned(), "b c".to_owned()];
        let text = codec::components_to_json(&components).unwrap();
        assert_eq!(text, r#"["a","b c"]"#);
        assert_eq!(codec::components_from_json(&text).unwrap(), components);
        assert_eq!(
            codec::components_from_json("[]").unwrap(),
            Vec::<String>::new()
        );
        assert!(matches!(
            codec::components_from_json("{}"),
            Err(WorldError::Invalid {
                what: "components",
                ..
            })
        ));
    }

    #[test]
    fn registration_is_idempotent_and_identity_is_immutable() {
        let r = rec(WriterMode::CleanupOnly);
        let d = decide(&slot(None), &Request::Register { record: r.clone() }).unwrap();
        assert_eq!(d.outcome, Outcome::Registered { created: true });
        let again = decide(&d.next, &Request::Register { record: r.clone() }).unwrap();
        assert!(!again.changed);
        let mut other = r.clone();
        other.writer_mode = WriterMode::Resumable;
        let e = decide(&d.next, &Request::Register { record: other }).unwrap_err();
        assert_eq!(e.reason(), "CatalogConflict");
        let mut renamed = r;
        renamed.identity.run_id = Some("run-2".into());
        assert!(matches!(
            decide(&d.next, &Request::Register { record: renamed }),
            Err(WorldError::Conflict { .. })
        ));
    }

    #[test]
    fn the_four_retirement_cases() {
        let r = rec(WriterMode::CleanupOnly);
        let retire = Request::Retire {
            record: r.destroyed(),
        };
        // absent -> tombstone
        let t = decide(&slot(None), &retire).unwrap();
        assert_eq!(t.outcome, Outcome::Retired(Retirement::Tombstoned));
        assert_eq!(t.next.record, Some(r.destroyed()));
        // exact active -> destroyed
        let d = decide(&slot(Some(r.clone())), &retire).unwrap();
        assert_eq!(d.outcome, Outcome::Retired(Retirement::Destroyed));
        // exact destroyed -> idempotent
        let i = decide(&d.next, &retire).unwrap();
        assert_eq!(i.outcome, Outcome::Retired(Retirement::AlreadyDestroyed));
        assert!(!i.changed);
        // different identity -> conflict, no mutation (a refusal carries no state)
        let mut other = r.destroyed();
        other.identity.name = "someone else".into();
        assert_eq!(
            decide(&slot(Some(r)), &Request::Retire { record: other })
                .unwrap_err()
                .reason(),
            "CatalogConflict"
        );
    }

    #[test]
    fn a_retirement_keeps_the_higher_tick_head() {
        for (stored_head, asked_head) in [(3u64, 7u64), (9, 7)] {
            let mut stored = rec(WriterMode::CleanupOnly);
            stored.tick_head = stored_head;
            let mut asked = stored.destroyed();
            asked.tick_head = asked_head;
            let d = decide(&slot(Some(stored)), &Request::Retire { record: asked }).unwrap();
            let next = d.next.record.unwrap();
            assert_eq!(next.status, WorldStatus::Destroyed);
            assert_eq!(next.tick_head, stored_head.max(asked_head));
        }
    }

    #[test]
    fn a_conflict_names_what_differs() {
        let stored = rec(WriterMode::CleanupOnly);
        let mut mode = stored.clone();
        mode.writer_mode = WriterMode::Resumable;
        let mut named = stored.clone();
        named.identity.name = "someone else".into();
        let detail = |asked: &WorldRecord| match decide(
            &slot(Some(stored.clone())),
            &Request::Register {
                record: asked.clone(),
            },
        ) {
            Err(WorldError::Conflict { detail, .. }) => detail,
            other => panic!("{other:?}"),
        };
        assert!(detail(&mode).contains("writer mode"), "{}", detail(&mode));
        assert!(detail(&named).contains("identity"), "{}", detail(&named));
    }

    #[test]
    fn a_signature_is_checked_field_by_field() {
        let schema = Schema::new(vec![Field::new("x", LogicalType::Bool, true)]);
        let good = Signature::new(vec!["b".into(), "a".into()], schema, "t".repeat(MAX_ID_LEN));
        assert!(good.validate().is_ok(), "the longest table id is allowed");
        let what = |s: &Signature| match s.validate() {
            Err(WorldError::Invalid { what, .. }) => what,
            other => panic!("{other:?}"),
        };
        let mut s = good.clone();
        s.table_id = String::new();
        assert_eq!(what(&s), "table_id");
        s.table_id = "t".repeat(MAX_ID_LEN + 1);
        assert_eq!(what(&s), "table_id");
        let mut s = good.clone();
        s.components = vec![];
        assert_eq!(what(&s), "components");
        s.components = vec!["b".into(), "a".into()];
        assert_eq!(what(&s), "components");
        s.components = vec!["a".into(), "a".into()];
        assert_eq!(what(&s), "components");
        s.components = vec!["a".into()];
        assert!(s.validate().is_ok(), "one component is enough");
        let mut s = good;
        s.fingerprint = "0".repeat(s.fingerprint.len());
        assert_eq!(what(&s), "fingerprint");
    }

    #[test]
    fn destroyed_is_monotonic() {
        let r = rec(WriterMode::CleanupOnly);
        let tomb = slot(Some(r.destroyed()));
        assert!(matches!(
            decide(&tomb, &Request::Register { record: r.clone() }),
            Err(WorldError::Destroyed { .. })
        ));
        assert!(decide(
            &tomb,
            &Request::AdvanceTick {
                world_id: "w1".into(),
                tick: 3
            }
        )
        .is_err());
        assert!(decide(
            &slot(None),
            &Request::Register {
                record: r.destroyed()
            }
        )
        .is_err());
    }

    #[test]
    fn tick_head_is_monotonic_and_advisory() {
        let s = slot(Some(rec(WriterMode::Resumable)));
        let tick = |s: &WorldSlot, t| {
            decide(
                s,
                &Request::AdvanceTick {
                    world_id: "w1".into(),
                    tick: t,
                },
            )
        };
        let s = tick(&s, 5).unwrap().next;
        let d = tick(&s, 3).unwrap();
        assert_eq!(d.outcome, Outcome::TickAdvanced { head: 5 });
        assert!(!d.changed);
        assert_eq!(tick(&slot(None), 1).unwrap_err().reason(), "NotFound");
    }

    #[test]
    fn mutable_resume_fails_closed_for_cleanup_only_and_unknown() {
        assert!(check_mutable_resume(&rec(WriterMode::Resumable)).is_ok());
        assert_eq!(
            check_mutable_resume(&rec(WriterMode::CleanupOnly))
                .unwrap_err()
                .reason(),
            "ResumeRefused"
        );
        assert_eq!(
            check_mutable_resume(&rec(WriterMode::parse(Some("v9-future"))))
                .unwrap_err()
                .reason(),
            "ResumeRefused"
        );
        assert!(check_mutable_resume(&rec(WriterMode::Resumable).destroyed()).is_err());
        assert_eq!(WriterMode::parse(None), WriterMode::Resumable);
        assert_eq!(WriterMode::parse(Some("v9-future")).as_str(), "v9-future");
    }

    fn acquire(s: &WorldSlot, purpose: FencePurpose) -> Result<Decision, WorldError> {
        decide(
            s,
            &Request::AcquireFence {
                world_id: "w1".into(),
                holder: Holder::new("writer").unwrap(),
                purpose,
            },
        )
    }

    fn commit(s: &WorldSlot, epoch: Epoch, tick: u64) -> Result<Decision, WorldError> {
        decide(
            s,
            &Request::CommitTick {
                world_id: "w1".into(),
                epoch,
                tick,
            },
        )
    }

    #[test]
    fn a_resume_acquires_a_higher_epoch_and_stales_the_previous_writer() {
        let s = slot(Some(rec(WriterMode::Resumable)));
        let first = acquire(&s, FencePurpose::Resume).unwrap();
        assert_eq!(
            first.outcome,
            Outcome::FenceAcquired {
                epoch: 1,
                staled: None
            }
        );
        let s = commit(&first.next, 1, 5).unwrap().next;
        assert_eq!(s.record.as_ref().unwrap().tick_head, 5);
        let second = acquire(&s, FencePurpose::Migration).unwrap();
        assert_eq!(
            second.outcome,
            Outcome::FenceAcquired {
                epoch: 2,
                staled: Some(1)
            }
        );
        let e = commit(&second.next, 1, 6).unwrap_err();
        assert_eq!(e.reason(), "StaleFence");
        assert!(e.to_string().contains("world w1"), "{e}");
        // An unfenced tick on a fenced world is stale too.
        let e = decide(
            &second.next,
            &Request::AdvanceTick {
                world_id: "w1".into(),
                tick: 9,
            },
        )
        .unwrap_err();
        assert_eq!(e.reason(), "StaleFence");
        assert_eq!(
            commit(&second.next, 2, 6).unwrap().outcome,
            Outcome::TickAdvanced { head: 6 }
        );
    }

    #[test]
    fn a_resume_of_a_cleanup_only_unknown_or_destroyed_world_fences_nothing() {
        for r in [
            rec(WriterMode::CleanupOnly),
            rec(WriterMode::parse(Some("v9-future"))),
            rec(WriterMode::Resumable).destroyed(),
        ] {
            let s = slot(Some(r));
            let e = acquire(&s, FencePurpose::Resume).unwrap_err();
            assert!(
                matches!(e.reason(), "ResumeRefused" | "CatalogConflict"),
                "{e}"
            );
        }
        // A migration fences an active cleanup-only world, not a destroyed one.
        assert!(acquire(
            &slot(Some(rec(WriterMode::CleanupOnly))),
            FencePurpose::Migration
        )
        .is_ok());
        assert!(acquire(
            &slot(Some(rec(WriterMode::CleanupOnly).destroyed())),
            FencePurpose::Migration
        )
        .is_err());
        assert_eq!(
            acquire(&slot(None), FencePurpose::Migration)
                .unwrap_err()
                .reason(),
            "NotFound"
        );
    }

    #[test]
    fn fence_exhaustion_is_typed_and_names_the_world() {
        let mut s = slot(Some(rec(WriterMode::Resumable)));
        s.fence.issued = u64::MAX;
        let e = acquire(&s, FencePurpose::Resume).unwrap_err();
        assert_eq!(e.reason(), "FenceExhausted");
        assert!(e.to_string().contains("world w1"));
    }

    #[test]
    fn signatures_are_immutable_and_fingerprinted() {
        let s = slot(Some(rec(WriterMode::Resumable)));
        let schema = Schema::new(vec![Field::new("x", LogicalType::Bool, true)]);
        let sig = Signature::new(vec!["Pos".into()], schema.clone(), "t1");
        let req = |sig: Signature| Request::RegisterSignature {
            world_id: "w1".into(),
            signature: sig,
        };
        let s = decide(&s, &req(sig.clone())).unwrap().next;
        assert!(!decide(&s, &req(sig.clone())).unwrap().changed);
        let other = Signature::new(vec!["Vel".into()], schema, "t1");
        assert_eq!(
            decide(&s, &req(other)).unwrap_err().reason(),
            "CatalogConflict"
        );
        let mut forged = sig;
        forged.table_id = "t2".into();
        forged.fingerprint = "00".into();
        assert_eq!(decide(&s, &req(forged)).unwrap_err().reason(), "Invalid");
    }

    #[test]
    fn the_memory_catalog_lists_every_signature_of_every_world() {
        let c = crate::control_memory::MemoryControlCatalog::new();
        assert!(c.list_signatures().unwrap().is_empty());
        let schema = Schema::new(vec![Field::new("x", LogicalType::Bool, true)]);
        let mut want = Vec::new();
        for (world, tables) in [("w1", &["t1", "t2"][..]), ("w2", &["t3"][..])] {
            c.register(&WorldRecord::active(
                WorldIdentity::new(world, "a world"),
                WriterMode::Resumable,
            ))
            .unwrap();
            for t in tables {
                let sig = Signature::new(vec!["Pos".into()], schema.clone(), *t);
                c.apply(&Request::RegisterSignature {
                    world_id: world.into(),
                    signature: sig.clone(),
                })
                .unwrap();
                want.push(SignatureRecord {
                    world_id: world.into(),
                    signature: sig,
                });
            }
        }
        assert_eq!(c.list_signatures().unwrap(), want);
    }
}
