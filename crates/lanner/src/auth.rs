//! Authentication: who may connect, decided once in the handshake.
//!
//! A server says which mechanisms it accepts ([`ServerAuth`]); a client says which one it
//! uses ([`ClientAuth`]). The handshake either establishes a [`Principal`] for the peer or
//! ends with `Unauthenticated`: there is no silent fallback, and `none` is used only when
//! configured by name.
//!
//! | mechanism | transports | the principal | protects against |
//! |---|---|---|---|
//! | [`ServerAuth::peer_credentials`] (the default) | `unix://`, `shm://`, `mem://` | the peer process's uid/gid/pid, from the kernel | other local users, both ways (the client checks the server's uid too) |
//! | [`ServerAuth::psk`] | all | the key's id | anyone without the key; mutual (the client checks the server too) |
//! | [`ServerAuth::tls`] | `tcp://` | the client certificate's subject, if the client sent one | eavesdroppers and impostors on the network |
//! | [`ServerAuth::none`] | all | anonymous | nothing: explicit opt-in |
//!
//! After the handshake a call costs nothing more: the principal is fixed per connection,
//! and what it may call is decided when an object is handed to the connection (see
//! [`crate::AccessPolicy`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use lanner_proto::TransportAuthentication;
use lanner_proto::auth::psk::{NONCE_LEN, PskClient, PskServer, check_key_id};
use lanner_proto::auth::{AnyOf, ClientAuthenticator, ServerAuthenticator};
pub use lanner_proto::{Mechanism, Principal};

use crate::error::{Error, ErrorKind};
use crate::transport::PeerCredentials;
use crate::url::Endpoint;

/// The shortest pre-shared key accepted, in bytes.
pub(crate) const MIN_KEY_LEN: usize = 16;

/// A secret shared by clients and servers that trust each other, with the id that names
/// it (the principal of whoever proves to hold it is `psk:<id>`). Never printed.
#[derive(Clone)]
pub struct PreSharedKey {
    id: String,
    secret: Arc<[u8]>,
}

impl PreSharedKey {
    /// The key `secret` (at least 16 bytes, ideally 32 random ones), named `id` (1 to 64
    /// bytes, no control characters).
    pub fn new(id: impl Into<String>, secret: impl AsRef<[u8]>) -> Result<PreSharedKey, Error> {
        let id = id.into();
        check_key_id(&id).map_err(|e| Error::new(ErrorKind::InvalidArgument, e.0))?;
        let secret = secret.as_ref();
        if secret.len() < MIN_KEY_LEN {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "pre-shared key {id:?} has {} bytes; use at least {MIN_KEY_LEN} (32 random bytes is best)",
                    secret.len()
                ),
            ));
        }
        Ok(PreSharedKey {
            id,
            secret: Arc::from(secret),
        })
    }

    /// The key's id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Debug for PreSharedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreSharedKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// The authentication mechanisms a server accepts. Start from one mechanism and add
