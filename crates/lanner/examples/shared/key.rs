//! The examples' authentication: peer credentials on local transports (the default, no
//! secret needed), plus a pre-shared key from `LANNER_KEY` when it is set (required for
//! `tcp://`, where nobody vouches for a peer otherwise).

// Each example uses one side.
#![allow(dead_code)]

use lanner::{ClientAuth, PreSharedKey, ServerAuth};

fn key() -> Result<Option<PreSharedKey>, lanner::Error> {
    match std::env::var("LANNER_KEY") {
        Ok(secret) => PreSharedKey::new("example", secret.as_bytes()).map(Some),
        Err(_) => Ok(None),
    }
}

/// Local clients by their credentials, and holders of `LANNER_KEY` if it is set.
pub(crate) fn server_auth() -> Result<ServerAuth, lanner::Error> {
    Ok(match key()? {
        Some(key) => ServerAuth::peer_credentials().and_psk(key),
        None => ServerAuth::peer_credentials(),
    })
}

/// `LANNER_KEY` if it is set, else peer credentials.
pub(crate) fn client_auth() -> Result<ClientAuth, lanner::Error> {
    Ok(match key()? {
        Some(key) => ClientAuth::psk(key),
        None => ClientAuth::peer_credentials(),
    })
}
