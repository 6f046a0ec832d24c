//! A throw-away certificate authority and TLS configurations, for tests of `tls`
//! connections.

use std::sync::Arc;

use lanner::rustls;

/// A throw-away certificate authority with a server and a client certificate.
pub struct Pki {
    ca: rcgen::Issuer<'static, rcgen::KeyPair>,
    ca_der: rustls::pki_types::CertificateDer<'static>,
}

impl Pki {
    pub fn new() -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "lanner test CA");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Pki {
            ca_der: cert.der().clone(),
            ca: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `name` signed by the CA, with its key.
    pub fn issue(
        &self,
        name: &str,
    ) -> (
        rustls::pki_types::CertificateDer<'static>,
        rustls::pki_types::PrivateKeyDer<'static>,
    ) {
        let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        (cert.der().clone(), key)
    }

    pub fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone()).unwrap();
        roots
    }
}

/// The crypto provider the tests build their configurations with.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS 1.3 server configuration with a certificate for `localhost`, asking clients for
/// certificates of `pki` if `require_client_certs`.
pub fn tls_server_config(pki: &Pki, require_client_certs: bool) -> Arc<rustls::ServerConfig> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap();
    let builder = if require_client_certs {
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(pki.roots()),
            provider(),
        )
        .build()
        .unwrap();
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let (cert, key) = pki.issue("localhost");
    Arc::new(builder.with_single_cert(vec![cert], key).unwrap())
}

/// A TLS 1.3 client configuration trusting `pki`, with a certificate for `client_name` if
/// there is one.
pub fn tls_client_config(pki: &Pki, client_name: Option<&str>) -> Arc<rustls::ClientConfig> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(pki.roots());
    Arc::new(match client_name {
        Some(name) => {
            let (cert, key) = pki.issue(name);
            builder.with_client_auth_cert(vec![cert], key).unwrap()
        }
        None => builder.with_no_client_auth(),
    })
}
