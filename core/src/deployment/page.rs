//! Bounded tenant and service pages.
//!
//! A [`PageIndex`] is built once per catalog generation: the ids of each
//! tenant, and of each (tenant, service), in ascending order, with each
//! record's encoded size (`{"manifest":<canonical>,"generation":<u64>}`)
//! computed at build time. [`page`] selects from one scope's slice only:
//! it inspects at most the returned records plus one lookahead, clones only
//! the returned manifests, and charges the byte budget on the cached sizes
//! before cloning.
//!
//! A token is [`TOKEN_LEN`] lowercase hex characters: version, the
//! per-open instance fingerprint, the catalog generation, a scope tag, the
//! position to continue at and a tag of the last returned id. Its raw
//! length is checked against [`MAX_TOKEN_BYTES`] before any parsing. A
//! token from an older generation of this instance is
//! [`DeploymentError::PageTokenExpired`]; anything else wrong (damaged,
//! other scope, other instance, future generation, moved position) is
//! [`DeploymentError::PageToken`]. Every check precedes record selection.
//!
//! A token never outlives its open. A caller that opens the catalog anew
//! for every page (a command line) continues with a [`Cursor`] instead
//! ([`page_by_cursor`]): the last id and a tag of the catalog's content at
//! its generation, expired by any publication as a token is.

use serde::Serialize;

use super::manifest::{check_identifier, MAX_IDENTIFIER_BYTES};
use super::state::{Catalog, VersionedDeployment};
use super::DeploymentError;
use crate::release::Sha256;

/// The largest page size (the repository's default `max_page_size`).
pub const MAX_PAGE_SIZE: u32 = 1000;
/// The default record-byte budget of one page.
pub const MAX_PAGE_BYTES: u64 = 4 * 1024 * 1024;
/// The raw token bound, checked before parsing: 64 + 6 × the identifier
/// bound (6,208 bytes).
pub const MAX_TOKEN_BYTES: usize = 64 + 6 * MAX_IDENTIFIER_BYTES;

const TOKEN_VERSION: u8 = 1;
const RAW_LEN: usize = 1 + 8 + 8 + 8 + 8 + 8;
/// The length of every token's text.
pub const TOKEN_LEN: usize = 2 * RAW_LEN;

/// One page request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct PageRequest {
    /// The authenticated tenant.
    pub tenant: String,
    /// The service, to narrow the listing.
    pub service: Option<String>,
    /// Records wanted, 1..=[`MAX_PAGE_SIZE`].
    pub page_size: u32,
    /// The continuation token of the previous page.
    pub page_token: Option<String>,
}

/// One page.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Page {
    /// The records, in ascending id order.
    pub deployments: Vec<VersionedDeployment>,
    /// The token of the next page, if more records follow.
    pub next_page_token: Option<String>,
    /// The catalog generation read.
    pub catalog_generation: u64,
}

/// An index entry: the scope key, the id and the record's encoded size.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Entry {
    tenant: String,
    service: Option<String>,
    id: String,
    size: u64,
}

/// The ordered page indexes of one catalog generation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PageIndex {
    generation: u64,
    /// A tag of the catalog's content at this generation (every record's
    /// canonical bytes and object generation, in id order): what a
    /// [`Cursor`] names so that it continues only the catalog that issued
    /// it.
    content: [u8; 8],
    by_tenant: Vec<Entry>,
    by_service: Vec<Entry>,
}

/// The encoded size of `{"manifest":<canonical>,"generation":<g>}`.
pub fn record_size(d: &VersionedDeployment) -> u64 {
    sized(d.manifest.canonical().len(), d.generation)
}

