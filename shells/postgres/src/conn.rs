//! Each handle's connections: connecting with a secret-bearing URL (and
//! TLS), a bounded pool of connections, transactions that pipeline their
//! statements, classifying server errors, the server's clock, and the
//! versioned schema of one component.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use custos_core::Millis;
use postgres::error::SqlState;
use postgres::types::ToSql;
/// The synchronous client [`Target::connect`] returns.
pub use postgres::Client;
use postgres::{NoTls, Row, Statement};
use tokio_postgres::Config as PgConfig;

use crate::tls::{self, TlsMode, TlsSettings};

/// How many times a transaction that lost a serialization conflict or a
/// deadlock is retried before it is reported as a fault.
pub const MAX_RETRIES: u32 = 8;

/// Where a component's tables live: a connection string (a secret: it may
/// carry a password, and no part of it is ever displayed), the PostgreSQL
/// schema holding them, and the bounds on every wait.
///
/// The string is parsed once, by [`parse_url`], and only its parsed form is
/// kept: nothing later re-reads or echoes the text.
#[derive(Clone)]
pub struct Target {
    config: PgConfig,
    schema: String,
    waits: Waits,
    tls: TlsSettings,
    connector: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    pool_size: usize,
    access_clock: AccessClock,
}

/// Whose clock the access plane judges expiries by (claims, credentials,
/// logins) on a catalogue opened on a [`Target`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AccessClock {
    /// The server's, read inside the deciding transaction after its lock,
    /// as leases are: hosts whose clocks disagree judge an expiry alike. A
    /// write's own time is replaced by the server's and every deadline it
    /// carries keeps its distance from it
    /// (`custos_core::catalogue::access::AccessRequest::rebased`); a read's
    /// `now_ms` is the server's. The default.
    #[default]
    Server,
    /// The caller's `now_ms`, as given: for tests and differentials that
    /// drive time as data, as the memory and SQLite backends do.
    Caller,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("endpoint", &self.endpoint())
            .field("schema", &self.schema)
            .field("waits", &self.waits)
            .field("tls", &self.tls.mode)
            .field("pool_size", &self.pool_size)
            .field("access_clock", &self.access_clock)
            .finish_non_exhaustive()
    }
}

/// The bound on every wait of a connection. Each has a default; each can be
/// set on the [`Target`], and the connection string's own `connect_timeout`,
/// `keepalives_idle` and `tcp_user_timeout` parameters, and its
/// `options=-c statement_timeout=… -c lock_timeout=…
/// -c idle_in_transaction_session_timeout=…`, take precedence over the
/// defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waits {
    /// Connecting, the server's first reply and the login included
    /// (default [`DEFAULT_CONNECT_TIMEOUT`]). A server that accepts the
    /// connection and never answers is `Unavailable` once it passes.
    pub connect: Duration,
    /// Idle time before TCP keepalive probes a silent connection (default
    /// [`DEFAULT_KEEPALIVE_IDLE`]).
    pub keepalive_idle: Duration,
    /// How long sent data may stay unacknowledged before the kernel drops
    /// the connection (`TCP_USER_TIMEOUT`, default
    /// [`DEFAULT_TCP_USER_TIMEOUT`]): a host that vanished mid-call.
    pub tcp_user: Duration,
    /// The server's `statement_timeout` (default
    /// [`DEFAULT_STATEMENT_TIMEOUT`]).
    pub statement: Duration,
    /// The server's `lock_timeout`: the longest wait for a row lock another
    /// host holds (default [`DEFAULT_LOCK_TIMEOUT`]).
    pub lock: Duration,
    /// The server's `idle_in_transaction_session_timeout` (default
    /// [`DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT`]): a host that stalls between
    /// the statements of an open transaction (frozen, paused, cut off
    /// behind a proxy that keeps the socket) has its session ended by the
    /// server, which releases its row locks, so the other hosts' writers
    /// proceed; the stalled host's transaction rolls back and its next use
    /// reconnects.
    pub idle_in_transaction: Duration,
    /// The longest wait for one of the handle's connections when every one
    /// is in use by other threads (default [`DEFAULT_CHECKOUT_TIMEOUT`]);
    /// past it the call is `Unavailable` naming this bound.
    pub checkout: Duration,
}

/// The default bound on connecting.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default TCP keepalive idle time.
pub const DEFAULT_KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// The default `TCP_USER_TIMEOUT`.
pub const DEFAULT_TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);
/// The default `statement_timeout`.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default `lock_timeout`.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// The default `idle_in_transaction_session_timeout`: no decision of this
/// crate leaves the server waiting on the client mid-transaction for more
/// than a round trip, so 5 s is generous and bounds how long a stalled host
/// holds the rows every other host's writer locks first.
pub const DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(5);

/// The default bound on waiting for a free connection of a handle's pool:
/// every transaction a connection runs is itself bounded by the statement
/// and lock timeouts, so a wait past this means the pool is too small for
/// the load.
pub const DEFAULT_CHECKOUT_TIMEOUT: Duration = Duration::from_secs(30);

/// The default number of connections one handle may hold open
/// ([`Target::pool_size`]).
pub const DEFAULT_POOL_SIZE: usize = 8;

impl Default for Waits {
    fn default() -> Self {
        Waits {
            connect: DEFAULT_CONNECT_TIMEOUT,
            keepalive_idle: DEFAULT_KEEPALIVE_IDLE,
            tcp_user: DEFAULT_TCP_USER_TIMEOUT,
            statement: DEFAULT_STATEMENT_TIMEOUT,
            lock: DEFAULT_LOCK_TIMEOUT,
            idle_in_transaction: DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT,
            checkout: DEFAULT_CHECKOUT_TIMEOUT,
        }
    }
}

/// The longest schema name (PostgreSQL's identifier limit).
pub const MAX_SCHEMA_LEN: usize = 63;

/// The longest connection string accepted, in bytes.
pub const MAX_URL_LEN: usize = 4096;

/// Why a [`Target`] or a connection could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// The connection string does not parse. No part of it is echoed: the
    /// detail is one of a fixed set of sentences.
    #[error("InvalidUrl: the PostgreSQL connection string does not parse ({detail})")]
    InvalidUrl {
        /// What is wrong, never the string's text.
        detail: &'static str,
    },
    /// The schema name is not `[a-z_][a-z0-9_]{0,62}`.
    #[error("InvalidSchema: {schema:?} is not a schema name ([a-z_][a-z0-9_]{{0,62}})")]
    InvalidSchema {
        /// The name given.
        schema: String,
    },
    /// The TLS settings cannot be used: the `sslrootcert` file is missing,
    /// too long, or holds no PEM certificate.
    #[error("InvalidTls: {detail}")]
    InvalidTls {
        /// What is wrong (the file's path, never its text).
        detail: String,
    },
    /// The server could not be reached, did not answer in time, refused
    /// the login, or failed the TLS the string asks for (no TLS offered to
    /// `require`, a certificate that does not chain to the named CA or does
    /// not name the host).
    #[error("Unavailable: {endpoint}: {reason}")]
    Unavailable {
        /// `host:port/database` — never the user or the password.
        endpoint: String,
        /// Why.
        reason: String,
    },
}

