//! Authentication: part of the handshake, behind two traits.
//!
//! The client names one [`Mechanism`] in its HELLO, with the mechanism's data; the server
//! either accepts it (its WELCOME names the same mechanism, with its own data) or closes
//! the connection with `Unauthenticated`. There is no negotiation and no fallback: a
//! server accepts only what it was configured to accept, and a client refuses a WELCOME
//! that names another mechanism than the one it asked for, so a man in the middle cannot
//! talk either side down to a weaker mechanism.
//!
//! | mechanism | who vouches | principal |
//! |---|---|---|
//! | [`Mechanism::None`] | nobody (explicit opt-in only) | [`Principal::Anonymous`] |
//! | [`Mechanism::PeerCredentials`] | the kernel (`SO_PEERCRED` on Unix sockets and shared memory) | [`Principal::Process`] |
//! | [`Mechanism::PreSharedKey`] | an HMAC-SHA-256 challenge–response, mutual (see [`psk`]) | [`Principal::Key`] |
//! | [`Mechanism::Tls`] | TLS 1.3 below the protocol, optionally with a client certificate | [`Principal::Certificate`] or anonymous |
//!
//! Mechanisms whose proof happens outside the protocol (the kernel, TLS) are
//! [`TransportAuthentication`]: the runtime tells it what the transport established.
//! [`psk`] is the one mechanism computed here. Everything is sans-IO: nonces come from
//! the caller.
//!
//! The state machine keeps the handshake transcript (the HELLO frame as sent, then the
//! WELCOME's fixed fields, then its auth data) and hands it to the authenticator, so a
//! proof covers every byte both sides said: versions, limits and mechanism included.

use std::fmt;

pub mod psk;

/// The largest auth data a HELLO, WELCOME or AUTH frame may carry.
pub const MAX_AUTH_DATA: usize = 256;

/// How a connection is authenticated, as named on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Mechanism {
    /// No authentication: the peer is anonymous. Never chosen unless configured.
    None = 0,
    /// The kernel's word for the peer process (Unix sockets, shared memory).
    PeerCredentials = 1,
    /// Both sides prove they hold the same secret key.
    PreSharedKey = 2,
    /// The TLS session below the protocol authenticated the peer.
    Tls = 3,
}

impl Mechanism {
    /// Decodes a wire byte; `None` for a value this build does not know.
    pub fn from_wire(byte: u8) -> Option<Mechanism> {
        Some(match byte {
            0 => Mechanism::None,
            1 => Mechanism::PeerCredentials,
            2 => Mechanism::PreSharedKey,
            3 => Mechanism::Tls,
            _ => return None,
        })
    }

    /// The byte sent on the wire.
    pub fn to_wire(self) -> u8 {
        self as u8
    }

    /// A short name for messages and configuration (`none`, `peercred`, `psk`, `tls`).
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::None => "none",
            Mechanism::PeerCredentials => "peercred",
            Mechanism::PreSharedKey => "psk",
            Mechanism::Tls => "tls",
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Who the peer is, as the handshake established it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Principal {
    /// Nobody vouched for the peer.
    Anonymous,
    /// A process on this host, as the kernel reports it.
    Process {
        /// User id.
        uid: u32,
        /// Group id.
        gid: u32,
        /// Process id (informational: pids are reused).
        pid: u32,
    },
    /// Whoever holds the pre-shared key with this id.
    Key(String),
    /// The subject of a verified TLS client certificate.
    Certificate(String),
}

impl Principal {
    /// The names access rules match this principal by: `anonymous`; `uid:1000` and
    /// `gid:1000` for a process; `psk:<key id>`; `cert:<subject>`.
    pub fn names(&self) -> Vec<String> {
        match self {
            Principal::Anonymous => vec!["anonymous".to_owned()],
            Principal::Process { uid, gid, .. } => vec![format!("uid:{uid}"), format!("gid:{gid}")],
            Principal::Key(id) => vec![format!("psk:{id}")],
            Principal::Certificate(subject) => vec![format!("cert:{subject}")],
        }
    }

