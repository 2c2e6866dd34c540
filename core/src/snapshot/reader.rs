//! [`Reader`]: the snapshot rules of [`rules`](super::rules) wired to a
//! [`SnapshotSource`].

use std::collections::BTreeMap;

use super::rules::{
    check_cell, check_descriptors, check_header, check_headers, check_limit, check_step,
    lineage_walk, prefixed_field_key, validate_plan, Accountant, KeyRange,
};
use super::{
    CellHeader, Cut, CutView, Descriptor, DescriptorPage, Fragment, Head, KeyPage, Limits, Plan,
    Reference, Selection, SnapshotError, SnapshotSource,
};
use crate::storage::{KeyPrefix, Namespace, RecordId, Register, RegisterKey, Seq};

/// How many keys one [`CutView::cells`] call names.
const CELLS_CHUNK: usize = 128;

/// The snapshot reader over a [`SnapshotSource`]: every bound and rule of
/// the module docs, applied to the steps the source supplies. Holds no
/// state between calls but its limits.
#[derive(Debug)]
pub struct Reader<'s, S: ?Sized> {
    source: &'s S,
    limits: Limits,
}

type Chosen = BTreeMap<(Namespace, RegisterKey), CellHeader>;

impl<'s, S: SnapshotSource + ?Sized> Reader<'s, S> {
    /// A reader with the standard limits ([`Limits::STANDARD`]).
    pub fn new(source: &'s S) -> Self {
        Reader {
            source,
            limits: Limits::STANDARD,
        }
    }

    /// A reader with tighter limits; looser ones are
    /// [`SnapshotError::LimitsAboveStandard`].
    pub fn with_limits(source: &'s S, limits: Limits) -> Result<Self, SnapshotError> {
        if !limits.within_standard() {
            return Err(SnapshotError::LimitsAboveStandard);
        }
        Ok(Reader { source, limits })
    }

    /// The reader's limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Captures one coherent [`Cut`]: the high-water, the stats and every
    /// cell the plan selects or references, each accounted from its header
    /// before any value is fetched (over budget is refused, not truncated).
    pub fn capture(&self, plan: &Plan) -> Result<Cut, SnapshotError> {
        validate_plan(plan)?;
        let limits = self.limits;
        self.source.with_cut(|view| capture_in(view, plan, &limits))
    }

    /// At most `limit` (≤ the page limit) cells of `namespace` whose keys
    /// start with `prefix`, ascending, strictly after the cursor `after`
    /// (which need not exist): a fresh coherent cut, its headers accounted
    /// against the capture byte budget before values are copied.
    pub fn key_page(
        &self,
        namespace: &Namespace,
        prefix: &KeyPrefix,
        after: Option<&RegisterKey>,
        limit: usize,
    ) -> Result<KeyPage, SnapshotError> {
        check_limit("key page", limit, self.limits.page)?;
        let range = KeyRange::prefix_after(prefix, after);
        let limits = self.limits;
        self.source.with_cut(|view| {
            let head = view.head()?;
            if range.is_empty() {
                return Ok(KeyPage {
                    high_water: head.next_seq,
                    cells: Vec::new(),
                    next: None,
                });
            }
            let mut headers = view.headers(namespace, &range, limit + 1)?;
            check_headers(&headers, &range, limit + 1, head.next_seq)?;
            let more = headers.len() > limit;
            headers.truncate(limit);
            let mut acct = Accountant::capture(&limits);
            let mut chosen = Chosen::new();
            for h in headers {
                acct.admit(namespace, &h)?;
                chosen.insert((namespace.clone(), h.key.clone()), h);
            }
            let cells = fetch(view, &chosen, BTreeMap::new())?;
            let next = if more {
                cells.last().map(|c| c.key.clone())
            } else {
                None
            };
            Ok(KeyPage {
                high_water: head.next_seq,
                cells,
                next,
            })
        })
    }

