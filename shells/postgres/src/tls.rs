//! TLS on the wire: the connection string's `sslmode` and `sslrootcert`,
//! read as libpq reads them, carried out by rustls (with the ring provider)
//! through the maintained `tokio-postgres-rustls` integration.
//!
//! | `sslmode` | encrypted | server certificate checked |
//! | --- | --- | --- |
//! | `disable` | never | — |
//! | `prefer` (the default) | when the server offers TLS | no (as libpq) |
//! | `require` | always: a server without TLS is refused | no; as `verify-ca` when `sslrootcert` is given (as libpq) |
//! | `verify-ca` | always | chained to `sslrootcert`'s CA; the host name is not compared |
//! | `verify-full` | always | chained to `sslrootcert`'s CA **and** naming the host connected to |
//!
//! `verify-ca` and `verify-full` need `sslrootcert=<path of a PEM file>`
//! (libpq's fallback to `~/.postgresql/root.crt` is not followed: the CA
//! trusted is always the one the string names). `allow` and client
//! certificates (`sslcert`, `sslkey`) are refused at [`crate::Target::new`].

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::conn::ConnectError;

/// The largest `sslrootcert` file read, in bytes.
pub const MAX_ROOT_CERT_LEN: u64 = 1 << 20;

/// How a connection uses TLS: the connection string's `sslmode` (the
/// [module docs](self) tabulate each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsMode {
    /// Never encrypted.
    Disable,
    /// Encrypted when the server offers it; the certificate is not checked.
    Prefer,
    /// Always encrypted; the certificate is not checked.
    Require,
    /// Always encrypted; the certificate chains to the named CA.
    VerifyCa,
    /// Always encrypted; the certificate chains to the named CA and names
    /// the host.
    VerifyFull,
}

impl TlsMode {
    /// The `sslmode` word.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Disable => "disable",
            TlsMode::Prefer => "prefer",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a server without TLS is refused.
    pub fn required(self) -> bool {
        !matches!(self, TlsMode::Disable | TlsMode::Prefer)
    }
}

/// The TLS parameters of a connection string, taken out of it before the
/// client's own parser (which knows neither `verify-*` nor `sslrootcert`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// The mode (`prefer` when the string names none, as libpq).
    pub mode: TlsMode,
    /// The `sslrootcert` path, if given.
    pub root_cert: Option<String>,
}

/// The keys this module takes out of a connection string.
pub(crate) const TLS_KEYS: [&str; 2] = ["sslmode", "sslrootcert"];

/// Keys refused outright: client certificates are not supported.
pub(crate) const REFUSED_KEYS: [&str; 3] = ["sslcert", "sslkey", "sslpassword"];

fn invalid(detail: &'static str) -> ConnectError {
    ConnectError::InvalidUrl { detail }
}

/// Reads the TLS settings from the `(key, value)` pairs taken out of a
/// connection string.
pub(crate) fn settings(pairs: &[(String, String)]) -> Result<TlsSettings, ConnectError> {
    let mut mode = None;
    let mut root_cert = None;
    for (k, v) in pairs {
        match k.as_str() {
            "sslmode" => {
                mode =
                    Some(match v.as_str() {
                        "disable" => TlsMode::Disable,
                        "prefer" => TlsMode::Prefer,
                        "require" => TlsMode::Require,
                        "verify-ca" => TlsMode::VerifyCa,
                        "verify-full" => TlsMode::VerifyFull,
                        _ => return Err(invalid(
                            "sslmode is one of disable, prefer, require, verify-ca, verify-full",
                        )),
                    });
            }
            "sslrootcert" => root_cert = Some(v.clone()),
            _ => {
                return Err(invalid(
                    "client certificates (sslcert, sslkey) are not supported",
                ))
            }
        }
    }
    let mode =
        match (mode.unwrap_or(TlsMode::Prefer), &root_cert) {
            // As libpq: a named root certificate makes `require` check the chain.
            (TlsMode::Require, Some(_)) => TlsMode::VerifyCa,
            (TlsMode::VerifyCa | TlsMode::VerifyFull, None) => return Err(invalid(
                "sslmode=verify-ca and verify-full need sslrootcert=<path of the CA's PEM file>",
            )),
            (m, _) => m,
        };
    Ok(TlsSettings { mode, root_cert })
}

/// The connector for `settings`, its root certificates read now: `None`
/// for `disable`.
pub(crate) fn connector(settings: &TlsSettings) -> Result<Option<MakeRustlsConnect>, ConnectError> {
    // ring, not aws-lc-rs: no C build of aws-lc on every machine that
    // builds this shell. rustls 0.23.48 deprecates ring's provider for its
    // lack of post-quantum key exchange; PostgreSQL servers negotiate that
    // only when built against OpenSSL 3.5 or later, and the classical
    // groups ring offers (X25519, P-256, P-384) are what they accept.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(format!("rustls refuses its default protocol versions: {e}")))?;
    let config = match settings.mode {
        TlsMode::Disable => return Ok(None),
        TlsMode::Prefer | TlsMode::Require => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked { provider }))
            .with_no_client_auth(),
        TlsMode::VerifyCa => {
            let roots = Arc::new(read_roots(settings.root_cert.as_deref())?);
            let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| tls_error(format!("the root certificates are unusable: {e}")))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly { inner }))
                .with_no_client_auth()
        }
        TlsMode::VerifyFull => builder
            .with_root_certificates(read_roots(settings.root_cert.as_deref())?)
            .with_no_client_auth(),
    };
    Ok(Some(MakeRustlsConnect::new(config)))
}

fn tls_error(detail: String) -> ConnectError {
    ConnectError::InvalidTls { detail }
}

/// The CA certificates of a PEM file, read with a bound on its size (the
/// path is not a secret; the file's text is never echoed).
fn read_roots(path: Option<&str>) -> Result<RootCertStore, ConnectError> {
    use std::io::Read;
    let path = path.ok_or_else(|| tls_error("no sslrootcert".to_owned()))?;
    let shown = custos_core::root::printable(path);
    let file =
        std::fs::File::open(path).map_err(|e| tls_error(format!("sslrootcert {shown}: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_ROOT_CERT_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| tls_error(format!("sslrootcert {shown}: {e}")))?;
    if bytes.len() as u64 > MAX_ROOT_CERT_LEN {
        return Err(tls_error(format!(
            "sslrootcert {shown}: longer than {MAX_ROOT_CERT_LEN} bytes"
        )));
    }
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        let cert = cert
            .map_err(|_| tls_error(format!("sslrootcert {shown}: not a PEM certificate file")))?;
        roots
            .add(cert)
            .map_err(|e| tls_error(format!("sslrootcert {shown}: {e}")))?;
    }
    if roots.is_empty() {
        return Err(tls_error(format!(
            "sslrootcert {shown}: holds no certificate"
        )));
    }
    Ok(roots)
}

/// `prefer` and `require` without a root certificate: the connection is
/// encrypted and the handshake's signatures are checked, but the server's
/// certificate is not (libpq's meaning of these modes).
#[derive(Debug)]
struct Unchecked {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `verify-ca`: the certificate must chain to the named CA (and be valid
/// now); the host name it carries is not compared with the host.
#[derive(Debug)]
struct ChainOnly {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The chain is checked before the name: a name mismatch means the
        // chain passed.
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