fn invalid(detail: &'static str) -> ConnectError {
    ConnectError::InvalidUrl { detail }
}

/// Parses a connection string: a `postgres://` or `postgresql://` URL, or a
/// libpq `key=value` string. The URL is read by the `url` crate (a
/// percent-encoded user, password or database name is decoded; a password
/// holding `@` is read up to the last `@` of the authority) and then by the
/// `postgres` crate's own parser. Refused, with a fixed sentence and never
/// any part of the text: anything either parser refuses, a fragment (`#`),
/// an `@` after the authority (a password holding `/`, `?` or `#` that was
/// not percent-encoded would otherwise spill into the host, the database
/// name or the parameters), a string longer than [`MAX_URL_LEN`].
pub fn parse_url(text: &str) -> Result<postgres::Config, ConnectError> {
    parse_parts(text).map(|(cfg, _)| postgres::Config::from(cfg))
}

/// [`parse_url`], and the TLS settings it takes out of the string before
/// the client's parser sees it ([`crate::tls`]).
fn parse_parts(text: &str) -> Result<(PgConfig, TlsSettings), ConnectError> {
    if text.trim().is_empty() {
        return Err(invalid("the string is empty"));
    }
    if text.len() > MAX_URL_LEN {
        return Err(invalid("the string is longer than 4096 bytes"));
    }
    let lower = text.get(..14).unwrap_or(text).to_ascii_lowercase();
    let is_url = lower.starts_with("postgres://") || lower.starts_with("postgresql://");
    let normalized = if is_url {
        let mut u = url::Url::parse(text)
            .map_err(|_| invalid("not a URL: percent-encode any of @ : / ? # [ ] % or a space in the user, password or database name"))?;
        if text.contains('#') || u.fragment().is_some() {
            return Err(invalid(
                "a '#' outside percent-encoding: write it as %23 in a password",
            ));
        }
        let after_authority = u
            .path()
            .chars()
            .chain(u.query().unwrap_or("").chars())
            .any(|c| c == '@');
        if after_authority {
            return Err(invalid("an '@' after the host: percent-encode a password holding / ? # or @ (%2F %3F %23 %40)"));
        }
        if u.host_str().is_none_or(str::is_empty) && u.query().is_none_or(|q| !q.contains("host="))
        {
            return Err(invalid("no host"));
        }
        // Only the TLS keys leave; every other pair stays byte for byte
        // (percent-decoding, not form-decoding: a '+' is a '+').
        let mut taken = Vec::new();
        let mut kept = Vec::new();
        for part in u.query().unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let key = percent_decode(k)?;
            if is_tls_key(&key) {
                taken.push((key, percent_decode(v)?));
            } else {
                kept.push(part.to_owned());
            }
        }
        if !taken.is_empty() {
            let query = kept.join("&");
            u.set_query((!query.is_empty()).then_some(query.as_str()));
        }
        (u.as_str().to_owned(), taken)
    } else {
        split_key_value(text)?
    };
    let (normalized, taken) = normalized;
    let tls = tls::settings(&taken)?;
    let cfg: PgConfig = normalized
        .parse()
        .map_err(|_| invalid("the postgres client refuses a host, port or parameter of it"))?;
    // Every sslmode was taken out above; one the client still read would
    // be overridden silently by the TLS settings.
    if cfg.get_ssl_mode() != tokio_postgres::config::SslMode::Prefer {
        return Err(invalid("an sslmode this parser could not read"));
    }
    for h in cfg.get_hosts() {
        if let tokio_postgres::config::Host::Tcp(name) = h {
            if name.is_empty()
                || name
                    .chars()
                    .any(|c| c == '@' || c.is_whitespace() || c.is_control())
            {
                return Err(invalid(
                    "a host name holds '@', a space or a control character",
                ));
            }
        }
    }
    Ok((cfg, tls))
}

/// A keyword string without its TLS keys, and those keys.
fn split_key_value(text: &str) -> Result<(String, Vec<Pair>), ConnectError> {
    let Some(pairs) = key_value_pairs(text) else {
        // Read differently by the client's parser, it could carry an
        // sslmode this module never saw.
        return Err(invalid(
            "not a keyword string of key=value pairs (inside a quoted value, escape ' and \\ with \\)",
        ));
    };
    Ok(match Some(pairs) {
        Some(pairs) if pairs.iter().any(|(k, _)| is_tls_key(k)) => {
            let (taken, kept) = take_tls_keys(pairs);
            let rest = kept
                .iter()
                .map(|(k, v)| format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'")))
                .collect::<Vec<_>>()
                .join(" ");
            (rest, taken)
        }
        // Without TLS keys the string goes to the client as written.
        _ => (text.to_owned(), Vec::new()),
    })
}

/// A connection string's `(key, value)`.
type Pair = (String, String);

fn is_tls_key(k: &str) -> bool {
    tls::TLS_KEYS.contains(&k) || tls::REFUSED_KEYS.contains(&k)
}

/// Splits `pairs` into the TLS keys ([`crate::tls`] reads them) and the
/// rest, each in its order.
fn take_tls_keys(pairs: Vec<Pair>) -> (Vec<Pair>, Vec<Pair>) {
    pairs.into_iter().partition(|(k, _)| is_tls_key(k))
}

/// Decodes `%XX` escapes (and nothing else: a `+` stays a `+`, as the
/// client's parser reads a URL's query).
fn percent_decode(text: &str) -> Result<String, ConnectError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| invalid("a parameter is not UTF-8 once percent-decoded"))
}

/// The `key=value` pairs of a libpq keyword string (whitespace between
/// pairs and around `=`; a value single-quoted or bare, `\` escaping the
/// next character in either), or `None` if it is not one.
fn key_value_pairs(text: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut it = text.chars().peekable();
    let skip_space = |it: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
    };
    loop {
        skip_space(&mut it);
        if it.peek().is_none() {
            return Some(out);
        }
        let mut key = String::new();
        while let Some(&c) = it.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            it.next();
        }
        skip_space(&mut it);
        if it.next() != Some('=') {
            return None;
        }
        skip_space(&mut it);
        let mut value = String::new();
        if it.peek() == Some(&'\'') {
            it.next();
            loop {
                match it.next()? {
                    '\\' => value.push(it.next()?),
                    '\'' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = it.peek() {
                if c.is_whitespace() {
                    break;
                }
                it.next();
                value.push(if c == '\\' { it.next()? } else { c });
            }
        }
        out.push((key, value));
    }
}