/// others with the `and_*` methods; a client picks one of them.
///
/// The default (what [`crate::Server::new`] uses) is [`ServerAuth::peer_credentials`]:
/// local clients are identified by the kernel, and a server with it alone cannot listen
/// on TCP (it says so) until it is given a mechanism that works there.
#[derive(Clone)]
pub struct ServerAuth {
    none: bool,
    peer_credentials: bool,
    keys: Arc<HashMap<String, Arc<[u8]>>>,
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl Default for ServerAuth {
    fn default() -> Self {
        ServerAuth::peer_credentials()
    }
}

impl fmt::Debug for ServerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids: Vec<&String> = self.keys.keys().collect();
        ids.sort();
        f.debug_struct("ServerAuth")
            .field("none", &self.none)
            .field("peer_credentials", &self.peer_credentials)
            .field("psk_ids", &ids)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl ServerAuth {
    fn empty() -> ServerAuth {
        ServerAuth {
            none: false,
            peer_credentials: false,
            keys: Arc::new(HashMap::new()),
            tls: None,
        }
    }

    /// Accepts anyone, as the anonymous principal. Only for trusted networks and tests.
    pub fn none() -> ServerAuth {
        ServerAuth::empty().and_none()
    }

    /// Accepts local clients as the user the kernel says they run as (Unix sockets,
    /// shared memory, and in-process `mem://` clients, which are this process).
    pub fn peer_credentials() -> ServerAuth {
        ServerAuth::empty().and_peer_credentials()
    }

    /// Accepts clients that prove they hold `key` (mutually: they check the server holds
    /// it too), as the principal `psk:<key id>`.
    pub fn psk(key: PreSharedKey) -> ServerAuth {
        ServerAuth::empty().and_psk(key)
    }

    /// Wraps every TCP connection in TLS 1.3 with `config` (its certificate, and its
    /// client-certificate verifier if clients must present one). A client certificate's
    /// subject (RFC 4514 form, `CN=alice, O=Acme`) becomes the principal
    /// `cert:<subject>`. A client without one (or with an empty subject) is refused,
    /// unless anonymous clients are admitted too (`.and_none()`: encrypted, anonymous).
    pub fn tls(config: Arc<rustls::ServerConfig>) -> ServerAuth {
        ServerAuth::empty().and_tls(config)
    }

    /// Also accepts anyone (see [`ServerAuth::none`]).
    pub fn and_none(mut self) -> ServerAuth {
        self.none = true;
        self
    }

    /// Also accepts local clients by their credentials (see
    /// [`ServerAuth::peer_credentials`]).
    pub fn and_peer_credentials(mut self) -> ServerAuth {
        self.peer_credentials = true;
        self
    }

    /// Also accepts holders of `key` (see [`ServerAuth::psk`]); a key with the same id
    /// replaces the earlier one.
    pub fn and_psk(mut self, key: PreSharedKey) -> ServerAuth {
        Arc::make_mut(&mut self.keys).insert(key.id, key.secret);
        self
    }

    /// Also serves TCP over TLS (see [`ServerAuth::tls`]).
    pub fn and_tls(mut self, config: Arc<rustls::ServerConfig>) -> ServerAuth {
        self.tls = Some(config);
        self
    }

    /// The TLS configuration TCP listeners use, if any.
    pub(crate) fn tls_config(&self) -> Option<&Arc<rustls::ServerConfig>> {
        self.tls.as_ref()
    }

    /// Checks that a client could authenticate at all on `endpoint`.
    pub(crate) fn check_endpoint(&self, endpoint: &Endpoint) -> Result<(), Error> {
        let usable = match endpoint {
            Endpoint::Tcp(_) => self.none || !self.keys.is_empty() || self.tls.is_some(),
            _ => self.none || self.peer_credentials || !self.keys.is_empty(),
        };
        if usable {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Unauthenticated,
            format!(
                "no client could authenticate at {endpoint}: the server's authentication ({}) does not work there; add ServerAuth::psk or ServerAuth::tls for TCP, or ServerAuth::none to accept anyone explicitly",
                self.describe()
            ),
        ))
    }

    fn describe(&self) -> String {
        let mut names = Vec::new();
        if self.none {
            names.push("none");
        }
        if self.peer_credentials {
            names.push("peercred");
        }
        if !self.keys.is_empty() {
            names.push("psk");
        }
        if self.tls.is_some() {
            names.push("tls");
        }
        names.join(", ")
    }

    /// The authenticator for one connection: what its transport established (`tls`: the
    /// connection runs over TLS, with this client certificate subject if any).
    pub(crate) fn authenticator(
        &self,
        credentials: Option<PeerCredentials>,
        tls: Option<Option<String>>,
    ) -> Box<dyn ServerAuthenticator> {
        let mut any = AnyOf::new();
        if let Some(subject) = tls {
            // A certificate with an empty subject (names only in its alternative names)
            // names nobody a rule could mean: like no certificate. A client without one is
            // anonymous, admitted only if anonymous clients are (`and_none`): TLS alone
            // encrypts, it does not say who the client is.
            let principal = match subject.filter(|subject| !subject.is_empty()) {
                Some(subject) => Some(Principal::Certificate(subject)),
                None => self.none.then_some(Principal::Anonymous),
            };
            any = any.or(TransportAuthentication::new(Mechanism::Tls, principal));
        }
        if self.peer_credentials {
            let principal = credentials.map(process_principal);
            any = any.or(TransportAuthentication::new(
                Mechanism::PeerCredentials,
                principal,
            ));
        }
        if !self.keys.is_empty() {
            any = any.or(PskServer::new(self.keys.clone(), nonce()));
        }
        if self.none {
            any = any.or(TransportAuthentication::none());
        }
        Box::new(any)
    }
}