    /// True if `name` is one of [`Principal::names`].
    pub fn is_named(&self, name: &str) -> bool {
        match self {
            Principal::Anonymous => name == "anonymous",
            Principal::Process { uid, gid, .. } => {
                matches_number(name, "uid:", *uid) || matches_number(name, "gid:", *gid)
            }
            Principal::Key(id) => name.strip_prefix("psk:") == Some(id.as_str()),
            Principal::Certificate(subject) => name.strip_prefix("cert:") == Some(subject.as_str()),
        }
    }
}

/// Whether `name` is `prefix` and `value` written plainly (no sign, no leading zeros: as
/// [`Principal::names`] writes it, which an access policy's check also requires).
fn matches_number(name: &str, prefix: &str, value: u32) -> bool {
    name.strip_prefix(prefix).is_some_and(|number| {
        number.bytes().all(|b| b.is_ascii_digit())
            && (number == "0" || !number.starts_with('0'))
            && number.parse::<u32>() == Ok(value)
    })
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Anonymous => f.write_str("anonymous"),
            Principal::Process { uid, gid, pid } => write!(f, "uid:{uid} (gid {gid}, pid {pid})"),
            Principal::Key(id) => write!(f, "psk:{id}"),
            Principal::Certificate(subject) => write!(f, "cert:{subject}"),
        }
    }
}

/// Why authentication failed. The message goes to the peer in the CLOSE frame, so it says
/// what failed without revealing secrets (or which of several keys exist).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AuthError(pub String);

impl AuthError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> AuthError {
        AuthError(message.into())
    }
}

/// What a client mechanism concluded from the server's WELCOME.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFinish {
    /// The data of the AUTH frame to send before any request (None: no AUTH frame).
    pub auth_data: Option<Vec<u8>>,
    /// Who the server proved to be (Anonymous if the mechanism does not authenticate it).
    pub server: Principal,
}

/// The client's side of a mechanism, for one connection attempt.
pub trait ClientAuthenticator: Send + fmt::Debug {
    /// The mechanism named in HELLO.
    fn mechanism(&self) -> Mechanism;

    /// The data HELLO carries (at most [`MAX_AUTH_DATA`] bytes).
    fn hello_data(&self) -> Vec<u8>;

    /// Checks the server's WELCOME data. `transcript` is the HELLO frame as sent followed
    /// by the WELCOME's fixed fields (everything after its header, up to its auth data).
    fn welcome(&mut self, transcript: &[u8], data: &[u8]) -> Result<ClientFinish, AuthError>;
}

/// What a server mechanism says to a HELLO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerStep {
    /// The client is authenticated: send WELCOME with this data; the connection is open.
    Done {
        /// The WELCOME's auth data.
        welcome_data: Vec<u8>,
        /// Who the client is.
        principal: Principal,
    },
    /// Send WELCOME with this data, then the client must send an AUTH frame before any
    /// request.
    NeedAuth {
        /// The WELCOME's auth data.
        welcome_data: Vec<u8>,
    },
}

/// The server's side of the mechanisms it accepts, for one connection.
pub trait ServerAuthenticator: Send + fmt::Debug {
    /// Whether this connection may use `mechanism`.
    fn accepts(&self, mechanism: Mechanism) -> bool;

    /// The mechanisms this connection may use, for the refusal message.
    fn accepted(&self) -> Vec<Mechanism>;

    /// Answers the client's HELLO (only called with an accepted mechanism). `transcript`
    /// is the HELLO frame as received followed by the WELCOME's fixed fields.
    fn hello(
        &mut self,
        mechanism: Mechanism,
        transcript: &[u8],
        data: &[u8],
    ) -> Result<ServerStep, AuthError>;

    /// Checks the client's AUTH frame (after [`ServerStep::NeedAuth`]). `transcript` is
    /// the one [`ServerAuthenticator::hello`] saw followed by the WELCOME's auth data.
    fn auth(&mut self, transcript: &[u8], data: &[u8]) -> Result<Principal, AuthError>;
}

/// A mechanism proven outside the protocol (no authentication at all, the kernel's peer
/// credentials, a TLS session): the runtime says what the transport established, and the
/// handshake only checks that both sides mean the same mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportAuthentication {
    mechanism: Mechanism,
    /// Who the peer is (server side); None if the transport could not tell.
    peer: Option<Principal>,
}

impl TransportAuthentication {
    /// No authentication: the peer is anonymous.
    pub fn none() -> TransportAuthentication {
        TransportAuthentication {
            mechanism: Mechanism::None,
            peer: Some(Principal::Anonymous),
        }
    }