impl Target {
    /// A target: `url` a `postgres://` URL or a libpq `key=value` string
    /// ([`parse_url`]), `schema` the PostgreSQL schema holding the
    /// component's tables (created on first use). The waits are the
    /// defaults ([`Waits::default`]) except where the string sets them.
    pub fn new(url: impl AsRef<str>, schema: impl Into<String>) -> Result<Self, ConnectError> {
        let text = url.as_ref();
        let (config, tls) = parse_parts(text)?;
        let schema = schema.into();
        let valid = !schema.is_empty()
            && schema.len() <= MAX_SCHEMA_LEN
            && schema
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
            && schema
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(ConnectError::InvalidSchema { schema });
        }
        let mut waits = Waits::default();
        if let Some(t) = config.get_connect_timeout() {
            waits.connect = *t;
        }
        if let Some(t) = config.get_tcp_user_timeout() {
            waits.tcp_user = *t;
        }
        if text.contains("keepalives_idle") {
            waits.keepalive_idle = config.get_keepalives_idle();
        }
        let connector = tls::connector(&tls)?;
        Ok(Target {
            config,
            schema,
            waits,
            tls,
            connector,
            pool_size: DEFAULT_POOL_SIZE,
            access_clock: AccessClock::default(),
        })
    }

    /// Sets whose clock a catalogue opened on this target judges access
    /// expiries by (default [`AccessClock::Server`]).
    pub fn access_clock(mut self, clock: AccessClock) -> Self {
        self.access_clock = clock;
        self
    }

    /// Whose clock access expiries are judged by.
    pub fn judges_access_by(&self) -> AccessClock {
        self.access_clock
    }

    /// Sets how many connections one handle opened on this target may hold
    /// (default [`DEFAULT_POOL_SIZE`]; at least 1). A handle opens them as
    /// threads sharing it need them, never more than this; a thread finding
    /// every one in use waits up to [`Waits::checkout`].
    pub fn pool_size(mut self, n: usize) -> Self {
        self.pool_size = n.max(1);
        self
    }

    /// The most connections one handle on this target holds.
    pub fn max_connections(&self) -> usize {
        self.pool_size
    }

    /// How this target's connections use TLS.
    pub fn tls_mode(&self) -> TlsMode {
        self.tls.mode
    }

    /// The schema name.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// `host:port/database`, for messages: never the user or the password,
    /// and every control character escaped.
    pub fn endpoint(&self) -> String {
        endpoint_of(&self.config)
    }

    /// The bounds on this target's waits.
    pub fn waits(&self) -> Waits {
        self.waits
    }

    /// Sets the connect timeout (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.waits.connect = t;
        self
    }

    /// Sets every wait at once.
    pub fn with_waits(mut self, waits: Waits) -> Self {
        self.waits = waits;
        self
    }

    /// Opens a new connection with `search_path` set to the schema and the
    /// waits applied. The whole attempt — TCP connect, the server's first
    /// reply, the login — ends within [`Waits::connect`]: a server that
    /// accepts and never answers is `Unavailable` naming the timeout (the
    /// abandoned attempt's thread ends when its socket does; keepalive and
    /// `TCP_USER_TIMEOUT` bound that for a vanished host).
    pub fn connect(&self) -> Result<Client, ConnectError> {
        let cfg = postgres::Config::from(self.session_config());
        let connector = self.connector.clone();
        self.bounded_connect(move || match connector {
            Some(tls) => cfg.connect(tls),
            None => cfg.connect(NoTls),
        })
    }

    /// A connection for a handle's pool: the asynchronous client on a
    /// runtime of its own, so a transaction can pipeline its statements
    /// ([`Tx::pipeline`]). Bounded as [`Target::connect`] is.
    fn connect_session(&self) -> Result<Session, ConnectError> {
        let cfg = self.session_config();
        let connector = self.connector.clone();
        self.bounded_connect(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| SessionError::Runtime(e.to_string()))?;
            let client = match connector {
                Some(tls) => {
                    let (client, connection) = rt.block_on(cfg.connect(tls))?;
                    rt.spawn(connection);
                    client
                }
                None => {
                    let (client, connection) = rt.block_on(cfg.connect(NoTls))?;
                    rt.spawn(connection);
                    client
                }
            };
            Ok::<_, SessionError>(Session {
                rt,
                client,
                cache: HashMap::new(),
            })
        })
    }

    /// The configuration every connection uses: the waits, the keepalives,
    /// the application name, the schema and the TLS mode applied.
    fn session_config(&self) -> PgConfig {
        let mut cfg = self.config.clone();
        let w = self.waits;
        cfg.connect_timeout(w.connect);
        cfg.keepalives(true);
        cfg.keepalives_idle(w.keepalive_idle);
        cfg.keepalives_interval(Duration::from_secs(5).min(w.keepalive_idle));
        cfg.keepalives_retries(3);
        cfg.tcp_user_timeout(w.tcp_user);
        cfg.application_name("custos");
        // The defaults first, the string's own options next (a later -c
        // wins), the schema last (it is not the caller's to change).
        let own = cfg.get_options().unwrap_or("").to_owned();
        cfg.options(format!(
            "-c statement_timeout={} -c lock_timeout={} -c idle_in_transaction_session_timeout={} {own} -c search_path=\"{}\"",
            w.statement.as_millis(),
            w.lock.as_millis(),
            w.idle_in_transaction.as_millis(),
            self.schema
        ));
        cfg.ssl_mode(match self.tls.mode {
            TlsMode::Disable => tokio_postgres::config::SslMode::Disable,
            TlsMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        });
        cfg
    }

    /// Runs `attempt` on a thread of its own and waits for it at most
    /// [`Waits::connect`].
    fn bounded_connect<T: Send + 'static, E: Into<SessionError> + Send + 'static>(
        &self,
        attempt: impl FnOnce() -> Result<T, E> + Send + 'static,
    ) -> Result<T, ConnectError> {
        let unavailable = |reason: String| ConnectError::Unavailable {
            endpoint: self.endpoint(),
            reason,
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("custos-pg-connect".into())
            .spawn(move || {
                let _ = tx.send(attempt().map_err(Into::into));
            })
            .map_err(|e| unavailable(format!("cannot start the connecting thread: {e}")))?;
        let w = self.waits;
        match rx.recv_timeout(w.connect) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(SessionError::Client(e))) => {
                Err(unavailable(scrub_config(&with_source(&e), &self.config)))
            }
            Ok(Err(SessionError::Runtime(e))) => {
                Err(unavailable(format!("cannot start the client's runtime: {e}")))
            }
            Err(_) => Err(unavailable(format!(
                "no answer within the {} ms connect timeout (set connect_timeout in the connection string, or Target::connect_timeout)",
                w.connect.as_millis()
            ))),
        }
    }

    /// Removes this target's password (and user) from `message`, should a
    /// library echo either.
    pub fn scrub(&self, message: &str) -> String {
        scrub_config(message, &self.config)
    }
}

/// Why a connection attempt failed on its thread.
enum SessionError {
    /// The client's error.
    Client(postgres::Error),
    /// The runtime could not start.
    Runtime(String),
}

impl From<postgres::Error> for SessionError {
    fn from(e: postgres::Error) -> Self {
        SessionError::Client(e)
    }
}

/// `host:port/database` of a parsed connection string, without user
/// information or options, control characters escaped.
fn endpoint_of(cfg: &PgConfig) -> String {
    let host = cfg
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(s) => s.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let db = cfg.get_dbname().unwrap_or("");
    custos_core::root::printable(&format!("{host}:{port}/{db}"))
}

