//! The `--auth` argument, and what each choice needs: the pre-shared key from
//! [`PSK_ENV`], TLS configurations from PEM files.

use std::path::Path;
use std::sync::Arc;

use clap::ValueEnum;
use lanner::rustls;
use lanner::rustls::pki_types::pem::PemObject;
use lanner::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use lanner::{ClientAuth, PreSharedKey, ServerAuth};

use crate::transport_arg::TransportArg;

/// The environment variable holding the pre-shared key for `--auth psk`, as
/// `<key id>:<secret in hex>`.
pub const PSK_ENV: &str = "LANNER_PSK";

/// How clients authenticate to `lanner serve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthArg {
    /// No authentication: anyone who can connect may call (explicit opt-out).
    None,
    /// The kernel's word for the local peer process (Unix sockets and shared memory only).
    Peercred,
    /// A pre-shared key, proved by both sides (key from the LANNER_PSK environment variable).
    Psk,
    /// TLS 1.3 with certificates (TCP only).
    Tls,
}

impl AuthArg {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            AuthArg::None => "none",
            AuthArg::Peercred => "peercred",
            AuthArg::Psk => "psk",
            AuthArg::Tls => "tls",
        }
    }

    /// The default on `transport`: peer credentials on local transports; over TCP there is
    /// none (the user must choose).
    pub fn default_for(transport: TransportArg) -> Option<AuthArg> {
        match transport {
            TransportArg::Tcp => None,
            TransportArg::Unix | TransportArg::Shm => Some(AuthArg::Peercred),
        }
    }

    /// Checks that the mechanism works over TCP (`tcp`) or a local transport (`!tcp`).
    pub fn check_transport(self, tcp: bool) -> Result<(), String> {
        match self {
            AuthArg::Peercred if tcp => Err(
                "--auth peercred works on unix and shm only: over tcp use --auth psk or --auth tls (or --auth none)"
                    .into(),
            ),
            AuthArg::Tls if !tcp => Err(
                "--auth tls works over tcp only: on unix and shm use --auth peercred or --auth psk"
                    .into(),
            ),
            _ => Ok(()),
        }
    }
}

/// The message for a TCP server started without `--auth`.
pub const TCP_NEEDS_AUTH: &str = "serving over tcp needs --auth: choose how clients authenticate (--auth psk with the key in LANNER_PSK as <key id>:<hex secret>, or --auth tls with --tls-cert and --tls-key), or say --auth none to accept anyone without authentication";

/// The client authentication that matches a server started with
/// [`crate::server_process::ServeAuth::plain`]: `none` over TCP (explicitly), peer
/// credentials on local transports.
pub fn plain_client_auth(transport: TransportArg) -> ClientAuth {
    match transport {
        TransportArg::Tcp => ClientAuth::none(),
        TransportArg::Unix | TransportArg::Shm => ClientAuth::peer_credentials(),
    }
}

/// Parses `<key id>:<secret in hex>` (the secret at least 16 bytes). Errors never repeat
/// the secret.
pub fn parse_psk(value: &str) -> Result<PreSharedKey, String> {
    let (id, hex) = value
        .split_once(':')
        .ok_or_else(|| format!("{PSK_ENV} must be <key id>:<secret in hex>, with a colon"))?;
    let secret = decode_hex(hex.trim())
        .ok_or_else(|| format!("the secret in {PSK_ENV} (after the colon) is not hex"))?;
    PreSharedKey::new(id, secret).map_err(|e| format!("{PSK_ENV}: {}", e.message()))
}

/// Reads the pre-shared key from [`PSK_ENV`].
pub fn psk_from_env() -> Result<PreSharedKey, String> {
    let value = std::env::var(PSK_ENV).map_err(|_| {
        format!(
            "--auth psk reads the key from the environment variable {PSK_ENV} (<key id>:<hex secret>, e.g. {PSK_ENV}=ops:$(openssl rand -hex 32)), which is not set"
        )
    })?;
    parse_psk(&value)
}

/// The [`PSK_ENV`] value for key `id` with `secret`.
pub fn psk_env_value(id: &str, secret: &[u8]) -> String {
    let mut value = String::with_capacity(id.len() + 1 + 2 * secret.len());
    value.push_str(id);
    value.push(':');
    for byte in secret {
        value.push_str(&format!("{byte:02x}"));
    }
    value
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() % 2 != 0 || !hex.is_ascii() {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect()
}

/// The crypto provider Lanner's rustls is built with.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in the PEM file at `path` (at least one).
pub fn load_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let what =
        |e: &dyn std::fmt::Display| format!("reading certificates from {}: {e}", path.display());
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|e| what(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| what(&e))?;
    if certificates.is_empty() {
        return Err(what(&"no CERTIFICATE in the file"));
    }
    Ok(certificates)
}