fn sized(canonical_len: usize, generation: u64) -> u64 {
    let digits = generation.to_string().len();
    (canonical_len + digits + r#"{"manifest":,"generation":}"#.len()) as u64
}

impl PageIndex {
    /// Builds the indexes of `catalog` (sizes computed here, once).
    pub fn build(catalog: &Catalog) -> Self {
        let mut content = Vec::new();
        content.extend_from_slice(&catalog.generation.to_be_bytes());
        let mut by_tenant: Vec<Entry> = Vec::with_capacity(catalog.objects.len());
        for d in catalog.objects.values() {
            let canonical = d.manifest.canonical();
            content.extend_from_slice(&(canonical.len() as u64).to_be_bytes());
            content.extend_from_slice(&canonical);
            content.extend_from_slice(&d.generation.to_be_bytes());
            by_tenant.push(Entry {
                tenant: d.manifest.tenant.clone(),
                service: Some(d.manifest.service.clone()),
                id: d.manifest.id.clone(),
                size: sized(canonical.len(), d.generation),
            });
        }
        let mut by_service = by_tenant.clone();
        by_service
            .sort_by(|a, b| (&a.tenant, &a.service, &a.id).cmp(&(&b.tenant, &b.service, &b.id)));
        for e in &mut by_tenant {
            e.service = None;
        }
        by_tenant.sort_by(|a, b| (&a.tenant, &a.id).cmp(&(&b.tenant, &b.id)));
        PageIndex {
            generation: catalog.generation,
            content: tag(&[&content]),
            by_tenant,
            by_service,
        }
    }

    /// The absolute range of one scope in its index.
    fn scope(&self, tenant: &str, service: Option<&str>) -> (&[Entry], usize) {
        let list = if service.is_some() {
            &self.by_service
        } else {
            &self.by_tenant
        };
        fn key(e: &Entry) -> (&str, Option<&str>) {
            (e.tenant.as_str(), e.service.as_deref())
        }
        let lo = list.partition_point(|e| key(e) < (tenant, service));
        let hi = list.partition_point(|e| key(e) <= (tenant, service));
        (list.get(lo..hi).unwrap_or(&[]), lo)
    }
}

fn tag(parts: &[&[u8]]) -> [u8; 8] {
    let mut text = Vec::new();
    for p in parts {
        text.extend_from_slice(&(p.len() as u64).to_be_bytes());
        text.extend_from_slice(p);
    }
    let d = Sha256::of(&text).0;
    let mut t = [0u8; 8];
    t.copy_from_slice(d.get(..8).unwrap_or(&[0; 8]));
    t
}

fn scope_tag(tenant: &str, service: Option<&str>) -> [u8; 8] {
    match service {
        Some(s) => tag(&[b"service", tenant.as_bytes(), s.as_bytes()]),
        None => tag(&[b"tenant", tenant.as_bytes()]),
    }
}

/// A decoded token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageToken {
    /// The issuing instance's fingerprint.
    pub instance: u64,
    /// The catalog generation of the page that issued it.
    pub generation: u64,
    /// The scope tag.
    pub scope: [u8; 8],
    /// The position (within the scope) to continue at.
    pub position: u64,
    /// A tag of the last returned id.
    pub last: [u8; 8],
}

impl PageToken {
    /// The token's text.
    pub fn encode(&self) -> String {
        let mut raw = Vec::with_capacity(RAW_LEN);
        raw.push(TOKEN_VERSION);
        raw.extend_from_slice(&self.instance.to_be_bytes());
        raw.extend_from_slice(&self.generation.to_be_bytes());
        raw.extend_from_slice(&self.scope);
        raw.extend_from_slice(&self.position.to_be_bytes());
        raw.extend_from_slice(&self.last);
        crate::hex::encode(raw)
    }

    /// Decodes a token's text. Total; the raw bound is checked first.
    pub fn decode(text: &str) -> Result<Self, DeploymentError> {
        let bytes = text.as_bytes();
        if bytes.len() > MAX_TOKEN_BYTES || bytes.len() != TOKEN_LEN {
            return Err(DeploymentError::PageToken);
        }
        let raw = crate::hex::decode::<RAW_LEN>(text).ok_or(DeploymentError::PageToken)?;
        if raw.first() != Some(&TOKEN_VERSION) {
            return Err(DeploymentError::PageToken);
        }
        let eight = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(raw.get(i..i + 8).unwrap_or(&[0; 8]));
            b
        };
        Ok(PageToken {
            instance: u64::from_be_bytes(eight(1)),
            generation: u64::from_be_bytes(eight(9)),
            scope: eight(17),
            position: u64::from_be_bytes(eight(25)),
            last: eight(33),
        })
    }
}

