//! Pre-shared key authentication: a mutual HMAC-SHA-256 challenge–response.
//!
//! ```text
//! HELLO    client nonce Nc (32 bytes) ‖ key id (1..=64 bytes of UTF-8)
//! WELCOME  server nonce Ns (32 bytes) ‖ server proof = HMAC(K, "lanner-psk-v1 server" ‖ T1 ‖ Ns)
//! AUTH     client proof = HMAC(K, "lanner-psk-v1 client" ‖ T1 ‖ Ns ‖ server proof)
//! ```
//!
//! T1 is the transcript the state machine keeps: the HELLO frame (which holds Nc, the key
//! id, the versions, the limits and the mechanism) followed by the WELCOME's fixed fields.
//! The client checks the server's proof before it sends anything else, so it never talks
//! to an impostor; the server checks the client's proof before it runs any request.
//!
//! - **No extra round trip**: the client sends AUTH right after WELCOME and its first
//!   request right behind it, without waiting; connecting costs one round trip, as
//!   without authentication.
//! - **Replay**: each side's proof covers the other side's fresh nonce, so a recorded
//!   proof is worthless on another connection.
//! - **Reflection**: the two proofs carry different labels, so the server's proof can
//!   never pass as a client's (or the reverse), even with the nonces echoed back.
//! - **Downgrade**: the proofs cover the whole HELLO and the WELCOME's fields, so a
//!   change to the mechanism, versions or limits in flight makes them fail.
//! - **Not covered: relays.** Nothing in either proof names the endpoint the client meant
//!   to reach, and nothing after AUTH is authenticated: a party without the key that a
//!   key holder dials can forward the three frames to a real holder and keep both
//!   connections (the client's calls, and the server's side as the client's principal).
//!   Binding the address the client dialed into the HELLO (checked by the server against
//!   the accepted socket's local address) or a session key over every frame would stop it.
//!
//! Proofs are compared in constant time. A key is only as good as its entropy: use at
//! least 16 random bytes (the runtime refuses shorter keys).

use std::collections::HashMap;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{
    AuthError, ClientAuthenticator, ClientFinish, Mechanism, Principal, ServerAuthenticator,
    ServerStep,
};

/// Length of each side's nonce.
pub const NONCE_LEN: usize = 32;
/// Length of a proof (an HMAC-SHA-256 tag).
pub const PROOF_LEN: usize = 32;
/// The longest key id.
pub const MAX_KEY_ID_LEN: usize = 64;

const SERVER_LABEL: &[u8] = b"lanner-psk-v1 server";
const CLIENT_LABEL: &[u8] = b"lanner-psk-v1 client";

type HmacSha256 = Hmac<Sha256>;

fn mac(key: &[u8], label: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC takes keys of any length.
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(label);
    for part in parts {
        mac.update(part);
    }
    mac
}

fn prove(key: &[u8], label: &[u8], parts: &[&[u8]]) -> [u8; PROOF_LEN] {
    mac(key, label, parts).finalize().into_bytes().into()
}

fn verify(key: &[u8], label: &[u8], parts: &[&[u8]], proof: &[u8]) -> bool {
    mac(key, label, parts).verify_slice(proof).is_ok()
}

/// Checks a key id: 1..=64 bytes, no control characters.
pub fn check_key_id(id: &str) -> Result<(), AuthError> {
    if id.is_empty() || id.len() > MAX_KEY_ID_LEN || id.chars().any(char::is_control) {
        return Err(AuthError::new(format!(
            "invalid pre-shared key id {id:?}: 1 to {MAX_KEY_ID_LEN} bytes without control characters"
        )));
    }
    Ok(())
}

/// The client side, for one connection attempt.
pub struct PskClient {
    key_id: String,
    key: Arc<[u8]>,
    nonce: [u8; NONCE_LEN],
}

impl std::fmt::Debug for PskClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PskClient")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl PskClient {
    /// Proves possession of `key`, named `key_id`, with the fresh random `nonce`.
    pub fn new(
        key_id: &str,
        key: Arc<[u8]>,
        nonce: [u8; NONCE_LEN],
    ) -> Result<PskClient, AuthError> {
        check_key_id(key_id)?;
        Ok(PskClient {
            key_id: key_id.to_owned(),
            key,
            nonce,
        })
    }
}

