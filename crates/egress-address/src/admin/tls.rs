//! HTTPS for the secure metrics listener (`--metrics-secure`): the serving certificate and the
//! server that presents it.
//!
//! The certificate comes from files (`--metrics-cert-path` with `--metrics-cert-name` and
//! `--metrics-cert-key`, as a cert-manager Secret mounts them) or, without them, is made at start
//! and signed by itself. Files are looked at every [`CERT_POLL`] and a changed pair is taken for
//! new connections, so a rotated Secret needs no restart; a pair that does not load (a key of
//! another certificate, a file half written) is logged and the previous one stays. A self-signed
//! certificate is valid for a year and made anew after half of it.
//!
//! The server speaks HTTP/1.1 only: a scraper needs nothing more, and it keeps HTTP/2's stream
//! floods off a port that is open to every namespace allowed to scrape.

use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::connect::follow::{Seen, fingerprint, next_look};
use crate::error::Error;

/// How often certificate files are looked at.
pub const CERT_POLL: Duration = Duration::from_secs(5);
/// How long a self-signed certificate is valid.
const SELF_SIGNED_VALIDITY_DAYS: i64 = 365;
/// A self-signed certificate is made anew after this long, well before it expires.
const SELF_SIGNED_RENEWAL: Duration = Duration::from_secs(182 * 24 * 3600);
/// A connection that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A request whose headers have not arrived by then is dropped with its connection.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The name a self-signed certificate is issued to.
const SELF_SIGNED_COMMON_NAME: &str = "egress-address-controller";

/// Why no certificate could be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate in it ({message})")]
    Certificate { path: PathBuf, message: String },
    #[error("{path}: no PEM private key in it ({message})")]
    Key { path: PathBuf, message: String },
    #[error("the key in {key} is not the key of the certificate in {cert}: {message}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
    #[error("make a self-signed certificate: {0}")]
    SelfSigned(String),
    #[error("the TLS settings: {0}")]
    Settings(String),
}

impl TlsError {
    /// A short, stable label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            TlsError::Read { .. } => "read",
            TlsError::Certificate { .. } => "certificate",
            TlsError::Key { .. } => "key",
            TlsError::Mismatch { .. } => "mismatch",
            TlsError::SelfSigned(_) => "self_signed",
            TlsError::Settings(_) => "settings",
        }
    }
}

/// Where the serving certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    /// Made at start and signed by itself, for these DNS names and IP addresses.
    SelfSigned { names: Vec<String> },
    /// A PEM certificate (its chain may follow it) and its PEM private key.
    Files { cert: PathBuf, key: PathBuf },
}

impl CertSource {
    /// Files when `files` names them, else a self-signed certificate for the loopback names and
    /// `hostname` (a pod's name, which Kubernetes sets as `HOSTNAME`).
    pub fn from_flags(files: Option<(PathBuf, PathBuf)>, hostname: Option<String>) -> CertSource {
        match files {
            Some((cert, key)) => CertSource::Files { cert, key },
            None => {
                let mut names: Vec<String> =
                    ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
                names.extend(hostname.filter(|h| !h.trim().is_empty() && !names.contains(h)));
                CertSource::SelfSigned { names }
            }
        }
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate presented to every new connection; swapped in place when it changes.
pub struct ServingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl std::fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCert")
            .field("sha256", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(crate::sync::read(&self.current).clone())
    }
}

impl ServingCert {
    /// The certificate `source` names, and the task that keeps it current.
    pub fn load(source: &CertSource) -> Result<(Arc<ServingCert>, CertFollower), TlsError> {
        let (first, loaded) = match source {
            CertSource::SelfSigned { names } => (self_signed(names)?, None),
            CertSource::Files { cert, key } => (from_files(cert, key)?, fingerprint(&[cert, key])),
        };
        let serving = Arc::new(ServingCert {
            current: RwLock::new(Arc::new(first)),
        });
        let follower = CertFollower {
            source: source.clone(),
            serving: serving.clone(),
            seen: Seen::serving(loaded),
            made: Instant::now(),
            poll: CERT_POLL,
        };
        Ok((serving, follower))
    }

    /// The DER of the certificate served now (the first of its chain).
    pub fn end_entity(&self) -> Vec<u8> {
        crate::sync::read(&self.current)
            .cert
            .first()
            .map(|c| c.to_vec())
            .unwrap_or_default()
    }