    /// At most `limit` (≤ the page limit) entry descriptors with
    /// `after < seq < high_water`, ascending: write-once rows below a cut,
    /// read with no transaction retained.
    pub fn descriptors(
        &self,
        high_water: Seq,
        after: Option<Seq>,
        limit: usize,
    ) -> Result<DescriptorPage, SnapshotError> {
        check_limit("descriptor page", limit, self.limits.page)?;
        let mut page = self.source.descriptors(after, high_water, limit + 1)?;
        check_descriptors(&page, after, high_water, limit + 1)?;
        let more = page.len() > limit;
        page.truncate(limit);
        let next = if more {
            page.last().map(|d| d.seq)
        } else {
            None
        };
        Ok(DescriptorPage {
            descriptors: page,
            next,
        })
    }

    /// At most `len` (≤ the fragment bound) bytes of entry `id`'s payload
    /// from `offset`, the entry below `high_water`. A record above the
    /// record bound is refused from its descriptor, before any payload
    /// byte is fetched.
    pub fn fragment(
        &self,
        high_water: Seq,
        id: &RecordId,
        offset: u64,
        len: usize,
    ) -> Result<Fragment, SnapshotError> {
        if len > self.limits.fragment_bytes {
            return Err(SnapshotError::FragmentTooLarge {
                len,
                limit: self.limits.fragment_bytes,
            });
        }
        let head =
            self.source
                .entry_head(id, high_water)?
                .ok_or_else(|| SnapshotError::UnknownEntry {
                    id: id.clone(),
                    below: high_water,
                })?;
        check_step(&head, id, high_water)?;
        if head.size > self.limits.record_bytes {
            return Err(SnapshotError::RecordTooLarge {
                id: id.clone(),
                size: head.size,
                limit: self.limits.record_bytes,
            });
        }
        if offset > head.size {
            return Err(SnapshotError::OffsetOutOfRange {
                id: id.clone(),
                offset,
                size: head.size,
            });
        }
        let rest = head.size - offset;
        let n = usize::try_from(rest).map_or(len, |r| r.min(len));
        let bytes = if n == 0 {
            Vec::new()
        } else {
            self.source.fragment_bytes(&head, offset, n)?
        };
        if bytes.len() != n {
            return Err(SnapshotError::BackendViolation {
                detail: format!(
                    "a fragment of {id} at {offset} answered {} bytes for {n}",
                    bytes.len()
                ),
            });
        }
        Ok(Fragment {
            id: id.clone(),
            offset,
            size: head.size,
            bytes,
        })
    }

    /// Entry `from`'s ancestry below the exclusive `before_seq`, ascending
    /// (see [`lineage_walk`]): at most `limit` (≤ the page limit) records
    /// and the lineage byte bound past the first, one probe per step.
    pub fn lineage(
        &self,
        from: &RecordId,
        before_seq: Seq,
        limit: usize,
    ) -> Result<Vec<Descriptor>, SnapshotError> {
        lineage_walk(from, before_seq, limit, &self.limits, |id, below| {
            Ok(self.source.entry_head(id, below)?)
        })
    }
}

/// The capture body, inside one cut.
fn capture_in(view: &dyn CutView, plan: &Plan, limits: &Limits) -> Result<Cut, SnapshotError> {
    let head = view.head()?;
    let mut acct = Accountant::capture(limits);
    let mut chosen = Chosen::new();
    for sel in &plan.selections {
        match sel {
            Selection::Namespace(ns) => {
                select_window(view, ns, KeyRange::all(), head, &mut acct, &mut chosen)?;
            }
            Selection::Prefix(ns, p) => {
                select_window(view, ns, KeyRange::prefix(p), head, &mut acct, &mut chosen)?;
            }
            Selection::ExactKey(ns, k) => select_exact(view, ns, k, head, &mut acct, &mut chosen)?,
        }
    }
    let mut fetched = BTreeMap::new();
    for r in &plan.references {
        let Reference::OptionalPrefixedField {
            source,
            field,
            namespace,
            prefix,
        } = r;
        let Some(Selection::ExactKey(sns, skey)) = plan.selections.get(*source) else {
            continue; // validate_plan refused it already
        };
        let at = (sns.clone(), skey.clone());
        let Some(h) = chosen.get(&at) else {
            continue; // a missing source is omitted, and so is what it names
        };
        let cell = match fetched.get(&at) {
            Some(c) => Clone::clone(c),
            None => {
                let c = view
                    .cells(sns, std::slice::from_ref(skey))?
                    .into_iter()
                    .next()
                    .flatten();
                check_cell(c.as_ref(), sns, h)?;
                let Some(c) = c else { continue };
                fetched.insert(at, c.clone());
                c
            }
        };
        if let Some(target) = prefixed_field_key(&cell, field, prefix)? {
            select_exact(view, namespace, &target, head, &mut acct, &mut chosen)?;
        }
    }
    let cells = fetch(view, &chosen, fetched)?;
    Ok(Cut {
        high_water: head.next_seq,
        stats: head.stats,
        cells,
        cost: acct.spent(),
    })
}