/// The private key in the PEM file at `path`.
pub fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("reading a private key from {}: {e}", path.display()))
}

/// The certificates in the PEM file at `path`, as trusted roots.
pub fn load_roots(path: &Path) -> Result<Arc<rustls::RootCertStore>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in load_certificates(path)? {
        roots
            .add(certificate)
            .map_err(|e| format!("trusting a certificate of {}: {e}", path.display()))?;
    }
    Ok(Arc::new(roots))
}

/// A TLS 1.3 server configuration: this certificate chain and key; if `client_ca` is
/// given, clients must present a certificate signed by that authority.
pub fn server_tls_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("TLS configuration: {e}"))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                load_roots(ca)?,
                provider(),
            )
            .build()
            .map_err(|e| format!("client certificate authority {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(load_certificates(cert)?, load_private_key(key)?)
        .map_err(|e| {
            format!(
                "TLS certificate {} with key {}: {e}",
                cert.display(),
                key.display()
            )
        })?;
    Ok(Arc::new(config))
}

/// A TLS 1.3 client configuration trusting the authorities in the PEM file `ca`, and
/// presenting `identity` (certificate chain file, key file) if given.
pub fn client_tls_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_root_certificates(load_roots(ca)?);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certificates(cert)?, load_private_key(key)?)
            .map_err(|e| format!("TLS client certificate {}: {e}", cert.display()))?,
    };
    Ok(Arc::new(config))
}

/// The server side of `auth`: reads the pre-shared key from [`PSK_ENV`], or the TLS files.
pub fn server_auth(auth: AuthArg, tcp: bool, tls: &TlsFiles<'_>) -> Result<ServerAuth, String> {
    auth.check_transport(tcp)?;
    if auth != AuthArg::Tls && (tls.cert.is_some() || tls.key.is_some() || tls.client_ca.is_some())
    {
        return Err("--tls-cert, --tls-key and --tls-client-ca go with --auth tls".into());
    }
    Ok(match auth {
        AuthArg::None => ServerAuth::none(),
        AuthArg::Peercred => ServerAuth::peer_credentials(),
        AuthArg::Psk => ServerAuth::psk(psk_from_env()?),
        AuthArg::Tls => {
            let (Some(cert), Some(key)) = (tls.cert, tls.key) else {
                return Err(
                    "--auth tls needs --tls-cert <PEM file> and --tls-key <PEM file>".into(),
                );
            };
            let auth = ServerAuth::tls(server_tls_config(cert, key, tls.client_ca)?);
            match tls.client_ca {
                Some(_) => auth,
                // Without a client authority, clients are not identified: anonymous TLS,
                // which the library admits only when told so.
                None => auth.and_none(),
            }
        }
    })
}

/// The PEM files of a TLS server.
#[derive(Debug, Clone, Copy, Default)]
pub struct TlsFiles<'a> {
    /// The certificate chain, leaf first.
    pub cert: Option<&'a Path>,
    /// The private key.
    pub key: Option<&'a Path>,
    /// The authority client certificates must be signed by (then they are required).
    pub client_ca: Option<&'a Path>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psk_values_parse_and_errors_hide_the_secret() {
        let value = psk_env_value("ops", &[0xab; 32]);
        assert!(value.starts_with("ops:abab"));
        assert_eq!(parse_psk(&value).unwrap().id(), "ops");
        let short = parse_psk("ops:00112233").unwrap_err();
        assert!(short.contains("at least 16"), "{short}");
        assert!(!short.contains("00112233"), "{short}");
        assert!(parse_psk("no colon").unwrap_err().contains("colon"));
        assert!(parse_psk("ops:xyz").unwrap_err().contains("not hex"));
        assert!(parse_psk("ops:é0").unwrap_err().contains("not hex"));
    }

    #[test]
    fn mechanisms_are_checked_against_the_transport() {
        assert!(AuthArg::Peercred.check_transport(true).is_err());
        assert!(AuthArg::Tls.check_transport(false).is_err());
        assert!(AuthArg::Psk.check_transport(true).is_ok());
        assert!(AuthArg::Psk.check_transport(false).is_ok());
        assert_eq!(AuthArg::default_for(TransportArg::Tcp), None);
        assert_eq!(
            AuthArg::default_for(TransportArg::Shm),
            Some(AuthArg::Peercred)
        );
    }
}