    /// The SHA-256 of the served certificate, in hex: what a log line names it by.
    pub fn fingerprint(&self) -> String {
        hex::encode(Sha256::digest(self.end_entity()))
    }

    fn replace(&self, key: CertifiedKey) {
        *crate::sync::write(&self.current) = Arc::new(key);
    }

    /// The TLS settings of the secure listener: TLS 1.2 and 1.3, HTTP/1.1, this certificate.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Settings(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A key and a certificate for `names`, signed by that key, valid from a day before now for a
/// year.
fn self_signed(names: &[String]) -> Result<CertifiedKey, TlsError> {
    let fail = |e: rcgen::Error| TlsError::SelfSigned(e.to_string());
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(fail)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, SELF_SIGNED_COMMON_NAME);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let day = |offset_days: i64| {
        let date = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_hours(24 * offset_days))
            .unwrap_or_else(|_| jiff::Timestamp::now())
            .to_zoned(jiff::tz::TimeZone::UTC)
            .date();
        rcgen::date_time_ymd(
            i32::from(date.year()),
            date.month().unsigned_abs(),
            date.day().unsigned_abs(),
        )
    };
    params.not_before = day(-1);
    params.not_after = day(SELF_SIGNED_VALIDITY_DAYS);
    let key = rcgen::KeyPair::generate().map_err(fail)?;
    let cert = params.self_signed(&key).map_err(fail)?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    CertifiedKey::from_der(vec![cert.der().clone()], der, &provider())
        .map_err(|e| TlsError::SelfSigned(e.to_string()))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The pair in `cert` and `key`, refused unless the key is the certificate's.
fn from_files(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let cert_pem = read(cert)?;
    let key_pem = read(key)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Certificate {
            path: cert.to_path_buf(),
            message: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Certificate {
            path: cert.to_path_buf(),
            message: "the file holds no CERTIFICATE block".into(),
        });
    }
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Key {
        path: key.to_path_buf(),
        message: e.to_string(),
    })?;
    CertifiedKey::from_der(chain, private, &provider()).map_err(|e| TlsError::Mismatch {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        message: e.to_string(),
    })
}

/// Keeps the served certificate current: re-reads changed files, renews a self-signed one.
pub struct CertFollower {
    source: CertSource,
    serving: Arc<ServingCert>,
    seen: Seen,
    made: Instant,
    poll: Duration,
}