/// `host:port/database` of a connection string (or `<unparsable url>`),
/// without user information or options: what a message may show.
pub fn redact(url: &str) -> String {
    parse_parts(url).map_or_else(|_| "<unparsable url>".to_owned(), |(c, _)| endpoint_of(&c))
}

/// Removes a connection string and its password from a message, should a
/// library echo either.
pub fn scrub(message: &str, url: &str) -> String {
    let out = if url.is_empty() {
        message.to_owned()
    } else {
        message.replace(url, "<url>")
    };
    match parse_parts(url) {
        Ok((cfg, _)) => scrub_config(&out, &cfg),
        Err(_) => out,
    }
}

fn scrub_config(message: &str, cfg: &PgConfig) -> String {
    let mut out = message.to_owned();
    if let Some(pw) = cfg.get_password().and_then(|p| std::str::from_utf8(p).ok()) {
        if !pw.is_empty() {
            out = out.replace(pw, "<password>");
        }
    }
    out
}

/// An error's message followed by its source's (the client's "error
/// connecting to server" says why only in its source).
/// One line: a server's DETAIL and HINT lines are joined with "; ".
fn with_source(e: &postgres::Error) -> String {
    let text = match std::error::Error::source(e) {
        Some(src) => format!("{e}: {src}"),
        None => e.to_string(),
    };
    one_line(&text)
}

/// `text` with its line breaks replaced by "; ".
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// A server error, classified.
#[derive(Debug)]
pub enum Failure {
    /// The connection is gone or the server is shutting down / restarting:
    /// the outcome of an in-flight write is unknown.
    Unavailable(String),
    /// A serialization failure or deadlock: the transaction rolled back and
    /// may be retried.
    Retry(String),
    /// Any other server or client error.
    Db(&'static str, String),
    /// A stored row does not decode or breaks an invariant.
    Corrupt(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Unavailable(r) => write!(f, "unavailable: {r}"),
            Failure::Retry(r) => write!(f, "conflict: {r}"),
            Failure::Db(op, r) => write!(f, "postgres-{op}: {r}"),
            Failure::Corrupt(d) => write!(f, "corrupt: {d}"),
        }
    }
}

/// Classifies a client error raised during `op`.
pub fn classify(op: &'static str, e: &postgres::Error) -> Failure {
    // The server's own words (severity, SQLSTATE, message) where it spoke;
    // the client's otherwise. Neither carries the connection string.
    let text = match e.as_db_error() {
        Some(db) => one_line(&format!(
            "{} {}: {}",
            db.severity(),
            db.code().code(),
            db.message()
        )),
        None => with_source(e),
    };
    if e.is_closed() {
        return Failure::Unavailable(format!("{op}: connection closed"));
    }
    match e.code() {
        // No SQLSTATE: the client's own error. An I/O failure (a reset, a
        // timeout of the socket) leaves the outcome unknown; anything else
        // (a value that does not decode, a protocol surprise) is a fault
        // of this process and retrying the same request cannot help.
        None if is_io(e) => Failure::Unavailable(format!("{op}: {text}")),
        None => Failure::Db(op, format!("client: {text}")),
        Some(c)
            if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED =>
        {
            Failure::Retry(format!("{op}: {text}"))
        }
        Some(c) if *c == SqlState::QUERY_CANCELED => Failure::Unavailable(format!(
            "{op}: the statement timeout passed (statement_timeout; the server cancelled the statement): {text}"
        )),
        Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE => Failure::Unavailable(format!(
            "{op}: the lock timeout passed waiting for a row another host holds (lock_timeout): {text}"
        )),
        Some(c)
            if *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                || c.code().starts_with("08") =>
        {
            Failure::Unavailable(format!("{op}: {text}"))
        }
        Some(_) => Failure::Db(op, text),
    }
}

/// Whether a client error was caused by the socket (its source chain holds
/// an [`std::io::Error`]).
fn is_io(e: &postgres::Error) -> bool {
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        if s.is::<std::io::Error>() {
            return true;
        }
        src = s.source();
    }
    false
}

/// A `map_err` adapter: classify a client error raised during `op`.
pub fn db(op: &'static str) -> impl Fn(postgres::Error) -> Failure {
    move |e| classify(op, &e)
}

/// One handle's connections: a bounded pool, so threads sharing a handle
/// (every handle is `Send + Sync`) run their transactions side by side on
/// connections of their own. The first connection is opened at the
/// handle's open; others as concurrent callers need them, up to
/// [`Target::pool_size`]. A connection the server dropped (a restart, a
/// terminated backend) is discarded when a transaction on it fails, and
/// with it every idle one (they met the same restart); the next call
/// connects afresh.
///
/// The pool is this crate's own, some sixty lines over a mutex and a
/// condition variable, rather than `r2d2`'s: `r2d2` opens connections on
/// helper threads of its own (three per pool) and retries a failed
/// connect in the background, so a refused connection becomes a wait for
/// the whole checkout timeout and its typed error a string; here a caller
/// that needs a new connection opens it itself, within
/// [`Waits::connect`], and gets the refusal as it happened.
pub struct Conn {
    target: Target,
    pool: Mutex<Pool>,
    freed: Condvar,
}

/// The pool's state: idle connections, and how many are open in all
/// (idle, in use, or being opened).
struct Pool {
    idle: Vec<Session>,
    open: usize,
}

/// A connection checked out of a [`Conn`]'s pool; back into it when
/// dropped, unless it was marked broken.
struct Lease<'a> {
    conn: &'a Conn,
    session: Option<Session>,
    broken: bool,
}

impl Lease<'_> {
    /// After an `Unavailable`: discard the connection if it is gone (a lost
    /// server, a reset); keep it when the server only cancelled a statement
    /// (a lock or statement timeout), which leaves it usable.
    fn discard_if_gone(&mut self) {
        if !self.session.as_mut().is_some_and(Session::alive) {
            self.broken = true;
        }
    }

    fn session(&mut self) -> Result<&mut Session, Failure> {
        self.session
            .as_mut()
            .ok_or_else(|| Failure::Unavailable("no connection".to_owned()))
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut pool = self.conn.lock_pool();
        match self.session.take() {
            Some(s) if !self.broken && !s.client.is_closed() => pool.idle.push(s),
            _ => {
                pool.open = pool.open.saturating_sub(1);
                if self.broken {
                    // The server went away under this connection: the idle
                    // ones met the same restart.
                    pool.open = pool.open.saturating_sub(pool.idle.len());
                    pool.idle.clear();
                }
            }
        }
        self.conn.freed.notify_one();
    }
}

/// The most statements one connection keeps prepared; past it the cache
/// starts again (every port's SQL is a fixed, small set of texts).
pub const MAX_CACHED_STATEMENTS: usize = 256;

/// A live connection and the statements prepared on it: the asynchronous
/// client, driven by a single-threaded runtime of its own only while a
/// call blocks on it (as the synchronous client does), so statements sent
/// together are pipelined.
struct Session {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    cache: HashMap<String, Statement>,
}

