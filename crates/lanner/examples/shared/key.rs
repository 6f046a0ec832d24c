//! The examples' authentication: peer credentials on local transports (the default, no
//! secret needed), plus a pre-shared key from `LANNER_PSK` when it is set (required for
//! `tcp://`, where nobody vouches for a peer otherwise). `LANNER_PSK` holds
//! `<key id>:<secret in hex>`, the secret at least 16 bytes, as for the `lanner` command:
//!
//! ```text
//! export LANNER_PSK=example:$(openssl rand -hex 32)
//! ```

// Each example uses one side.
#![allow(dead_code)]

use lanner::{ClientAuth, ErrorKind, PreSharedKey, ServerAuth};

/// The environment variable holding the key, as the `lanner` command reads it.
const PSK_ENV: &str = "LANNER_PSK";

/// The key in `LANNER_PSK`, if it is set. Errors never repeat the secret.
fn key() -> Result<Option<PreSharedKey>, lanner::Error> {
    let Ok(value) = std::env::var(PSK_ENV) else {
        return Ok(None);
    };
    let invalid = |what: &str| lanner::Error::new(ErrorKind::InvalidArgument, what);
    let (id, hex) = value
        .split_once(':')
        .ok_or_else(|| invalid("LANNER_PSK must be <key id>:<secret in hex>, with a colon"))?;
    let secret = decode_hex(hex.trim())
        .ok_or_else(|| invalid("the secret in LANNER_PSK (after the colon) is not hex"))?;
    PreSharedKey::new(id, secret).map(Some)
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

/// Local clients by their credentials, and holders of `LANNER_PSK` if it is set.
pub(crate) fn server_auth() -> Result<ServerAuth, lanner::Error> {
    Ok(match key()? {
        Some(key) => ServerAuth::peer_credentials().and_psk(key),
        None => ServerAuth::peer_credentials(),
    })
}

/// `LANNER_PSK` if it is set, else peer credentials.
pub(crate) fn client_auth() -> Result<ClientAuth, lanner::Error> {
    Ok(match key()? {
        Some(key) => ClientAuth::psk(key),
        None => ClientAuth::peer_credentials(),
    })
}