/// The principal of a local process.
pub(crate) fn process_principal(credentials: PeerCredentials) -> Principal {
    Principal::Process {
        uid: credentials.uid,
        gid: credentials.gid,
        pid: u32::try_from(credentials.pid).unwrap_or(0),
    }
}

/// How a client authenticates. The default uses the kernel's peer credentials on local
/// transports (`unix://`, `shm://`, `mem://`) and refuses to connect over TCP until told
/// how to authenticate there.
#[derive(Clone, Default)]
pub struct ClientAuth {
    mechanism: ClientMechanism,
}

#[derive(Clone)]
enum ClientMechanism {
    /// Peer credentials, trusting servers that run as these uids (`None`: this process's
    /// own and root).
    Local(Option<Arc<[u32]>>),
    None,
    Psk(PreSharedKey),
    Tls(Arc<rustls::ClientConfig>, String),
}

impl Default for ClientMechanism {
    fn default() -> Self {
        ClientMechanism::Local(None)
    }
}

impl fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.mechanism {
            ClientMechanism::Local(None) => f.write_str("ClientAuth::peer_credentials"),
            ClientMechanism::Local(Some(uids)) => {
                write!(f, "ClientAuth::peer_credentials_trusting({uids:?})")
            }
            ClientMechanism::None => f.write_str("ClientAuth::none"),
            ClientMechanism::Psk(key) => write!(f, "ClientAuth::psk({:?})", key.id()),
            ClientMechanism::Tls(_, name) => write!(f, "ClientAuth::tls({name:?})"),
        }
    }
}

/// What a client needs from its transport to authenticate.
pub(crate) enum ClientTransport<'a> {
    /// A plain connection.
    Plain,
    /// TCP wrapped in TLS with this configuration, checking the server's certificate
    /// against this name.
    Tls(&'a Arc<rustls::ClientConfig>, &'a str),
}

impl ClientAuth {
    /// Peer credentials on local transports (the default). The server learns who this
    /// process is from the kernel; this client, in turn, connects only to a server
    /// running as its own user or as root (also from the kernel), so that another local
    /// user cannot pose as the server (by taking a free `shm://` name, or a socket path in
    /// a shared directory). See [`ClientAuth::peer_credentials_trusting`] for a server
    /// that runs as another user.
    pub fn peer_credentials() -> ClientAuth {
        ClientAuth::default()
    }

    /// Peer credentials on local transports, connecting only to a server that runs as
    /// one of `server_uids` (root included only if listed).
    pub fn peer_credentials_trusting(server_uids: impl IntoIterator<Item = u32>) -> ClientAuth {
        ClientAuth {
            mechanism: ClientMechanism::Local(Some(server_uids.into_iter().collect())),
        }
    }

    /// Checks, before the handshake, that the server behind `transport` is one this
    /// client trusts (peer credentials only: the other mechanisms check the server in the
    /// handshake, or do not).
    pub(crate) fn check_server(
        &self,
        endpoint: &Endpoint,
        server: Option<PeerCredentials>,
    ) -> Result<(), Error> {
        let ClientMechanism::Local(trusted) = &self.mechanism else {
            return Ok(());
        };
        let Some(server) = server else {
            return Err(Error::new(
                ErrorKind::Unauthenticated,
                format!("connecting to {endpoint}: the kernel did not say who serves there"),
            ));
        };
        let own = lanner_shm::sys::process_credentials().uid;
        let trusts = match trusted {
            Some(uids) => uids.contains(&server.uid),
            None => server.uid == own || server.uid == 0,
        };
        if trusts {
            return Ok(());
        }
        let trusted = match trusted {
            Some(uids) => format!("uids {uids:?}"),
            None => format!("its own uid ({own}) and root"),
        };
        Err(Error::new(
            ErrorKind::Unauthenticated,
            format!(
                "connecting to {endpoint}: the server runs as uid {} (pid {}), and this client trusts {trusted} (ClientAuth::peer_credentials_trusting names others)",
                server.uid, server.pid
            ),
        ))
    }