impl ClientAuthenticator for PskClient {
    fn mechanism(&self) -> Mechanism {
        Mechanism::PreSharedKey
    }

    fn hello_data(&self) -> Vec<u8> {
        let mut data = Vec::with_capacity(NONCE_LEN + self.key_id.len());
        data.extend_from_slice(&self.nonce);
        data.extend_from_slice(self.key_id.as_bytes());
        data
    }

    fn welcome(&mut self, transcript: &[u8], data: &[u8]) -> Result<ClientFinish, AuthError> {
        if data.len() != NONCE_LEN + PROOF_LEN {
            return Err(AuthError::new(format!(
                "the server's pre-shared key answer has {} bytes, expected {}",
                data.len(),
                NONCE_LEN + PROOF_LEN
            )));
        }
        let (server_nonce, server_proof) = data.split_at(NONCE_LEN);
        if !verify(
            &self.key,
            SERVER_LABEL,
            &[transcript, server_nonce],
            server_proof,
        ) {
            return Err(AuthError::new(format!(
                "the server could not prove it holds pre-shared key {:?} (the keys differ, or it is not the server you meant)",
                self.key_id
            )));
        }
        let proof = prove(&self.key, CLIENT_LABEL, &[transcript, data]);
        Ok(ClientFinish {
            auth_data: Some(proof.to_vec()),
            server: Principal::Key(self.key_id.clone()),
        })
    }
}

/// The server side, for one connection: knows every accepted key by id.
pub struct PskServer {
    keys: Arc<HashMap<String, Arc<[u8]>>>,
    nonce: [u8; NONCE_LEN],
    /// The client's key, once its HELLO named one.
    chosen: Option<(String, Arc<[u8]>)>,
}

impl std::fmt::Debug for PskServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ids: Vec<&String> = self.keys.keys().collect();
        ids.sort();
        f.debug_struct("PskServer")
            .field("key_ids", &ids)
            .finish_non_exhaustive()
    }
}

impl PskServer {
    /// Accepts any key in `keys` (by id), challenging with the fresh random `nonce`.
    pub fn new(keys: Arc<HashMap<String, Arc<[u8]>>>, nonce: [u8; NONCE_LEN]) -> PskServer {
        PskServer {
            keys,
            nonce,
            chosen: None,
        }
    }
}

impl ServerAuthenticator for PskServer {
    fn accepts(&self, mechanism: Mechanism) -> bool {
        mechanism == Mechanism::PreSharedKey
    }

    fn accepted(&self) -> Vec<Mechanism> {
        vec![Mechanism::PreSharedKey]
    }

    fn hello(
        &mut self,
        _mechanism: Mechanism,
        transcript: &[u8],
        data: &[u8],
    ) -> Result<ServerStep, AuthError> {
        if data.len() <= NONCE_LEN || data.len() > NONCE_LEN + MAX_KEY_ID_LEN {
            return Err(AuthError::new(format!(
                "the pre-shared key HELLO has {} bytes of data, expected a {NONCE_LEN}-byte nonce and a key id",
                data.len()
            )));
        }
        let key_id = std::str::from_utf8(&data[NONCE_LEN..])
            .map_err(|_| AuthError::new("the pre-shared key id is not UTF-8"))?;
        let key = self.keys.get(key_id).ok_or_else(|| {
            AuthError::new(format!(
                "pre-shared key authentication failed: this server has no key {key_id:?}"
            ))
        })?;
        let proof = prove(key, SERVER_LABEL, &[transcript, &self.nonce]);
        let mut welcome_data = Vec::with_capacity(NONCE_LEN + PROOF_LEN);
        welcome_data.extend_from_slice(&self.nonce);
        welcome_data.extend_from_slice(&proof);
        self.chosen = Some((key_id.to_owned(), key.clone()));
        Ok(ServerStep::NeedAuth { welcome_data })
    }

    fn auth(&mut self, transcript: &[u8], data: &[u8]) -> Result<Principal, AuthError> {
        let Some((key_id, key)) = &self.chosen else {
            return Err(AuthError::new("AUTH before a pre-shared key HELLO"));
        };
        if data.len() != PROOF_LEN || !verify(key, CLIENT_LABEL, &[transcript], data) {
            return Err(AuthError::new(format!(
                "pre-shared key authentication failed: the client could not prove it holds key {key_id:?}"
            )));
        }
        Ok(Principal::Key(key_id.clone()))
    }
}
