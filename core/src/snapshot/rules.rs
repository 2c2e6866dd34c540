//! The snapshot rules as pure functions: key windows, plan validation,
//! budget accounting, answer checks and the lineage walk.
//! [`Reader`](crate::snapshot::Reader) is these wired to a
//! [`SnapshotSource`](crate::snapshot::SnapshotSource); nothing here does
//! I/O.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use super::{
    Budget, CellHeader, Descriptor, Limits, Plan, Reference, Selection, SnapshotError,
    MAX_FIELD_LEN, MAX_REFERENCES, MAX_SELECTIONS,
};
use crate::storage::{KeyPrefix, Namespace, RecordId, Register, RegisterKey, Seq};

/// The smallest string above every string that starts with `prefix`
/// (code-point order, which is UTF-8 byte order), or `None` when there is
/// none: the empty prefix, or one of `char::MAX`s only. The last character
/// that can be incremented is, and everything after it dropped.
pub fn successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(n) = next {
            chars.push(n);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// A key window of one namespace: `start` (inclusive or exclusive) up to
/// the exclusive `end` (`None`: open above). What a backend turns into
/// `key >= start` / `key > start` and `key < end` on its `(namespace, key)`
/// index.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyRange {
    /// The lower bound (`""` inclusive: from the first key).
    pub start: String,
    /// Whether `start` itself is inside.
    pub start_inclusive: bool,
    /// The exclusive upper bound; `None` is open above.
    pub end: Option<String>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> Self {
        KeyRange {
            start: String::new(),
            start_inclusive: true,
            end: None,
        }
    }

    /// The keys starting with `prefix`: `[prefix, successor(prefix))`.
    pub fn prefix(prefix: &KeyPrefix) -> Self {
        KeyRange {
            start: prefix.as_str().to_owned(),
            start_inclusive: true,
            end: successor(prefix.as_str()),
        }
    }

    /// The keys starting with `prefix` strictly after the cursor `after`
    /// (which need not exist, nor start with the prefix): the window's
    /// start is whichever of the prefix and the cursor is higher.
    pub fn prefix_after(prefix: &KeyPrefix, after: Option<&RegisterKey>) -> Self {
        let mut r = KeyRange::prefix(prefix);
        if let Some(a) = after {
            if a.as_str() >= prefix.as_str() {
                r.start = a.as_str().to_owned();
                r.start_inclusive = false;
            }
        }
        r
    }

    /// Whether the window holds nothing (its start is at or above its end).
    pub fn is_empty(&self) -> bool {
        self.end
            .as_deref()
            .is_some_and(|e| match self.start.as_str().cmp(e) {
                Ordering::Less => false,
                Ordering::Equal | Ordering::Greater => true,
            })
    }

    /// Whether `key` lies inside.
    pub fn contains(&self, key: &str) -> bool {
        let above = match key.cmp(self.start.as_str()) {
            Ordering::Greater => true,
            Ordering::Equal => self.start_inclusive,
            Ordering::Less => false,
        };
        above && self.end.as_deref().is_none_or(|e| key < e)
    }
}

/// Checks a plan's shape: at most [`MAX_SELECTIONS`] selections and
/// [`MAX_REFERENCES`] references, each reference's source an exact
/// selection, each field 1..=[`MAX_FIELD_LEN`] bytes.
pub fn validate_plan(plan: &Plan) -> Result<(), SnapshotError> {
    let invalid = |detail: String| Err(SnapshotError::InvalidPlan { detail });
    if plan.selections.len() > MAX_SELECTIONS {
        return invalid(format!(
            "{} selections (at most {MAX_SELECTIONS})",
            plan.selections.len()
        ));
    }
    if plan.references.len() > MAX_REFERENCES {
        return invalid(format!(
            "{} references (at most {MAX_REFERENCES})",
            plan.references.len()
        ));
    }
    for (i, r) in plan.references.iter().enumerate() {
        let Reference::OptionalPrefixedField { source, field, .. } = r;
        match plan.selections.get(*source) {
            Some(Selection::ExactKey(..)) => {}
            Some(_) => {
                return invalid(format!(
                    "reference {i}: selection {source} is not an exact key"
                ))
            }
            None => return invalid(format!("reference {i}: no selection {source}")),
        }
        if field.is_empty() || field.len() > MAX_FIELD_LEN {
            return invalid(format!(
                "reference {i}: a field name is 1..={MAX_FIELD_LEN} bytes (got {})",
                field.len()
            ));
        }
    }
    Ok(())
}