fn admit_once(
    ns: &Namespace,
    h: CellHeader,
    acct: &mut Accountant,
    chosen: &mut Chosen,
) -> Result<(), SnapshotError> {
    let at = (ns.clone(), h.key.clone());
    if chosen.contains_key(&at) {
        return Ok(());
    }
    acct.admit(ns, &h)?;
    chosen.insert(at, h);
    Ok(())
}

fn select_exact(
    view: &dyn CutView,
    ns: &Namespace,
    key: &RegisterKey,
    head: Head,
    acct: &mut Accountant,
    chosen: &mut Chosen,
) -> Result<(), SnapshotError> {
    if let Some(h) = view.header(ns, key)? {
        check_header(&h, key, head.next_seq)?;
        admit_once(ns, h, acct, chosen)?;
    }
    Ok(())
}

/// Admits a window's headers, asking each time for one more header than
/// the budget still admits; continues past headers an earlier selection
/// already admitted, so overlap neither double-counts nor hides a cell.
fn select_window(
    view: &dyn CutView,
    ns: &Namespace,
    mut range: KeyRange,
    head: Head,
    acct: &mut Accountant,
    chosen: &mut Chosen,
) -> Result<(), SnapshotError> {
    while !range.is_empty() {
        let limit = acct.window();
        let headers = view.headers(ns, &range, limit)?;
        check_headers(&headers, &range, limit, head.next_seq)?;
        let full = headers.len() == limit;
        let last = headers.last().map(|h| h.key.as_str().to_owned());
        for h in headers {
            admit_once(ns, h, acct, chosen)?;
        }
        match (full, last) {
            (true, Some(last)) => {
                range.start = last;
                range.start_inclusive = false;
            }
            _ => break,
        }
    }
    Ok(())
}

/// Fetches the values of every chosen cell (those not fetched already) and
/// checks each against its header.
fn fetch(
    view: &dyn CutView,
    chosen: &Chosen,
    mut fetched: BTreeMap<(Namespace, RegisterKey), Register>,
) -> Result<Vec<Register>, SnapshotError> {
    let mut by_ns: BTreeMap<&Namespace, Vec<&CellHeader>> = BTreeMap::new();
    for ((ns, key), h) in chosen {
        if !fetched.contains_key(&(ns.clone(), key.clone())) {
            by_ns.entry(ns).or_default().push(h);
        }
    }
    for (ns, headers) in by_ns {
        for chunk in headers.chunks(CELLS_CHUNK) {
            let keys: Vec<RegisterKey> = chunk.iter().map(|h| h.key.clone()).collect();
            let cells = view.cells(ns, &keys)?;
            if cells.len() != keys.len() {
                return Err(SnapshotError::BackendViolation {
                    detail: format!(
                        "a cell lookup answered {} cells for {} keys",
                        cells.len(),
                        keys.len()
                    ),
                });
            }
            for (h, c) in chunk.iter().zip(cells) {
                check_cell(c.as_ref(), ns, h)?;
                if let Some(c) = c {
                    fetched.insert((ns.clone(), h.key.clone()), c);
                }
            }
        }
    }
    Ok(chosen.keys().filter_map(|at| fetched.remove(at)).collect())
}
