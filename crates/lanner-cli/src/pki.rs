//! A throw-away certificate authority with a server and a client certificate, written as
//! PEM files into a private temporary directory (mode 0700, keys 0600) that is removed
//! when the value is dropped. For `lanner bench secure --auth tls` and the tests.

use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
};

/// The names the server certificate is valid for.
pub const SERVER_NAMES: [&str; 2] = ["127.0.0.1", "localhost"];

/// The subject common name of the client certificate.
pub const CLIENT_NAME: &str = "lanner-bench-client";

/// PEM files of a fresh authority, a server identity and a client identity.
#[derive(Debug)]
pub struct ThrowAwayPki {
    dir: PathBuf,
    /// The authority's certificate.
    pub ca_cert: PathBuf,
    /// The server's certificate chain (leaf, then the authority).
    pub server_cert: PathBuf,
    /// The server's private key.
    pub server_key: PathBuf,
    /// The client's certificate chain (leaf, then the authority).
    pub client_cert: PathBuf,
    /// The client's private key.
    pub client_key: PathBuf,
}

fn pki_error(error: rcgen::Error) -> io::Error {
    io::Error::other(format!("generating certificates: {error}"))
}

impl ThrowAwayPki {
    /// Generates the authority and both identities (ECDSA P-256) into a new private
    /// directory under the temporary directory.
    pub fn generate() -> io::Result<ThrowAwayPki> {
        let dir = std::env::temp_dir().join(format!(
            "lanner-pki-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        // Fails if the path exists: nobody else's directory (or link) is ever used.
        DirBuilder::new().mode(0o700).create(&dir)?;
        let pki = ThrowAwayPki {
            ca_cert: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
            dir,
        };
        pki.write_all()?;
        Ok(pki)
    }

    fn write_all(&self) -> io::Result<()> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(pki_error)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name = DistinguishedName::new();
        // A name of its own: another throw-away authority is a stranger, not an impostor.
        let name = format!("lanner throw-away CA {:08x}", rand::random::<u32>());
        params.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().map_err(pki_error)?)
            .map_err(pki_error)?;
        write_private(&self.ca_cert, issuer.pem().as_bytes())?;
        let identities = [
            (
                &self.server_cert,
                &self.server_key,
                &SERVER_NAMES[..],
                "lanner-bench-server",
            ),
            (&self.client_cert, &self.client_key, &[][..], CLIENT_NAME),
        ];
        for (cert_path, key_path, names, common_name) in identities {
            let names: Vec<String> = names.iter().map(|&n| n.to_owned()).collect();
            let mut params = CertificateParams::new(names).map_err(pki_error)?;
            params.distinguished_name = DistinguishedName::new();
            params
                .distinguished_name
                .push(DnType::CommonName, common_name);
            let key = KeyPair::generate().map_err(pki_error)?;
            let certificate = params.signed_by(&key, &issuer).map_err(pki_error)?;
            let chain = format!("{}{}", certificate.pem(), issuer.pem());
            write_private(cert_path, chain.as_bytes())?;
            write_private(key_path, key.serialize_pem().as_bytes())?;
        }
        Ok(())
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Writes a new file readable by its owner only.
fn write_private(path: &Path, contents: &[u8]) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?
        .write_all(contents)
}

impl Drop for ThrowAwayPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::auth_arg::{client_tls_config, server_tls_config};

    #[test]
    fn files_are_private_load_as_tls_configurations_and_go_away() {
        let pki = ThrowAwayPki::generate().unwrap();
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(pki.dir()), 0o700);
        assert_eq!(mode(&pki.server_key), 0o600);
        server_tls_config(&pki.server_cert, &pki.server_key, Some(&pki.ca_cert)).unwrap();
        client_tls_config(&pki.ca_cert, Some((&pki.client_cert, &pki.client_key))).unwrap();
        let dir = pki.dir().to_owned();
        drop(pki);
        assert!(!dir.exists());
    }
}