impl Session {
    /// Whether the connection is still there: the runtime is driven once so
    /// the connection task sees what the server sent while the session sat
    /// idle (its end after a restart, a terminated backend, an idle
    /// timeout), and then the client is asked.
    fn alive(&mut self) -> bool {
        // The first yield lets the runtime poll its sockets (queuing the
        // connection task if the server wrote); the second runs the task.
        self.rt.block_on(async {
            tokio::task::yield_now().await;
            tokio::task::yield_now().await;
        });
        !self.client.is_closed()
    }

    /// The prepared statement of `sql`, prepared now (one round trip) if
    /// not yet cached on this connection.
    fn prepared(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(st) = self.cache.get(sql) {
            return Ok(st.clone());
        }
        trip(1);
        let st = self.rt.block_on(self.client.prepare(sql))?;
        self.remember(sql, &st);
        Ok(st)
    }

    fn remember(&mut self, sql: &str, st: &Statement) {
        if self.cache.len() >= MAX_CACHED_STATEMENTS {
            self.cache.clear();
        }
        self.cache.insert(sql.to_owned(), st.clone());
    }

    /// The prepared statements of `sqls`, in order, preparing those not yet
    /// cached in one pipelined round trip (none when every one is cached).
    fn prepare_all(&mut self, sqls: &[&str]) -> Result<Vec<Statement>, postgres::Error> {
        let mut missing: Vec<&str> = sqls
            .iter()
            .copied()
            .filter(|s| !self.cache.contains_key(*s))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        let mut fresh: HashMap<&str, Statement> = HashMap::new();
        if !missing.is_empty() {
            trip(1);
            let client = &self.client;
            let got = self
                .rt
                .block_on(join_all(missing.iter().map(|s| client.prepare(s))));
            for (sql, st) in missing.iter().zip(got) {
                fresh.insert(sql, st?);
            }
        }
        let mut out = Vec::with_capacity(sqls.len());
        for sql in sqls {
            let st = match self.cache.get(*sql).or_else(|| fresh.get(*sql)) {
                Some(st) => st.clone(),
                None => self.prepared(sql)?,
            };
            out.push(st);
        }
        for (sql, st) in fresh {
            self.remember(sql, &st);
        }
        Ok(out)
    }
}

/// Client round trips made by this process's [`Tx`] transactions: each
/// pipelined batch of statements (the deferred `BEGIN` travels with the
/// first), each batch of prepares of statements not yet cached on its
/// connection, each `COMMIT`. For benchmarks, which print round trips per
/// operation; it bounds nothing.
static ROUND_TRIPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The client round trips this process's transactions made so far (see
/// [`Tx`]). For benchmarks; it bounds nothing.
pub fn round_trips() -> u64 {
    ROUND_TRIPS.load(std::sync::atomic::Ordering::Relaxed)
}

fn trip(n: u64) {
    ROUND_TRIPS.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
}

/// What one statement of a [`Tx::pipeline`] answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// Every row.
    Rows,
    /// Exactly one row (an error otherwise).
    One,
    /// At most one row (an error past one).
    Opt,
    /// The number of rows affected.
    Count,
}

/// One statement's answer in a [`Tx::pipeline`].
#[derive(Debug)]
pub enum Got {
    /// [`Want::Rows`].
    Rows(Vec<Row>),
    /// [`Want::One`].
    One(Row),
    /// [`Want::Opt`].
    Opt(Option<Row>),
    /// [`Want::Count`].
    Count(u64),
}

/// One statement of a pipeline: what it answers, its SQL, its parameters.
pub type Step<'p> = (Want, &'p str, &'p [&'p (dyn ToSql + Sync)]);

/// One statement of a pipeline built in a loop: its parameters owned, so
/// a port can gather a whole footprint's reads or a whole decision's
/// effects before sending them together ([`Tx::run`]).
pub struct Stmt {
    want: Want,
    sql: std::borrow::Cow<'static, str>,
    args: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Stmt {
    /// A statement answering `want`, without parameters yet.
    pub fn new(want: Want, sql: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        Stmt {
            want,
            sql: sql.into(),
            args: Vec::new(),
        }
    }

    /// The next parameter (`$1`, `$2`, … in order).
    #[must_use]
    pub fn arg(mut self, v: impl ToSql + Sync + Send + 'static) -> Self {
        self.args.push(Box::new(v));
        self
    }

    /// The next parameters, in order.
    #[must_use]
    pub fn args(mut self, vs: Vec<Box<dyn ToSql + Sync + Send>>) -> Self {
        self.args.extend(vs);
        self
    }
}

impl fmt::Debug for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stmt")
            .field("want", &self.want)
            .field("sql", &self.sql)
            .field("args", &self.args.len())
            .finish()
    }
}

/// The next answer of a pipeline, which must be of the kind asked: a
/// mismatch (never: one answer per statement, in order) is a fault.
pub fn next_got(got: &mut impl Iterator<Item = Got>, op: &'static str) -> Result<Got, Failure> {
    got.next().ok_or_else(|| {
        Failure::Db(
            op,
            "the pipeline answered fewer statements than it sent".to_owned(),
        )
    })
}

impl Got {
    /// The rows of a [`Want::Rows`] answer.
    pub fn rows(self, op: &'static str) -> Result<Vec<Row>, Failure> {
        match self {
            Got::Rows(r) => Ok(r),
            other => Err(mismatch(op, &other)),
        }
    }

    /// The row of a [`Want::One`] answer.
    pub fn one(self, op: &'static str) -> Result<Row, Failure> {
        match self {
            Got::One(r) => Ok(r),
            other => Err(mismatch(op, &other)),
        }
    }

    /// The row, if any, of a [`Want::Opt`] answer.
    pub fn opt(self, op: &'static str) -> Result<Option<Row>, Failure> {
        match self {
            Got::Opt(r) => Ok(r),
            other => Err(mismatch(op, &other)),
        }
    }
}

fn mismatch(op: &'static str, got: &Got) -> Failure {
    let kind = match got {
        Got::Rows(_) => "rows",
        Got::One(_) => "one row",
        Got::Opt(_) => "an optional row",
        Got::Count(_) => "a count",
    };
    Failure::Db(op, format!("the pipeline answered {kind} out of order"))
}

/// A transaction whose statements are prepared once per connection and
/// may be pipelined: [`Tx::pipeline`] sends several statements in one
/// round trip, and the transaction's `BEGIN` is not sent alone but with
/// its first statements. Its single-statement methods are those of
/// `postgres::Transaction` that the ports use, taking SQL text.
pub struct Tx<'a> {
    session: &'a mut Session,
    /// The `BEGIN` not yet sent.
    begin: Option<&'static str>,
    /// `BEGIN` sent and neither `COMMIT` nor `ROLLBACK` yet.
    open: bool,
    /// When the reply to the round trip that carried `BEGIN` (and a
    /// writer's head-row lock, its first statement) arrived.
    held_since: Option<Instant>,
}

impl<'a> Tx<'a> {
    fn new(session: &'a mut Session, begin: &'static str) -> Self {
        Tx {
            session,
            begin: Some(begin),
            open: false,
            held_since: None,
        }
    }