/// Checks a token against the scope, the instance and the index: the
/// position to continue at within the scope.
fn resume(
    text: &str,
    scope: &[Entry],
    scope_key: [u8; 8],
    instance: u64,
    generation: u64,
) -> Result<usize, DeploymentError> {
    let t = PageToken::decode(text)?;
    if t.instance != instance || t.scope != scope_key {
        return Err(DeploymentError::PageToken);
    }
    if t.generation < generation {
        return Err(DeploymentError::PageTokenExpired);
    }
    if t.generation > generation {
        return Err(DeploymentError::PageToken);
    }
    let pos = usize::try_from(t.position).map_err(|_| DeploymentError::PageToken)?;
    let last = pos
        .checked_sub(1)
        .and_then(|i| scope.get(i))
        .ok_or(DeploymentError::PageToken)?;
    if tag(&[last.id.as_bytes()]) != t.last {
        return Err(DeploymentError::PageToken);
    }
    Ok(pos)
}

/// The records of `scope` from position `start`: at most `page_size`,
/// within `max_bytes` (charged on the cached sizes before cloning), and
/// the position after the last one.
fn select(
    catalog: &Catalog,
    scope: &[Entry],
    start: usize,
    page_size: u32,
    max_bytes: u64,
) -> Result<(Vec<VersionedDeployment>, usize), DeploymentError> {
    let mut out = Vec::new();
    let mut used: u64 = 0;
    let mut pos = start;
    while let Some(e) = scope.get(pos) {
        if out.len() == usize::try_from(page_size).unwrap_or(usize::MAX) {
            break;
        }
        if used.saturating_add(e.size) > max_bytes {
            if out.is_empty() {
                return Err(DeploymentError::PageByteLimit {
                    len: e.size,
                    limit: max_bytes,
                });
            }
            break;
        }
        let d = catalog
            .objects
            .get(&e.id)
            .ok_or(DeploymentError::StaleSnapshot)?;
        used += e.size;
        out.push(d.clone());
        pos += 1;
    }
    Ok((out, pos))
}

/// The checks every page request passes first: the page size, the scope's
/// grammar, and an index of the catalog's own generation.
fn admit(catalog: &Catalog, index: &PageIndex, req: &PageRequest) -> Result<(), DeploymentError> {
    if req.page_size == 0 || req.page_size > MAX_PAGE_SIZE {
        return Err(DeploymentError::PageSize(req.page_size));
    }
    check_identifier("tenant", &req.tenant).map_err(|_| DeploymentError::PageScope)?;
    if let Some(s) = &req.service {
        check_identifier("service", s).map_err(|_| DeploymentError::PageScope)?;
    }
    if index.generation != catalog.generation {
        return Err(DeploymentError::StaleSnapshot);
    }
    Ok(())
}

/// One page of `catalog` (whose indexes are `index`) for `req`, under the
/// open instance's fingerprint `instance` and the record-byte budget
/// `max_bytes`. Refusals come before any record is selected or cloned.
pub fn page(
    catalog: &Catalog,
    index: &PageIndex,
    req: &PageRequest,
    instance: u64,
    max_bytes: u64,
) -> Result<Page, DeploymentError> {
    admit(catalog, index, req)?;
    let service = req.service.as_deref();
    let (scope, _) = index.scope(&req.tenant, service);
    let scope_key = scope_tag(&req.tenant, service);
    let start = match &req.page_token {
        Some(t) => resume(t, scope, scope_key, instance, catalog.generation)?,
        None => 0,
    };
    let (out, pos) = select(catalog, scope, start, req.page_size, max_bytes)?;
    Ok(finish(catalog, scope, out, pos, |last| {
        PageToken {
            instance,
            generation: catalog.generation,
            scope: scope_key,
            position: pos as u64,
            last: tag(&[last.as_bytes()]),
        }
        .encode()
    }))
}

/// The page of `out` (ending before `pos` in `scope`), with the
/// continuation `next` makes of its last id when more records follow.
fn finish(
    catalog: &Catalog,
    scope: &[Entry],
    out: Vec<VersionedDeployment>,
    pos: usize,
    next: impl FnOnce(&str) -> String,
) -> Page {
    let next_page_token = match (scope.get(pos), out.last()) {
        (Some(_), Some(last)) => Some(next(&last.manifest.id)),
        _ => None,
    };
    Page {
        deployments: out,
        next_page_token,
        catalog_generation: catalog.generation,
    }
}

// ------------------------------------------------------ durable cursors

/// The prefix of a cursor's text (a token never starts with it: a token
/// is hex).
pub const CURSOR_PREFIX: &str = "c1-";
const CURSOR_HEAD: usize = 8 + 8 + 8;

