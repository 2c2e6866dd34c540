//! TLS on the wire against a private cluster whose certificate is made at
//! test time: `require` encrypts, `verify-full` succeeds against the right
//! CA and host name and refuses a wrong CA and a wrong host, `verify-ca`
//! checks the chain and not the name, `require` refuses a server without
//! TLS, bad TLS parameters are refused before any connection, and a port
//! works end to end over `verify-full`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::OnceLock;

use custos_postgres::ledger::PgLedger;
use custos_postgres::{ConnectError, Target, TlsMode};
use custos_testkit::pg_cluster::{shared, unique_schema, Cluster};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};

/// The server's certificate names `db.custos.test` and `127.0.0.1`, so
/// connecting to `localhost` is a wrong host name.
const SERVER_NAMES: [&str; 2] = ["db.custos.test", "127.0.0.1"];

struct Pki {
    cluster: Cluster,
    dir: tempfile::TempDir,
}

impl Pki {
    fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }
    fn other_ca(&self) -> PathBuf {
        self.dir.path().join("other-ca.pem")
    }
    /// The cluster's URL to `host`, with `params` appended.
    fn url(&self, host: &str, params: &str) -> String {
        self.cluster
            .url()
            .replace("@127.0.0.1:", &format!("@{host}:"))
            + "?"
            + params
    }
}

fn new_ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(|| {
        let ca = new_ca("custos test CA");
        let other = new_ca("another CA");
        let mut params = CertificateParams::new(SERVER_NAMES.map(str::to_owned).to_vec()).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("other-ca.pem"), other.pem()).unwrap();
        let cluster = Cluster::start_with_tls(&cert.pem(), &key.serialize_pem()).unwrap();
        Pki { cluster, dir }
    })
}

/// Whether the connection `url` opens is encrypted, as the server sees it.
fn encrypted(url: &str) -> Result<bool, ConnectError> {
    let mut client = Target::new(url, "public")?.connect()?;
    Ok(client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0))
}

fn refusal(url: &str) -> String {
    let e = encrypted(url).expect_err("the connection must be refused");
    let text = e.to_string();
    assert!(matches!(e, ConnectError::Unavailable { .. }), "{text}");
    assert!(!text.contains(pki().cluster.password()), "{text}");
    text
}

#[test]
fn require_encrypts_and_disable_does_not() {
    let p = pki();
    assert!(encrypted(&p.url("127.0.0.1", "sslmode=require")).unwrap());
    assert!(!encrypted(&p.url("127.0.0.1", "sslmode=disable")).unwrap());
    // No sslmode is `prefer`, as libpq: encrypted when the server offers.
    assert!(encrypted(&p.cluster.url()).unwrap());
    // `require` accepts a certificate it cannot check, as libpq does.
    assert!(encrypted(&p.url("localhost", "sslmode=require")).unwrap());
    let t = Target::new(p.url("127.0.0.1", "sslmode=require"), "public").unwrap();
    assert_eq!(t.tls_mode(), TlsMode::Require);
    assert!(format!("{t:?}").contains("Require"), "{t:?}");
}

#[test]
fn verify_full_accepts_the_right_ca_and_host_and_refuses_a_wrong_ca_or_host() {
    let p = pki();
    let ca = p.ca().display().to_string();
    let other = p.other_ca().display().to_string();
    let right = format!("sslmode=verify-full&sslrootcert={ca}");
    assert!(encrypted(&p.url("127.0.0.1", &right)).unwrap());
    let wrong_ca = refusal(&p.url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={other}"),
    ));
    assert!(wrong_ca.contains("UnknownIssuer"), "{wrong_ca}");
    let wrong_host = refusal(&p.url("localhost", &right));
    assert!(
        wrong_host.contains("not valid for name \"localhost\""),
        "{wrong_host}"
    );
    // The keyword form reads the same settings.
    let kv = format!(
        "host=127.0.0.1 port={} user=custos password='{}' dbname=custos sslmode = verify-full sslrootcert='{ca}'",
        p.cluster.port(),
        p.cluster.password()
    );
    assert!(encrypted(&kv).unwrap());
    let kv_wrong = kv.replace(&ca, &other);
    assert!(refusal(&kv_wrong).contains("UnknownIssuer"));
}

#[test]
fn verify_ca_checks_the_chain_not_the_name() {
    let p = pki();
    let ca = p.ca().display().to_string();
    let other = p.other_ca().display().to_string();
    assert!(
        encrypted(&p.url("localhost", &format!("sslmode=verify-ca&sslrootcert={ca}"))).unwrap()
    );
    assert!(refusal(&p.url(
        "localhost",
        &format!("sslmode=verify-ca&sslrootcert={other}")
    ))
    .contains("UnknownIssuer"));
    // `require` with a root certificate checks the chain, as libpq.
    let t = Target::new(
        p.url("localhost", &format!("sslmode=require&sslrootcert={other}")),
        "public",
    )
    .unwrap();
    assert_eq!(t.tls_mode(), TlsMode::VerifyCa);
    assert!(t.connect().is_err());
}

#[test]
fn require_refuses_a_server_without_tls() {
    let plain = shared().unwrap();
    let text = refusal(&format!("{}?sslmode=require", plain.url()));
    assert!(text.contains("TLS") || text.contains("SSL"), "{text}");
    // `prefer` falls back to a plain connection.
    assert!(!encrypted(&format!("{}?sslmode=prefer", plain.url())).unwrap());
}

#[test]
fn bad_tls_parameters_are_refused_before_connecting() {
    let p = pki();
    let cases = [
        ("sslmode=verify-full", "need sslrootcert"),
        ("sslmode=allow", "sslmode is one of"),
        ("sslmode=bogus", "sslmode is one of"),
        ("sslmode=require&sslcert=/tmp/c.pem", "client certificates"),
    ];
    for (params, want) in cases {
        let e = Target::new(p.url("127.0.0.1", params), "public").unwrap_err();
        assert!(
            matches!(e, ConnectError::InvalidUrl { .. }) && e.to_string().contains(want),
            "{params}: {e}"
        );
    }
    let missing = Target::new(
        p.url(
            "127.0.0.1",
            "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
        ),
        "public",
    )
    .unwrap_err();
    assert!(
        matches!(missing, ConnectError::InvalidTls { .. }),
        "{missing}"
    );
    let not_pem = p.dir.path().join("not.pem");
    std::fs::write(&not_pem, "no certificate here").unwrap();
    let e = Target::new(
        p.url(
            "127.0.0.1",
            &format!("sslmode=verify-full&sslrootcert={}", not_pem.display()),
        ),
        "public",
    )
    .unwrap_err();
    assert!(e.to_string().contains("holds no certificate"), "{e}");
    // Other parameters survive the TLS keys' removal.
    let t = Target::new(
        p.url(
            "127.0.0.1",
            &format!(
                "sslmode=verify-full&options=-c%20statement_timeout%3D1234&sslrootcert={}",
                p.ca().display()
            ),
        ),
        "public",
    )
    .unwrap();
    let mut client = t.connect().unwrap();
    let v: String = client
        .query_one("SHOW statement_timeout", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, "1234ms");
}

#[test]
fn the_ledger_runs_over_verify_full() {
    let p = pki();
    let url = p.url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={}", p.ca().display()),
    );
    let fresh = || PgLedger::open(Target::new(&url, unique_schema("tls")).unwrap()).unwrap();
    custos_conformance::ledger::attach_creates_an_open_scope(fresh);
    custos_conformance::ledger::admit_is_fresh_exactly_once(fresh);
}