    /// Runs `steps` in order in one round trip (after one more for any
    /// statement not yet prepared on this connection), with the
    /// transaction's `BEGIN` ahead of them if it is not sent yet. The
    /// server runs them one after another as if sent one by one: each
    /// sees what the earlier wrote, and after a failure the rest fail too
    /// (the transaction is aborted). The first failure, in order, is
    /// returned.
    pub fn pipeline(&mut self, steps: &[Step<'_>]) -> Result<Vec<Got>, postgres::Error> {
        let sqls: Vec<&str> = steps.iter().map(|(_, sql, _)| *sql).collect();
        let statements = self.session.prepare_all(&sqls)?;
        trip(1);
        let begin = self.begin.take();
        self.open |= begin.is_some();
        let client = &self.session.client;
        let (began, answers) = self.session.rt.block_on(async {
            let began = async {
                match begin {
                    Some(b) => client.batch_execute(b).await,
                    None => Ok(()),
                }
            };
            let answers = in_order(steps.iter().zip(&statements).map(
                |((want, _, params), st)| async move {
                    match want {
                        Want::Rows => client.query(st, params).await.map(Got::Rows),
                        Want::One => client.query_one(st, params).await.map(Got::One),
                        Want::Opt => client.query_opt(st, params).await.map(Got::Opt),
                        Want::Count => client.execute(st, params).await.map(Got::Count),
                    }
                },
            ));
            futures_util::join!(began, answers)
        });
        self.mark_held();
        began?;
        answers.into_iter().collect()
    }

    /// Notes when the transaction's first round trip came back.
    fn mark_held(&mut self) {
        if self.open && self.held_since.is_none() {
            self.held_since = Some(Instant::now());
        }
    }

    /// Runs one statement (with the deferred `BEGIN` ahead of it, in the
    /// same round trip): `run` makes its future from the client and the
    /// prepared statement.
    /// [`Tx::pipeline`] over statements with owned parameters.
    pub fn run(&mut self, stmts: &[Stmt]) -> Result<Vec<Got>, postgres::Error> {
        let args = stmt_args(stmts);
        self.pipeline(&steps_of(stmts, &args))
    }

    fn single<'s, T, F>(
        &'s mut self,
        sql: &str,
        run: impl FnOnce(&'s tokio_postgres::Client, Statement) -> F,
    ) -> Result<T, postgres::Error>
    where
        F: Future<Output = Result<T, postgres::Error>> + 's,
    {
        let st = self.session.prepared(sql)?;
        trip(1);
        let begin = self.begin.take();
        self.open |= begin.is_some();
        if begin.is_some() {
            // Sent now; the hold is counted from here (one round trip more
            // than from its reply).
            self.held_since = Some(Instant::now());
        }
        let session: &'s Session = self.session;
        let answer = run(&session.client, st);
        let (began, answer) = session.rt.block_on(async {
            let began = async {
                match begin {
                    Some(b) => session.client.batch_execute(b).await,
                    None => Ok(()),
                }
            };
            futures_util::join!(began, answer)
        });
        began?;
        answer
    }

    /// Runs a statement, returning its rows.
    pub fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        self.single(sql, |c, st| async move { c.query(&st, params).await })
    }

    /// Runs a statement that returns exactly one row.
    pub fn query_one(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, postgres::Error> {
        self.single(sql, |c, st| async move { c.query_one(&st, params).await })
    }

    /// Runs a statement that returns at most one row.
    pub fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error> {
        self.single(sql, |c, st| async move { c.query_opt(&st, params).await })
    }

    /// Runs a statement, returning the rows it affected.
    pub fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        self.single(sql, |c, st| async move { c.execute(&st, params).await })
    }

    /// Runs statements without parameters over the simple protocol (DDL,
    /// `SET LOCAL`, `EXPLAIN` of several statements); nothing is cached.
    pub fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error> {
        self.send_begin()?;
        trip(1);
        self.session
            .rt
            .block_on(self.session.client.batch_execute(sql))
    }

    /// Runs a statement without caching it (statements whose text varies
    /// without bound, such as `EXPLAIN` of a query).
    pub fn query_uncached(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        self.send_begin()?;
        trip(2);
        self.session
            .rt
            .block_on(self.session.client.query(sql, params))
    }

    /// Sends the deferred `BEGIN` alone (before a statement that cannot
    /// carry it).
    fn send_begin(&mut self) -> Result<(), postgres::Error> {
        if let Some(b) = self.begin.take() {
            trip(1);
            self.open = true;
            self.session
                .rt
                .block_on(self.session.client.batch_execute(b))?;
            self.mark_held();
        }
        Ok(())
    }

    /// Commits: one round trip (none if no statement ran).
    fn commit(self) -> Result<(), Failure> {
        self.commit_with(&[])
    }

    /// Sends `effects` and `COMMIT` in one round trip (the `COMMIT` alone
    /// when there are none; nothing when no statement ran). After a failed
    /// statement the server answers the `COMMIT` with a rollback: the
    /// first failure, in order, is returned, and nothing was written.
    fn commit_with(mut self, effects: &[Stmt]) -> Result<(), Failure> {
        if !self.open && self.begin.is_none() {
            return Ok(());
        }
        if self.begin.is_some() && effects.is_empty() {
            // No statement ran: nothing to commit.
            self.begin = None;
            return Ok(());
        }
        let args = stmt_args(effects);
        let steps = steps_of(effects, &args);
        let sqls: Vec<&str> = steps.iter().map(|(_, sql, _)| *sql).collect();
        let statements = self.session.prepare_all(&sqls).map_err(db("prepare"))?;
        // The server turns the COMMIT into a rollback after a statement it
        // failed, but a parameter the client cannot encode never reaches
        // it: encode every one first, and on a refusal send nothing (the
        // transaction rolls back when `self` drops).
        for ((_, sql, params), st) in steps.iter().zip(&statements) {
            encodes(st, params).map_err(|why| {
                Failure::Db("encode", format!("{why} (statement {})", one_line(sql)))
            })?;
        }
        trip(1);
        let begin = self.begin.take();
        self.open = false;
        let client = &self.session.client;
        let (began, answers, committed) = self.session.rt.block_on(async {
            let began = async {
                match begin {
                    Some(b) => client.batch_execute(b).await,
                    None => Ok(()),
                }
            };
            // Polled in order on every poll: each is sent, in order,
            // before the COMMIT is.
            let answers = in_order(
                steps
                    .iter()
                    .zip(&statements)
                    .map(|((_, _, params), st)| client.execute(st, params)),
            );
            futures_util::join!(began, answers, client.batch_execute("COMMIT"))
        });
        began.map_err(db("begin"))?;
        for a in answers {
            a.map_err(db("commit"))?;
        }
        self.record_hold(&committed);
        committed.map_err(db("commit"))
    }