/// The cost of one cell: its namespace, key and value lengths.
pub fn cell_cost(namespace: &Namespace, header: &CellHeader) -> u64 {
    let ids = namespace.as_str().len() + header.key.as_str().len();
    u64::try_from(ids)
        .unwrap_or(u64::MAX)
        .saturating_add(header.size)
}

/// Budget accounting: cells are admitted from their headers, before any
/// value is fetched; passing a limit is [`SnapshotError::OverBudget`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accountant {
    spent: Budget,
    limit: Budget,
}

impl Accountant {
    /// An accountant with nothing spent.
    pub fn new(limit: Budget) -> Self {
        Accountant {
            spent: Budget::default(),
            limit,
        }
    }

    /// The limit of a capture under `limits`.
    pub fn capture(limits: &Limits) -> Self {
        Accountant::new(Budget {
            cells: limits.capture_cells,
            bytes: limits.capture_bytes,
        })
    }

    /// What has been admitted.
    pub fn spent(&self) -> Budget {
        self.spent
    }

    /// How many more headers a window may answer for the accountant to see
    /// an overflow: the cells still admitted, plus one.
    pub fn window(&self) -> usize {
        self.limit
            .cells
            .saturating_sub(self.spent.cells)
            .saturating_add(1)
    }

    /// Admits one cell.
    pub fn admit(
        &mut self,
        namespace: &Namespace,
        header: &CellHeader,
    ) -> Result<(), SnapshotError> {
        let cells = self.spent.cells.saturating_add(1);
        let bytes = self
            .spent
            .bytes
            .saturating_add(cell_cost(namespace, header));
        if cells > self.limit.cells || bytes > self.limit.bytes {
            return Err(SnapshotError::OverBudget {
                cells,
                bytes,
                limit: self.limit,
            });
        }
        self.spent = Budget { cells, bytes };
        Ok(())
    }
}

fn violation(detail: String) -> SnapshotError {
    SnapshotError::BackendViolation { detail }
}

/// Checks a page or lineage limit: `1..=max`.
pub fn check_limit(what: &str, limit: usize, max: usize) -> Result<(), SnapshotError> {
    if limit == 0 || limit > max {
        return Err(SnapshotError::LimitOutOfRange {
            what: what.to_owned(),
            limit,
            max,
        });
    }
    Ok(())
}

/// Checks a header window's answer: at most `limit`, strictly ascending,
/// every key inside `range`, every seq below `high_water`.
pub fn check_headers(
    headers: &[CellHeader],
    range: &KeyRange,
    limit: usize,
    high_water: Seq,
) -> Result<(), SnapshotError> {
    if headers.len() > limit {
        return Err(violation(format!(
            "a header window answered {} headers for a limit of {limit}",
            headers.len()
        )));
    }
    for (i, h) in headers.iter().enumerate() {
        if !range.contains(h.key.as_str()) {
            return Err(violation(format!(
                "header {} lies outside the window {range:?}",
                h.key
            )));
        }
        if i > 0 && headers[i - 1].key >= h.key {
            return Err(violation(format!("headers out of order at {}", h.key)));
        }
        check_below("register", h.key.as_str(), h.seq, high_water)?;
    }
    Ok(())
}

/// Checks an exact header's answer: its key is the asked one, its seq
/// below the cut.
pub fn check_header(
    header: &CellHeader,
    key: &RegisterKey,
    high_water: Seq,
) -> Result<(), SnapshotError> {
    if &header.key != key {
        return Err(violation(format!(
            "an exact lookup of {key} answered {}",
            header.key
        )));
    }
    check_below("register", key.as_str(), header.seq, high_water)
}

fn check_below(what: &str, name: &str, seq: Seq, high_water: Seq) -> Result<(), SnapshotError> {
    if seq >= high_water {
        return Err(violation(format!(
            "{what} {name} carries seq {seq}, at or above the cut's high-water {high_water}"
        )));
    }
    Ok(())
}

/// Checks a fetched cell against its accounted header (same key, seq and
/// length: the cut is coherent).
pub fn check_cell(
    cell: Option<&Register>,
    namespace: &Namespace,
    header: &CellHeader,
) -> Result<(), SnapshotError> {
    let Some(cell) = cell else {
        return Err(violation(format!(
            "cell {namespace}/{} vanished inside its cut",
            header.key
        )));
    };
    let len = u64::try_from(cell.value.len()).unwrap_or(u64::MAX);
    if &cell.namespace != namespace
        || cell.key != header.key
        || cell.seq != header.seq
        || len != header.size
    {
        return Err(violation(format!(
            "cell {namespace}/{} differs from its header (seq {} vs {}, {len} vs {} bytes)",
            header.key, cell.seq, header.seq, header.size
        )));
    }
    Ok(())
}