impl CertFollower {
    /// Looks this often instead of every [`CERT_POLL`].
    pub fn poll_every(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    pub async fn run(mut self, stop: CancellationToken) {
        while next_look(&stop, self.poll, None).await {
            match self.look() {
                Ok(true) => info!(
                    sha256 = %self.serving.fingerprint(),
                    "the metrics certificate changed; new connections get the new one"
                ),
                Ok(false) => {}
                Err(err) => warn!(
                    error = %err,
                    reason = err.metric_label(),
                    "the metrics certificate changed but cannot be used; the previous one stays in use"
                ),
            }
        }
    }

    /// One look: whether the served certificate was replaced. A pair that failed to load is
    /// not tried again until the files change once more.
    fn look(&mut self) -> Result<bool, TlsError> {
        let fresh = match &self.source {
            CertSource::SelfSigned { names } => {
                if self.made.elapsed() < SELF_SIGNED_RENEWAL {
                    return Ok(false);
                }
                let fresh = self_signed(names)?;
                self.made = Instant::now();
                fresh
            }
            CertSource::Files { cert, key } => {
                let Some(now) = self.seen.fresh(fingerprint(&[cert, key])) else {
                    return Ok(false);
                };
                self.seen.load(now, from_files(cert, key))?
            }
        };
        self.serving.replace(fresh);
        Ok(true)
    }
}

/// Serves `router` over TLS on `listener` until `stop` resolves; then stops accepting and lets
/// the requests in flight finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Arc<rustls::ServerConfig>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let mut stop = pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: a moment later may go better, and a
                    // loop without a pause would spin on it.
                    warn!(error = %err, "could not accept a metrics connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(err)) => {
                    debug!(%peer, error = %err, "TLS handshake on the metrics port failed");
                    return;
                }
                Err(_) => {
                    debug!(%peer, "TLS handshake on the metrics port timed out");
                    return;
                }
            };
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let connection = http.serve_connection(TokioIo::new(stream), service);
            if let Err(err) = watcher.watch(connection).await {
                debug!(%peer, error = %err, "a metrics connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    fn write(dir: &Path, (cert, key): &(String, String)) -> (PathBuf, PathBuf) {
        let (c, k) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        (c, k)
    }

    #[test]
    fn the_flags_choose_files_or_a_self_signed_certificate_for_this_host() {
        assert_eq!(
            CertSource::from_flags(Some(("c".into(), "k".into())), Some("pod-0".into())),
            CertSource::Files {
                cert: "c".into(),
                key: "k".into()
            }
        );
        assert_eq!(
            CertSource::from_flags(None, Some("pod-0".into())),
            CertSource::SelfSigned {
                names: vec![
                    "localhost".into(),
                    "127.0.0.1".into(),
                    "::1".into(),
                    "pod-0".into()
                ]
            }
        );
        for hostname in [None, Some(String::new()), Some("localhost".into())] {
            let CertSource::SelfSigned { names } = CertSource::from_flags(None, hostname) else {
                panic!("self-signed");
            };
            assert_eq!(names.len(), 3, "{names:?}");
        }
    }

    #[test]
    fn a_self_signed_certificate_names_what_it_is_for() {
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let (serving, _) = ServingCert::load(&CertSource::SelfSigned { names }).unwrap();
        let der = serving.end_entity();
        let text = String::from_utf8_lossy(&der);
        assert!(
            text.contains("localhost"),
            "the DNS name is in the certificate"
        );
        assert!(text.contains(SELF_SIGNED_COMMON_NAME));
        assert_eq!(serving.fingerprint().len(), 64);
        serving.server_config().unwrap();
    }

    #[test]
    fn files_load_and_a_key_of_another_certificate_is_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = write(dir.path(), &pair(&["metrics.test"]));
        let loaded = from_files(&cert, &key).unwrap();
        assert_eq!(loaded.cert.len(), 1);

        let other = pair(&["other.test"]);
        std::fs::write(&key, &other.1).unwrap();
        let err = from_files(&cert, &key).unwrap_err();
        assert_eq!(err.metric_label(), "mismatch", "{err}");
        let text = err.to_string();
        assert!(
            text.contains("tls.key") && text.contains("tls.crt"),
            "{text}"
        );

        std::fs::write(&key, "not a key").unwrap();
        assert_eq!(from_files(&cert, &key).unwrap_err().metric_label(), "key");
        std::fs::write(&cert, "not a certificate").unwrap();
        assert_eq!(
            from_files(&cert, &key).unwrap_err().metric_label(),
            "certificate"
        );
        let missing = dir.path().join("missing.crt");
        let err = from_files(&missing, &key).unwrap_err();
        assert_eq!(err.metric_label(), "read");
        assert!(err.to_string().contains("missing.crt"), "{err}");
    }

    #[test]
    fn changed_files_are_taken_and_a_bad_pair_keeps_the_previous_one() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = write(dir.path(), &pair(&["first.test"]));
        let source = CertSource::Files {
            cert: cert.clone(),
            key: key.clone(),
        };
        let (serving, mut follower) = ServingCert::load(&source).unwrap();
        let first = serving.fingerprint();
        assert!(!follower.look().unwrap(), "unchanged");

        // A rotation that wrote the certificate but not yet its key: refused, kept.
        let second = pair(&["second.test"]);
        std::fs::write(&cert, &second.0).unwrap();
        assert_eq!(follower.look().unwrap_err().metric_label(), "mismatch");
        assert_eq!(serving.fingerprint(), first);
        assert!(!follower.look().unwrap(), "not tried twice");
        // The key arrives: taken.
        std::fs::write(&key, &second.1).unwrap();
        assert!(follower.look().unwrap());
        assert_ne!(serving.fingerprint(), first);
        assert!(String::from_utf8_lossy(&serving.end_entity()).contains("second.test"));
        assert!(!follower.look().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_self_signed_certificate_is_renewed_after_half_its_life() {
        let source = CertSource::SelfSigned {
            names: vec!["localhost".into()],
        };
        let (serving, mut follower) = ServingCert::load(&source).unwrap();
        let first = serving.fingerprint();
        tokio::time::advance(SELF_SIGNED_RENEWAL - Duration::from_secs(1)).await;
        assert!(!follower.look().unwrap());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(follower.look().unwrap());
        assert_ne!(serving.fingerprint(), first);
    }
}