    fn record_hold<T>(&self, committed: &Result<T, postgres::Error>) {
        if let (Some(t), Ok(_)) = (self.held_since, committed) {
            let nanos = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
            HELD_NANOS.fetch_add(nanos, std::sync::atomic::Ordering::Relaxed);
            HELD_COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Whether every parameter of `params` encodes as `st` expects it (the
/// count, each type, each value, each length) — what the client checks
/// before it sends a statement, done before anything is sent.
fn encodes(st: &Statement, params: &[&(dyn ToSql + Sync)]) -> Result<(), String> {
    let types = st.params();
    if types.len() != params.len() {
        return Err(format!(
            "{} parameters for {} placeholders",
            params.len(),
            types.len()
        ));
    }
    let mut buf = bytes::BytesMut::new();
    for (i, (ty, p)) in types.iter().zip(params).enumerate() {
        buf.clear();
        p.to_sql_checked(ty, &mut buf)
            .map_err(|e| format!("parameter ${}: {e}", i + 1))?;
        if i32::try_from(buf.len()).is_err() {
            return Err(format!(
                "parameter ${}: {} bytes is too long",
                i + 1,
                buf.len()
            ));
        }
    }
    Ok(())
}

/// Awaits every future of `futs`, polling each, in order, on every poll —
/// so a future that sends on its first poll sends before the next one does.
async fn in_order<F: Future>(futs: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    use futures_util::future::{maybe_done, MaybeDone};
    let mut all: Vec<std::pin::Pin<Box<MaybeDone<F>>>> =
        futs.into_iter().map(|f| Box::pin(maybe_done(f))).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for f in &mut all {
            done &= f.as_mut().poll(cx).is_ready();
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    all.iter_mut()
        .filter_map(|f| f.as_mut().take_output())
        .collect()
}

/// The parameters of `stmts`, as the client takes them.
fn stmt_args(stmts: &[Stmt]) -> Vec<Vec<&(dyn ToSql + Sync)>> {
    stmts
        .iter()
        .map(|s| {
            s.args
                .iter()
                .map(|a| a.as_ref() as &(dyn ToSql + Sync))
                .collect()
        })
        .collect()
}

/// `stmts` as pipeline steps over their `args`.
fn steps_of<'p>(stmts: &'p [Stmt], args: &'p [Vec<&'p (dyn ToSql + Sync)>]) -> Vec<Step<'p>> {
    stmts
        .iter()
        .zip(args)
        .map(|(s, a)| (s.want, s.sql.as_ref(), a.as_slice()))
        .collect()
}

/// Nanoseconds write transactions held their locks, and how many (see
/// [`lock_held`]).
static HELD_NANOS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static HELD_COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How long this process's committed transactions held their locks, as the
/// client sees it (from the reply to the round trip that carried the first
/// statement — a writer's head-row lock — to the `COMMIT`'s reply), summed,
/// and how many transactions. For benchmarks, which print the mean hold of
/// a decision; it bounds nothing.
pub fn lock_held() -> (u64, Duration) {
    (
        HELD_COUNT.load(std::sync::atomic::Ordering::Relaxed),
        Duration::from_nanos(HELD_NANOS.load(std::sync::atomic::Ordering::Relaxed)),
    )
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if self.open {
            // A body's refusal or a failure: nothing of it is kept. A
            // connection that is gone rolled back on the server already.
            let _ = self
                .session
                .rt
                .block_on(self.session.client.batch_execute("ROLLBACK"));
        }
    }
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// A failure of a transaction body: the server's, or the body's own.
#[derive(Debug)]
pub enum TxError<E> {
    /// The server or connection failed.
    Failure(Failure),
    /// The body refused; the transaction was rolled back.
    Refused(E),
}

impl<E> TxError<E> {
    /// The port's error: a refusal as it is, a server failure as
    /// `failure` maps it.
    pub fn settle(self, failure: impl FnOnce(Failure) -> E) -> E {
        match self {
            TxError::Refused(e) => e,
            TxError::Failure(f) => failure(f),
        }
    }
}

impl From<custos_core::columns::ColumnError> for Failure {
    /// A stored column that breaks its rule: corruption naming the table,
    /// the row and the column.
    fn from(e: custos_core::columns::ColumnError) -> Self {
        Failure::Corrupt(e.to_string())
    }
}

impl<E> From<Failure> for TxError<E> {
    fn from(f: Failure) -> Self {
        TxError::Failure(f)
    }
}

/// A stored column that breaks its rule is the machine's own refusal
/// (its `From<ColumnError>`), never a server failure.
impl<E: From<custos_core::columns::ColumnError>> From<custos_core::columns::ColumnError>
    for TxError<E>
{
    fn from(e: custos_core::columns::ColumnError) -> Self {
        TxError::Refused(E::from(e))
    }
}

impl Conn {
    /// Connects now (an unreachable server fails the open).
    pub fn open(target: Target) -> Result<Conn, ConnectError> {
        let session = target.connect_session()?;
        Ok(Conn {
            target,
            pool: Mutex::new(Pool {
                idle: vec![session],
                open: 1,
            }),
            freed: Condvar::new(),
        })
    }

    /// The target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The pool's lock. Its state is changed only by a few assignments
    /// that cannot panic, so a poisoned lock (a caller's thread panicked
    /// elsewhere while holding it) still guards a consistent state.
    fn lock_pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many connections this handle holds open now (idle or in use).
    pub fn open_connections(&self) -> usize {
        self.lock_pool().open
    }

    /// An idle connection, a new one if fewer than the pool's size are
    /// open, or the first freed within [`Waits::checkout`].
    fn checkout(&self) -> Result<Lease<'_>, Failure> {
        let bound = self.target.waits.checkout;
        let deadline = Instant::now() + bound;
        let mut pool = self.lock_pool();
        loop {
            if let Some(mut s) = pool.idle.pop() {
                drop(pool);
                if s.alive() {
                    return Ok(self.lease(Some(s)));
                }
                // Gone while idle: uncounted, and the next is tried.
                pool = self.lock_pool();
                pool.open = pool.open.saturating_sub(1);
                continue;
            }
            if pool.open < self.target.pool_size {
                pool.open += 1;
                drop(pool);
                // Counted before connecting, so concurrent callers never
                // open more than the pool's size; uncounted on failure.
                return match self.target.connect_session() {
                    Ok(session) => Ok(self.lease(Some(session))),
                    Err(e) => {
                        drop(self.lease(None));
                        Err(match e {
                            ConnectError::Unavailable { reason, .. } => {
                                Failure::Unavailable(reason)
                            }
                            other => Failure::Db("connect", other.to_string()),
                        })
                    }
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Failure::Unavailable(format!(
                    "all {} connections of this handle stayed in use for the {} ms checkout bound (Waits::checkout; Target::pool_size sets how many)",
                    self.target.pool_size,
                    bound.as_millis()
                )));
            }
            pool = self
                .freed
                .wait_timeout(pool, left)
                .map_or_else(|p| p.into_inner().0, |(g, _)| g);
        }
    }

    fn lease(&self, session: Option<Session>) -> Lease<'_> {
        Lease {
            conn: self,
            session,
            broken: false,
        }
    }