    /// No authentication: the server must accept anonymous clients. Only for trusted
    /// networks and tests.
    pub fn none() -> ClientAuth {
        ClientAuth {
            mechanism: ClientMechanism::None,
        }
    }

    /// Proves possession of `key` on any transport, and checks that the server holds it
    /// too before sending anything.
    pub fn psk(key: PreSharedKey) -> ClientAuth {
        ClientAuth {
            mechanism: ClientMechanism::Psk(key),
        }
    }

    /// TLS 1.3 over TCP with `config` (trusted roots, and a client certificate if the
    /// server wants one), checking that the server's certificate is valid for
    /// `server_name` (a DNS name or an IP address).
    pub fn tls(config: Arc<rustls::ClientConfig>, server_name: impl Into<String>) -> ClientAuth {
        ClientAuth {
            mechanism: ClientMechanism::Tls(config, server_name.into()),
        }
    }

    /// How to open the transport to `endpoint`, or why this client cannot authenticate
    /// there.
    pub(crate) fn transport_for(&self, endpoint: &Endpoint) -> Result<ClientTransport<'_>, Error> {
        let tcp = matches!(endpoint, Endpoint::Tcp(_));
        match &self.mechanism {
            ClientMechanism::Local(_) if tcp => Err(Error::new(
                ErrorKind::Unauthenticated,
                format!(
                    "connecting to {endpoint}: peer credentials do not work over TCP; give the client ClientAuth::psk or ClientAuth::tls (or ClientAuth::none, explicitly, for a server that accepts anyone)"
                ),
            )),
            ClientMechanism::Tls(..) if !tcp => Err(Error::new(
                ErrorKind::Unauthenticated,
                format!("connecting to {endpoint}: TLS is available on tcp:// endpoints only"),
            )),
            ClientMechanism::Tls(config, name) => Ok(ClientTransport::Tls(config, name)),
            _ => Ok(ClientTransport::Plain),
        }
    }

    /// The authenticator for one connection attempt.
    pub(crate) fn authenticator(&self) -> Box<dyn ClientAuthenticator> {
        match &self.mechanism {
            ClientMechanism::Local(_) => {
                Box::new(TransportAuthentication::client(Mechanism::PeerCredentials))
            }
            ClientMechanism::None => Box::new(TransportAuthentication::none()),
            ClientMechanism::Tls(..) => Box::new(TransportAuthentication::client(Mechanism::Tls)),
            ClientMechanism::Psk(key) => Box::new(
                PskClient::new(&key.id, key.secret.clone(), nonce())
                    .expect("the key id was checked when the key was made"),
            ),
        }
    }
}

/// A fresh nonce from the thread's cryptographically secure generator (seeded by the
/// operating system).
fn nonce() -> [u8; NONCE_LEN] {
    rand::random()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served_by(uid: u32) -> Option<PeerCredentials> {
        Some(PeerCredentials {
            pid: 4242,
            uid,
            gid: 0,
        })
    }

    #[test]
    fn by_default_a_client_trusts_a_local_server_of_its_own_user_or_root() {
        let endpoint = Endpoint::parse("unix:///tmp/lanner-auth-test.sock").unwrap();
        let own = lanner_shm::sys::process_credentials().uid;
        let other = if own == 1000 { 1001 } else { 1000 };
        let auth = ClientAuth::peer_credentials();
        assert!(auth.check_server(&endpoint, served_by(own)).is_ok());
        assert!(auth.check_server(&endpoint, served_by(0)).is_ok());
        let error = auth.check_server(&endpoint, served_by(other)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Unauthenticated, "{error}");
        assert!(
            error
                .message()
                .contains(&format!("runs as uid {other} (pid 4242)")),
            "{error}"
        );
        // Without credentials there is nothing to trust.
        assert!(auth.check_server(&endpoint, None).is_err());
        // Other mechanisms check the server their own way.
        assert!(ClientAuth::none().check_server(&endpoint, None).is_ok());
        // An explicit list is the whole list: root only if named.
        let auth = ClientAuth::peer_credentials_trusting([other]);
        assert!(auth.check_server(&endpoint, served_by(other)).is_ok());
        assert!(auth.check_server(&endpoint, served_by(0)).is_err());
    }
}
