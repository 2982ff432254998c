//! `--metrics-secure`: the controller binary serves `/metrics` over HTTPS to callers the cell
//! authenticates (TokenReview) and authorizes (SubjectAccessReview on the non-resource URL
//! `/metrics`), against localplane with RBAC enforced. Each request here verifies the certificate
//! it is served: a self-signed one is fetched once and pinned, files made by the test are checked
//! against the CA that signed them.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::binary::{Launch, Proc, http_get, wait_ready};
use crate::common::*;

/// Prometheus's service account, bound to the reader role.
const SCRAPER: &str = "system:serviceaccount:monitoring:prometheus";
const SCRAPER_TOKEN: &str = "scraper-t0ken-never-printed";
/// Authenticated, with no grant to read the metrics.
const STRANGER: &str = "system:serviceaccount:default:someone";
const STRANGER_TOKEN: &str = "stranger-t0ken-never-printed";
const MADE_UP_TOKEN: &str = "made-up-t0ken-never-printed";

const READER_ROLE: &str = "metrics-reader";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Accepts exactly one certificate (or, without one, any, remembering what it was shown), and
/// checks the handshake's signatures against it as any client does.
#[derive(Debug)]
struct Pinned {
    pin: Option<Vec<u8>>,
    seen: Mutex<Option<Vec<u8>>>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.seen.lock().unwrap() = Some(end_entity.to_vec());
        match &self.pin {
            Some(pin) if pin.as_slice() != end_entity.as_ref() => Err(
                rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
            ),
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn client_config(verifier: Arc<dyn ServerCertVerifier>) -> Arc<rustls::ClientConfig> {
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // A resumed session shows no certificate; every request here is to judge the one served.
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

/// A client that trusts the certificates `ca_pem` holds, and checks the name as any does.
fn trusting(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .unwrap();
    client_config(verifier)
}

/// The certificate the server presents now, seen once without judging it.
async fn presented(port: u16) -> Vec<u8> {
    let shown = Arc::new(Pinned {
        pin: None,
        seen: Mutex::new(None),
    });
    let _ = https(&client_config(shown.clone()), port, "/live", None).await;
    let seen = shown.seen.lock().unwrap().clone();
    seen.expect("the server presented a certificate")
}

pub fn pinned(cert: Vec<u8>) -> Arc<rustls::ClientConfig> {
    client_config(Arc::new(Pinned {
        pin: Some(cert),
        seen: Mutex::new(None),
    }))
}

/// One GET over TLS as `localhost`; the status and the body, or why no answer came.
pub async fn https(
    config: &Arc<rustls::ClientConfig>,
    port: u16,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    let mut tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    tls.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    // The server closes without a close_notify when it is done; what was read is the answer.
    let _ = tls.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no HTTP answer: {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// The cell with RBAC, the scraper bound to a reader role (what the install's
/// `metrics-reader` grants), and a stranger with no grant.
async fn plane() -> Plane {
    Plane::with(
        Plane::builder()
            .rbac(true)
            .identity(localplane::Identity::user("scraper", SCRAPER_TOKEN, SCRAPER))
            .identity(localplane::Identity::user("stranger", STRANGER_TOKEN, STRANGER))
            .object(
                "cell",
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                       "metadata": {"name": READER_ROLE},
                       "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
            )
            .object(
                "cell",
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                       "metadata": {"name": "prometheus-reads-metrics"},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER_ROLE},
                       "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]}),
            ),
    )
    .await
}

fn reviews(plane: &Plane, resource: &str) -> u64 {
    plane.requests(|k| k.verb == "create" && k.resource == resource)
}

const TOKEN_REVIEWS: &str = "tokenreviews.authentication.k8s.io";
const ACCESS_REVIEWS: &str = "subjectaccessreviews.authorization.k8s.io";

const DEBUG_LOGS: [&str; 2] = ["--log-format=json", "--log-level=info,egress_address=debug"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_callers_the_cell_vouches_for_read_the_metrics() {
    let plane = plane().await;
    let p = Proc::launch(
        &plane,
        "secure",
        Launch {
            env: &[("METRICS_SECURE", "true")],
            log_flags: Some(&DEBUG_LOGS),
            ..Launch::default()
        },
    );
    // The kubelet's probes: plain HTTP on the probe port, no credential.
    wait_ready(&p).await;
    for path in ["/live", "/healthz", "/ready", "/readyz"] {
        assert_eq!(http_get(p.probe, path).await.unwrap().0, 200, "{path}");
    }
    // The probe port hands out no metrics, and the metrics port speaks no plain HTTP.
    assert_eq!(http_get(p.probe, "/metrics").await.unwrap().0, 404);
    assert!(
        !matches!(http_get(p.metrics, "/metrics").await, Some((200, _))),
        "plain HTTP on the secure port"
    );

    // The self-signed certificate, pinned: every request below checks it is the one served.
    let cert = presented(p.metrics).await;
    let tls = pinned(cert.clone());
    plane.reset_counters();

    let (code, body) = https(&tls, p.metrics, "/metrics", None).await.unwrap();
    assert_eq!((code, body.as_str()), (401, "Unauthorized\n"));
    assert_eq!(
        reviews(&plane, TOKEN_REVIEWS),
        0,
        "no token, nothing to review"
    );
    let (code, _) = https(&tls, p.metrics, "/metrics", Some(MADE_UP_TOKEN))
        .await
        .unwrap();
    assert_eq!(code, 401);
    let (code, body) = https(&tls, p.metrics, "/metrics", Some(STRANGER_TOKEN))
        .await
        .unwrap();
    assert_eq!(code, 403, "{body}");
    assert!(body.contains(STRANGER), "{body}");
    let (code, body) = https(&tls, p.metrics, "/metrics", Some(SCRAPER_TOKEN))
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("egress_address_build_info{"), "{body}");
    assert_eq!(
        (
            reviews(&plane, TOKEN_REVIEWS),
            reviews(&plane, ACCESS_REVIEWS)
        ),
        (3, 2),
        "a review of each token; an access review for each user the cell knows"
    );

    // The secure port serves /metrics only: health stays on the probe port.
    for path in ["/ready", "/live", "/"] {
        let (code, _) = https(&tls, p.metrics, path, Some(SCRAPER_TOKEN))
            .await
            .unwrap();
        assert_eq!(code, 404, "{path}");
    }

    // Scrapes that follow are answered from the cache: no review at all.
    for _ in 0..5 {
        let (code, _) = https(&tls, p.metrics, "/metrics", Some(SCRAPER_TOKEN))
            .await
            .unwrap();
        assert_eq!(code, 200);
        let (code, _) = https(&tls, p.metrics, "/metrics", Some(STRANGER_TOKEN))
            .await
            .unwrap();
        assert_eq!(code, 403);
    }
    assert_eq!(
        (
            reviews(&plane, TOKEN_REVIEWS),
            reviews(&plane, ACCESS_REVIEWS)
        ),
        (3, 2),
        "ten more requests, no more reviews"
    );
    let (_, body) = https(&tls, p.metrics, "/metrics", Some(SCRAPER_TOKEN))
        .await
        .unwrap();
    // Counted before the answer is written, so this very request is in it.
    for (result, source, expected) in [
        ("unauthenticated", "header", 1.0),
        ("unauthenticated", "review", 1.0),
        ("forbidden", "review", 1.0),
        ("allowed", "review", 1.0),
        ("allowed", "cache", 6.0),
        ("forbidden", "cache", 5.0),
        ("error", "review", 0.0),
    ] {
        let series = format!(
            "egress_address_metrics_auth_total{{result=\"{result}\",source=\"{source}\"}} "
        );
        let count: f64 = body
            .lines()
            .find_map(|l| l.strip_prefix(&series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} in\n{body}"));
        assert_eq!(count, expected, "{series}");
    }
    assert_eq!(
        presented(p.metrics).await,
        cert,
        "the same certificate throughout"
    );

    p.sigterm();
    let mut p = p;
    let (code, log) = p.wait_exit(10).await;
    assert_eq!(code, Some(0), "{log}");
    for token in [SCRAPER_TOKEN, STRANGER_TOKEN, MADE_UP_TOKEN] {
        assert!(!log.contains(token), "the log shows a token:\n{log}");
    }
    assert!(
        log.contains("refused /metrics"),
        "denials are logged at debug:\n{log}"
    );
    assert!(log.contains("serving /metrics over HTTPS"), "{log}");
}

/// A CA, and a serving certificate for `localhost` it signed: (CA PEM, certificate PEM, key PEM).
fn signed_pair() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "metrics-test-ca");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca_cert.pem(), leaf.pem(), key.serialize_pem())
}

fn write_pair(dir: &Path, cert: &str, key: &str) {
    // As the kubelet swaps a Secret's files: written aside, then moved in place.
    for (name, text) in [("cert.pem", cert), ("key.pem", key)] {
        let aside = dir.join(format!(".{name}.new"));
        std::fs::write(&aside, text).unwrap();
        std::fs::rename(&aside, dir.join(name)).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_files_is_served_and_followed_when_it_changes() {
    let plane = plane().await;
    let certs = tempfile::tempdir().unwrap();
    let (first_ca, cert, key) = signed_pair();
    write_pair(certs.path(), &cert, &key);
    let dir = certs.path().to_str().unwrap();
    let p = Proc::launch(
        &plane,
        "files",
        Launch {
            env: &[
                ("METRICS_SECURE", "true"),
                ("METRICS_CERT_PATH", dir),
                ("METRICS_CERT_NAME", "cert.pem"),
                ("METRICS_CERT_KEY", "key.pem"),
            ],
            ..Launch::default()
        },
    );
    wait_ready(&p).await;
    let first = trusting(&first_ca);
    let (code, body) = https(&first, p.metrics, "/metrics", Some(SCRAPER_TOKEN))
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");

    // Rotated: a certificate of another CA. New connections get it; the first CA no longer
    // vouches for what is served.
    let (second_ca, cert, key) = signed_pair();
    write_pair(certs.path(), &cert, &key);
    let second = trusting(&second_ca);
    eventually(30, "the rotated certificate to be served", || async {
        https(&second, p.metrics, "/metrics", Some(SCRAPER_TOKEN))
            .await
            .ok()
            .filter(|(code, _)| *code == 200)
    })
    .await;
    let refused = https(&first, p.metrics, "/metrics", Some(SCRAPER_TOKEN)).await;
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("handshake")),
        "{refused:?}"
    );

    // A key that belongs to no certificate there: logged, and the rotated pair stays.
    std::fs::write(certs.path().join("key.pem"), signed_pair().2).unwrap();
    let log_path = p.log.clone();
    eventually(30, "the unusable pair to be logged", || async {
        std::fs::read_to_string(&log_path)
            .ok()
            .filter(|log| log.contains("the previous one stays in use"))
    })
    .await;
    let (code, _) = https(&second, p.metrics, "/metrics", Some(SCRAPER_TOKEN))
        .await
        .unwrap();
    assert_eq!(code, 200);
}

#[test]
fn a_secure_metrics_port_shared_with_the_probes_or_an_unusable_certificate_stops_the_start() {
    let same = crate::binary::run(
        &[
            "--address-class-ipv6=c",
            "--location=l",
            "--platform-project=p",
            "--ipam-kubeconfig=/k",
            "--metrics-secure",
            "--metrics-bind-address=127.0.0.1:9443",
            "--health-probe-bind-address=127.0.0.1:9443",
        ],
        &[],
    );
    assert_eq!(same.status.code(), Some(1));
    let err = crate::binary::stderr(&same);
    assert!(
        err.contains("--metrics-bind-address and --health-probe-bind-address must differ"),
        "{err}"
    );

    let empty = tempfile::tempdir().unwrap();
    let missing = crate::binary::run(
        &[
            "--address-class-ipv6=c",
            "--location=l",
            "--platform-project=p",
            "--ipam-kubeconfig=/k",
            "--metrics-secure",
            &format!("--metrics-cert-path={}", empty.path().display()),
        ],
        &[],
    );
    assert_eq!(missing.status.code(), Some(1));
    let err = crate::binary::stderr(&missing);
    assert!(
        err.contains("the metrics server's certificate") && err.contains("tls.crt"),
        "{err}"
    );

    let plain = crate::binary::run(
        &[
            "--address-class-ipv6=c",
            "--location=l",
            "--platform-project=p",
            "--ipam-kubeconfig=/k",
            "--metrics-cert-path=/certs",
        ],
        &[],
    );
    assert_eq!(plain.status.code(), Some(1));
    assert!(
        crate::binary::stderr(&plain).contains("--metrics-cert-path needs --metrics-secure"),
        "{}",
        crate::binary::stderr(&plain)
    );
}