/// A continuation that survives a reopen of the catalog, for callers that
/// open the catalog anew on every page (a command line): the catalog
/// generation it was issued at, a tag of the catalog's whole content at
/// that generation, the scope, and the last id returned, in full.
///
/// A page token ([`PageToken`]) is bound to one open instance, so a
/// process that reopens can never continue with it. A cursor names where
/// to continue instead of a position: the first id after `last` in the
/// scope. It continues only the catalog content that issued it, so no row
/// is skipped or repeated: any publication since (a later generation) is
/// [`DeploymentError::PageTokenExpired`]; another catalog, another scope,
/// a damaged cursor, a future generation or a `last` id the scope does not
/// hold at that generation is [`DeploymentError::PageToken`]. Its text is
/// `c1-` then 48 hex digits (generation, content tag, scope tag) then `-`
/// and the last id in hex; its length is checked against
/// [`MAX_TOKEN_BYTES`] before any parsing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cursor {
    /// The catalog generation of the page that issued it.
    pub generation: u64,
    /// The tag of the catalog's content at that generation.
    pub content: [u8; 8],
    /// The scope tag.
    pub scope: [u8; 8],
    /// The last id returned.
    pub last: String,
}

impl Cursor {
    /// The cursor's text.
    pub fn encode(&self) -> String {
        let mut head = Vec::with_capacity(CURSOR_HEAD);
        head.extend_from_slice(&self.generation.to_be_bytes());
        head.extend_from_slice(&self.content);
        head.extend_from_slice(&self.scope);
        format!(
            "{CURSOR_PREFIX}{}-{}",
            crate::hex::encode(head),
            crate::hex::encode(self.last.as_bytes())
        )
    }

    /// Decodes a cursor's text. Total; the raw bound is checked first.
    pub fn decode(text: &str) -> Result<Self, DeploymentError> {
        if text.len() > MAX_TOKEN_BYTES {
            return Err(DeploymentError::PageToken);
        }
        let rest = text
            .strip_prefix(CURSOR_PREFIX)
            .ok_or(DeploymentError::PageToken)?;
        let (head, last) = rest.split_once('-').ok_or(DeploymentError::PageToken)?;
        let head = crate::hex::decode::<CURSOR_HEAD>(head).ok_or(DeploymentError::PageToken)?;
        let eight = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(head.get(i..i + 8).unwrap_or(&[0; 8]));
            b
        };
        let last = crate::hex::decode_bounded(last, MAX_IDENTIFIER_BYTES)
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or(DeploymentError::PageToken)?;
        check_identifier("deployment id", &last).map_err(|_| DeploymentError::PageToken)?;
        Ok(Cursor {
            generation: u64::from_be_bytes(eight(0)),
            content: eight(8),
            scope: eight(16),
            last,
        })
    }
}

/// One page of `catalog` for `req`, continued by a [`Cursor`] instead of
/// an instance-bound token: `req.page_token` is a cursor's text (or `None`
/// for the first page) and the page's `next_page_token` is the next
/// cursor's. The same records as [`page`] in the same order; refusals come
/// before any record is selected.
pub fn page_by_cursor(
    catalog: &Catalog,
    index: &PageIndex,
    req: &PageRequest,
    max_bytes: u64,
) -> Result<Page, DeploymentError> {
    admit(catalog, index, req)?;
    let service = req.service.as_deref();
    let (scope, _) = index.scope(&req.tenant, service);
    let scope_key = scope_tag(&req.tenant, service);
    let start = match &req.page_token {
        None => 0,
        Some(text) => {
            let c = Cursor::decode(text)?;
            if c.scope != scope_key || c.generation > catalog.generation {
                return Err(DeploymentError::PageToken);
            }
            if c.generation < catalog.generation {
                return Err(DeploymentError::PageTokenExpired);
            }
            if c.content != index.content {
                return Err(DeploymentError::PageToken);
            }
            let pos = scope.partition_point(|e| e.id.as_str() <= c.last.as_str());
            let held = pos
                .checked_sub(1)
                .and_then(|i| scope.get(i))
                .is_some_and(|e| e.id == c.last);
            if !held {
                return Err(DeploymentError::PageToken);
            }
            pos
        }
    };
    let (out, pos) = select(catalog, scope, start, req.page_size, max_bytes)?;
    Ok(finish(catalog, scope, out, pos, |last| {
        Cursor {
            generation: catalog.generation,
            content: index.content,
            scope: scope_key,
            last: last.to_owned(),
        }
        .encode()
    }))
}
