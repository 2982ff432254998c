//! HTTPS on loopback with a throwaway CA. kubectl (client-go) sends bearer tokens only over TLS,
//! so token identities need it; the CA goes into every kubeconfig.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA and the serving certificate it signed (for `localhost`, `127.0.0.1` and `::1`).
#[derive(Clone)]
pub struct TlsMaterial {
    /// The CA certificate, PEM (what `certificate-authority-data` carries, base64-encoded).
    pub ca_pem: String,
    /// The CA certificate, DER (what `kube::Config::root_cert` takes).
    pub ca_der: Vec<u8>,
    pub(crate) server: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial").finish_non_exhaustive()
    }
}

impl TlsMaterial {
    pub fn generate() -> anyhow::Result<TlsMaterial> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "localplane-ca");
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);
        let mut leaf_params = CertificateParams::new(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ])?;
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, "localplane");
        let leaf_key = KeyPair::generate()?;
        let leaf = leaf_params.signed_by(&leaf_key, &issuer)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let mut server = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![
                CertificateDer::from(leaf.der().to_vec()),
                ca_cert.der().clone(),
            ],
            key,
        )?;
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsMaterial {
            ca_pem: ca_cert.pem(),
            ca_der: ca_cert.der().to_vec(),
            server: Arc::new(server),
        })
    }
}