/// Checks a descriptor page's answer: at most `limit`, strictly ascending,
/// every seq in `after < seq < below`.
pub fn check_descriptors(
    page: &[Descriptor],
    after: Option<Seq>,
    below: Seq,
    limit: usize,
) -> Result<(), SnapshotError> {
    if page.len() > limit {
        return Err(violation(format!(
            "a descriptor page answered {} descriptors for a limit of {limit}",
            page.len()
        )));
    }
    for (i, d) in page.iter().enumerate() {
        check_below("entry", d.id.as_str(), d.seq, below)?;
        if after.is_some_and(|a| d.seq <= a) {
            return Err(violation(format!(
                "entry {} (seq {}) is not after the cursor {after:?}",
                d.id, d.seq
            )));
        }
        if i > 0 && page[i - 1].seq >= d.seq {
            return Err(violation(format!("descriptors out of order at {}", d.id)));
        }
    }
    Ok(())
}

/// Checks one lineage step's answer: the asked id, below the asked seq.
pub fn check_step(d: &Descriptor, id: &RecordId, below: Seq) -> Result<(), SnapshotError> {
    if &d.id != id {
        return Err(violation(format!(
            "a probe of entry {id} answered {}",
            d.id
        )));
    }
    check_below("entry", id.as_str(), d.seq, below)
}

/// Makes the target key of an `OptionalPrefixedField` from the source
/// cell's value: `Ok(None)` when the field is missing or `null`.
pub fn prefixed_field_key(
    source: &Register,
    field: &str,
    prefix: &KeyPrefix,
) -> Result<Option<RegisterKey>, SnapshotError> {
    let malformed = |detail: String| SnapshotError::MalformedReference {
        namespace: source.namespace.clone(),
        key: source.key.clone(),
        field: field.to_owned(),
        detail,
    };
    let value: serde_json::Value = serde_json::from_slice(source.value.as_bytes())
        .map_err(|e| malformed(format!("the value is not JSON: {e}")))?;
    let serde_json::Value::Object(map) = value else {
        return Err(malformed("the value is not a JSON object".to_owned()));
    };
    match map.get(field) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => {
            let key = format!("{}{s}", prefix.as_str());
            RegisterKey::new(key)
                .map(Some)
                .map_err(|e| malformed(format!("the target makes no key: {e}")))
        }
        Some(_) => Err(malformed("the field is not a string or null".to_owned())),
    }
}

/// The lineage walk: `from` (below `before_seq`; absent is
/// [`SnapshotError::UnknownEntry`]) and its ancestors by parent link, at
/// most `limit` records and at most `limits.lineage_bytes` of payload past
/// the first record (which is always returned), answered ascending by seq.
///
/// `step(id, below)` is one probe: the entry `id` if its seq is below
/// `below`. Each step asks below the seq of the entry before, so the seqs
/// strictly decrease and the walk ends — at a root, at a parent the store
/// lacks, or at a corrupt link (a parent at or above its child) — whatever
/// the store holds. At most `limit` probes are made.
pub fn lineage_walk(
    from: &RecordId,
    before_seq: Seq,
    limit: usize,
    limits: &Limits,
    mut step: impl FnMut(&RecordId, Seq) -> Result<Option<Descriptor>, SnapshotError>,
) -> Result<Vec<Descriptor>, SnapshotError> {
    check_limit("lineage", limit, limits.page)?;
    let first = step(from, before_seq)?.ok_or_else(|| SnapshotError::UnknownEntry {
        id: from.clone(),
        below: before_seq,
    })?;
    check_step(&first, from, before_seq)?;
    let mut out = vec![first];
    let mut bytes: u64 = 0;
    while out.len() < limit {
        let Some(current) = out.last() else { break };
        let Some(parent) = current.parent.clone() else {
            break;
        };
        let below = current.seq;
        let Some(next) = step(&parent, below)? else {
            break;
        };
        check_step(&next, &parent, below)?;
        let total = bytes.saturating_add(next.size);
        if total > limits.lineage_bytes {
            break;
        }
        bytes = total;
        out.push(next);
    }
    out.reverse();
    Ok(out)
}