    /// `mechanism`, with the peer the transport vouches for (None: the transport could
    /// not establish one, and a client asking for this mechanism is refused).
    pub fn new(mechanism: Mechanism, peer: Option<Principal>) -> TransportAuthentication {
        TransportAuthentication { mechanism, peer }
    }

    /// The client side of `mechanism` (nothing to prove in the handshake itself).
    pub fn client(mechanism: Mechanism) -> TransportAuthentication {
        TransportAuthentication {
            mechanism,
            peer: None,
        }
    }
}

impl ClientAuthenticator for TransportAuthentication {
    fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    fn hello_data(&self) -> Vec<u8> {
        Vec::new()
    }

    fn welcome(&mut self, _transcript: &[u8], data: &[u8]) -> Result<ClientFinish, AuthError> {
        if !data.is_empty() {
            return Err(AuthError::new(format!(
                "the server sent {} bytes of {} data; the mechanism has none",
                data.len(),
                self.mechanism
            )));
        }
        Ok(ClientFinish {
            auth_data: None,
            server: Principal::Anonymous,
        })
    }
}

impl ServerAuthenticator for TransportAuthentication {
    fn accepts(&self, mechanism: Mechanism) -> bool {
        mechanism == self.mechanism
    }

    fn accepted(&self) -> Vec<Mechanism> {
        vec![self.mechanism]
    }

    fn hello(
        &mut self,
        mechanism: Mechanism,
        _transcript: &[u8],
        data: &[u8],
    ) -> Result<ServerStep, AuthError> {
        if !data.is_empty() {
            return Err(AuthError::new(format!(
                "the HELLO carries {} bytes of {mechanism} data; the mechanism has none",
                data.len()
            )));
        }
        let principal = self.peer.clone().ok_or_else(|| {
            AuthError::new(format!(
                "{mechanism} authentication did not establish who the client is here (no peer credentials on this transport, or no client certificate)"
            ))
        })?;
        Ok(ServerStep::Done {
            welcome_data: Vec::new(),
            principal,
        })
    }

    fn auth(&mut self, _transcript: &[u8], _data: &[u8]) -> Result<Principal, AuthError> {
        Err(AuthError::new(format!(
            "{} authentication has no AUTH step",
            self.mechanism
        )))
    }
}

/// A server accepting any of several mechanisms: the client's choice picks one.
#[derive(Debug, Default)]
pub struct AnyOf {
    mechanisms: Vec<Box<dyn ServerAuthenticator>>,
    chosen: Option<usize>,
}

impl AnyOf {
    /// Accepts nothing yet.
    pub fn new() -> AnyOf {
        AnyOf::default()
    }

    /// Also accepts what `authenticator` accepts (the first one added wins on overlap).
    pub fn or(mut self, authenticator: impl ServerAuthenticator + 'static) -> AnyOf {
        self.mechanisms.push(Box::new(authenticator));
        self
    }

    /// Also accepts what the boxed `authenticator` accepts.
    pub fn or_boxed(mut self, authenticator: Box<dyn ServerAuthenticator>) -> AnyOf {
        self.mechanisms.push(authenticator);
        self
    }
}

impl ServerAuthenticator for AnyOf {
    fn accepts(&self, mechanism: Mechanism) -> bool {
        self.mechanisms.iter().any(|m| m.accepts(mechanism))
    }

    fn accepted(&self) -> Vec<Mechanism> {
        let mut all: Vec<Mechanism> = Vec::new();
        for mechanism in self.mechanisms.iter().flat_map(|m| m.accepted()) {
            if !all.contains(&mechanism) {
                all.push(mechanism);
            }
        }
        all
    }

    fn hello(
        &mut self,
        mechanism: Mechanism,
        transcript: &[u8],
        data: &[u8],
    ) -> Result<ServerStep, AuthError> {
        let index = self
            .mechanisms
            .iter()
            .position(|m| m.accepts(mechanism))
            .ok_or_else(|| AuthError::new(format!("{mechanism} is not accepted")))?;
        self.chosen = Some(index);
        self.mechanisms[index].hello(mechanism, transcript, data)
    }

    fn auth(&mut self, transcript: &[u8], data: &[u8]) -> Result<Principal, AuthError> {
        match self.chosen {
            Some(index) => self.mechanisms[index].auth(transcript, data),
            None => Err(AuthError::new("AUTH before HELLO")),
        }
    }
}