    /// Runs `body` in one READ COMMITTED transaction and commits it. The
    /// body takes its port's head-row lock first (`SELECT … FOR UPDATE`),
    /// so writers of one scope are totally ordered and later statements
    /// see every earlier writer's rows. A serialization failure or deadlock
    /// (neither expected under that discipline) is retried up to
    /// [`MAX_RETRIES`] times. A body refusal rolls back: nothing written.
    /// A lost reply to COMMIT is `Unavailable`: the write may have applied.
    pub fn write<T, E>(
        &self,
        mut body: impl FnMut(&mut Tx<'_>) -> Result<T, TxError<E>>,
    ) -> Result<T, TxError<E>> {
        self.decide(|tx| body(tx).map(|v| (v, Vec::new())))
    }

    /// [`Conn::write`] for a decision: `body` locks, loads and decides, and
    /// answers with the statements applying its effects, which are sent
    /// with the `COMMIT` in one round trip — so a decision holds its
    /// head-row lock for one round trip and the commit's flush. A failed
    /// effect rolls the whole transaction back (the server answers the
    /// `COMMIT` with a rollback) and is returned.
    pub fn decide<T, E>(
        &self,
        mut body: impl FnMut(&mut Tx<'_>) -> Result<(T, Vec<Stmt>), TxError<E>>,
    ) -> Result<T, TxError<E>> {
        let mut attempt = 0;
        loop {
            let mut lease = self.checkout()?;
            let session = lease.session()?;
            let result = (|| {
                let mut tx = Tx::new(session, "BEGIN ISOLATION LEVEL READ COMMITTED");
                let (v, effects) = body(&mut tx)?;
                tx.commit_with(&effects)?;
                Ok(v)
            })();
            match result {
                Err(TxError::Failure(Failure::Retry(r))) if attempt < MAX_RETRIES => {
                    attempt += 1;
                    tracing::debug!("postgres transaction retried ({attempt}): {r}");
                    drop(lease);
                    std::thread::sleep(Duration::from_millis(u64::from(attempt) * 5));
                }
                Err(TxError::Failure(Failure::Unavailable(r))) => {
                    // Discard the connection if it is gone, so the next
                    // use reconnects.
                    lease.discard_if_gone();
                    return Err(TxError::Failure(Failure::Unavailable(r)));
                }
                other => return other,
            }
        }
    }

    /// Runs `body` in one REPEATABLE READ, READ ONLY transaction: every
    /// statement sees one snapshot; nothing can be written.
    pub fn read<T, E>(
        &self,
        body: impl FnOnce(&mut Tx<'_>) -> Result<T, TxError<E>>,
    ) -> Result<T, TxError<E>> {
        let mut lease = self.checkout()?;
        let session = lease.session()?;
        let result = (|| {
            let mut tx = Tx::new(session, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
            let v = body(&mut tx)?;
            tx.commit()?;
            Ok(v)
        })();
        if matches!(result, Err(TxError::Failure(Failure::Unavailable(_)))) {
            lease.discard_if_gone();
        }
        result
    }

    /// Runs one read statement on its own, outside any explicit
    /// transaction: the statement is its own transaction and sees one
    /// snapshot, so a read answered by a single `SELECT` costs one round
    /// trip (its statement prepared once per connection), not the three of
    /// `BEGIN`, the statement and `COMMIT`. Only for `SELECT`s: nothing
    /// here stops a writing statement, so callers pass only their own
    /// constant reads.
    pub fn query_alone(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Failure> {
        let mut lease = self.checkout()?;
        let session = lease.session()?;
        let result = (|| {
            let st = session.prepared(sql)?;
            trip(1);
            session.rt.block_on(session.client.query(&st, params))
        })()
        .map_err(db(op));
        if matches!(result, Err(Failure::Unavailable(_))) {
            lease.discard_if_gone();
        }
        result
    }

    /// The backend's process id (tests terminate it with
    /// `pg_terminate_backend`).
    pub fn backend_pid(&self) -> Result<i32, Failure> {
        let mut lease = self.checkout()?;
        let session = lease.session()?;
        let row = session
            .rt
            .block_on(session.client.query_one("SELECT pg_backend_pid()", &[]))
            .map_err(db("backend-pid"));
        if matches!(row, Err(Failure::Unavailable(_))) {
            lease.discard_if_gone();
        }
        row?.try_get(0).map_err(db("backend-pid"))
    }
}

/// The server's clock in milliseconds since the Unix epoch, read now
/// (`clock_timestamp()`, not the transaction's start: a transaction that
/// waited for a lock judges leases at the time it decides).
pub fn server_now(tx: &mut Tx<'_>) -> Result<Millis, Failure> {
    let row = tx.query_one(CLOCK_SQL, &[]).map_err(db("clock"))?;
    decode_clock(&row)
}

/// The statement reading the server's clock (see [`server_now`]), for a
/// pipeline: placed after the lock statement, it runs once the lock is
/// held, so a lease is judged at the time of the decision.
pub const CLOCK_SQL: &str = "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint";

/// The answer of [`CLOCK_SQL`].
pub fn decode_clock(row: &Row) -> Result<Millis, Failure> {
    let ms: i64 = row.try_get(0).map_err(db("clock"))?;
    u64::try_from(ms).map_err(|_| Failure::Corrupt(format!("server clock before 1970: {ms}")))
}

/// A stored `bigint` that must be a `u64`.
pub fn to_u64(what: &str, v: i64) -> Result<u64, Failure> {
    u64::try_from(v).map_err(|_| Failure::Corrupt(format!("{what}: negative value {v}")))
}

/// A `u64` as a stored `bigint` (values above `i64::MAX` are out of range).
pub fn to_i64(what: &str, v: u64) -> Result<i64, Failure> {
    i64::try_from(v).map_err(|_| Failure::Db("encode", format!("{what}: {v} exceeds bigint")))
}

/// A component's versioned schema: `steps[i]` takes version `i` to `i+1`
/// (`steps[0]` creates the tables); the supported version is `steps.len()`.
pub struct Component {
    /// The name recorded in `custos_versions`.
    pub name: &'static str,
    /// The DDL of each step, in order.
    pub steps: &'static [&'static str],
}

impl Component {
    /// The version this build writes.
    pub fn supported(&self) -> i64 {
        i64::try_from(self.steps.len()).unwrap_or(i64::MAX)
    }

    /// The recorded version of this component, as one more column of a
    /// writer's head-row lock statement: an open handle reads it in the
    /// transaction that writes, at no extra round trip, so a newer build's
    /// migration made since the open is noticed before anything is written.
    pub(crate) fn version_column(&self) -> String {
        // The name is one of this crate's literals, never input.
        format!(
            "(SELECT version FROM custos_versions WHERE component = '{}')",
            self.name
        )
    }

    /// Refuses a write when the recorded version read by
    /// [`Component::version_column`] is not this build's: a newer build
    /// migrated the schema since this handle opened (or the row is gone).
    /// A fault, not `Unavailable`: retrying the same build cannot help.
    pub(crate) fn check_written(&self, found: Option<i64>) -> Result<(), Failure> {
        if found == Some(self.supported()) {
            return Ok(());
        }
        Err(Failure::Db(
            "schema-version",
            format!(
                "the schema records {} version {}, this build writes version {}: reopen with a build that supports it",
                self.name,
                found.map_or_else(|| "none".to_owned(), |v| v.to_string()),
                self.supported()
            ),
        ))
    }
}
