//! Authentication and authorization through the public API, over real sockets and shared
//! memory: every way in either works as configured or ends in a clear error and no access.

use std::sync::Arc;

use lanner::{
    AccessPolicy, CallContext, Client, ClientAuth, Error, ErrorKind, Object, PreSharedKey,
    Principal, Proxy, Server, ServerAuth, Target,
};

mod common;

use common::pki::{Pki, tls_client_config, tls_server_config};

/// A guarded object: what a method sees of its caller, and methods to allow or deny.
#[lanner::interface]
trait Guarded {
    async fn whoami(&self) -> Result<(String, Vec<String>), Error>;
    async fn read(&self) -> Result<u32, Error>;
    async fn reset(&self) -> Result<(), Error>;
}

struct Vault;

impl Guarded for Vault {
    async fn whoami(&self) -> Result<(String, Vec<String>), Error> {
        let call = CallContext::current().expect("called remotely");
        Ok((call.principal().to_string(), call.roles().to_vec()))
    }

    async fn read(&self) -> Result<u32, Error> {
        Ok(42)
    }

    async fn reset(&self) -> Result<(), Error> {
        Ok(())
    }
}

fn vault() -> Object {
    Object::new(GuardedStub::new(Arc::new(Vault)))
}

fn key(id: &str, byte: u8) -> PreSharedKey {
    PreSharedKey::new(id, [byte; 32]).unwrap()
}

fn unix_endpoint(tag: &str) -> String {
    let path = std::env::temp_dir().join(format!("lanner-sec-{tag}-{}.sock", std::process::id()));
    format!("unix://{}", path.display())
}

async fn serve(server: Server, endpoint: &str) -> (Server, lanner::Listening) {
    server.publish("vault", vault());
    let listening = server
        .listen(endpoint)
        .await
        .unwrap_or_else(|e| panic!("listen on {endpoint}: {e}"));
    (server, listening)
}

fn url(listening: &lanner::Listening) -> String {
    listening.endpoint().object_url("vault")
}

fn assert_error(error: &Error, kind: ErrorKind, fragment: &str) {
    assert_eq!(error.kind(), kind, "{error}");
    assert!(error.message().contains(fragment), "{error}");
}

#[tokio::test]
async fn a_pre_shared_key_authenticates_over_tcp_and_names_the_principal() {
    let (_server, listening) = serve(
        Server::new().with_auth(ServerAuth::psk(key("ops", 7))),
        "tcp://127.0.0.1:0",
    )
    .await;
    let vault: GuardedProxy = Client::new()
        .with_auth(ClientAuth::psk(key("ops", 7)))
        .connect(&url(&listening))
        .await
        .unwrap();
    assert_eq!(vault.whoami().await, Ok(("psk:ops".to_owned(), vec![])));
    assert_eq!(vault.read().await, Ok(42));
}

#[tokio::test]
async fn a_wrong_key_or_no_key_gets_unauthenticated_and_nothing_else() {
    let (_server, listening) = serve(
        Server::new().with_auth(ServerAuth::psk(key("ops", 7))),
        "tcp://127.0.0.1:0",
    )
    .await;
    let wrong = Client::new()
        .with_auth(ClientAuth::psk(key("ops", 8)))
        .connect::<GuardedProxy>(&url(&listening))
        .await
        .unwrap_err();
    assert_error(&wrong, ErrorKind::Unauthenticated, "could not prove");
    assert!(!wrong.may_have_executed());

    let unknown = Client::new()
        .with_auth(ClientAuth::psk(key("intruder", 7)))
        .connect::<GuardedProxy>(&url(&listening))
        .await
        .unwrap_err();
    assert_error(&unknown, ErrorKind::Unauthenticated, "no key \"intruder\"");

    let anonymous = Client::new()
        .with_auth(ClientAuth::none())
        .connect::<GuardedProxy>(&url(&listening))
        .await
        .unwrap_err();
    assert_error(
        &anonymous,
        ErrorKind::Unauthenticated,
        "does not accept none",
    );
    assert_error(&anonymous, ErrorKind::Unauthenticated, "psk");

    // The server is unharmed: the right key still gets in.
    let vault: GuardedProxy = Client::new()
        .with_auth(ClientAuth::psk(key("ops", 7)))
        .connect(&url(&listening))
        .await
        .unwrap();
    assert_eq!(vault.read().await, Ok(42));
}

#[tokio::test]
async fn a_client_insisting_on_a_key_refuses_a_server_without_one() {
    let (_server, listening) = serve(
        Server::new().with_auth(ServerAuth::none()),
        "tcp://127.0.0.1:0",
    )
    .await;
    let error = Client::new()
        .with_auth(ClientAuth::psk(key("ops", 7)))
        .connect::<GuardedProxy>(&url(&listening))
        .await
        .unwrap_err();
    assert_error(&error, ErrorKind::Unauthenticated, "does not accept psk");
}

#[tokio::test]
async fn tcp_needs_an_explicit_choice_on_both_sides() {
    let error = Server::new().listen("tcp://127.0.0.1:0").await.unwrap_err();
    assert_error(&error, ErrorKind::Unauthenticated, "ServerAuth::none");
    let error = Client::new()
        .resolve("tcp://127.0.0.1:9/vault")
        .await
        .unwrap_err();
    assert_error(
        &error,
        ErrorKind::Unauthenticated,
        "ClientAuth::psk or ClientAuth::tls",
    );
    let error = Client::new()
        .with_auth(ClientAuth::tls(
            tls_client_config(&Pki::new(), None),
            "localhost",
        ))
        .resolve("mem://nowhere/vault")
        .await
        .unwrap_err();
    assert_error(&error, ErrorKind::Unauthenticated, "tcp:// endpoints only");
}

#[tokio::test]
async fn local_peers_are_known_by_the_kernel_and_a_key_works_there_too() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let endpoint = unix_endpoint("peercred");
    let (_server, listening) = serve(Server::new(), &endpoint).await;
    let vault: GuardedProxy = Client::new().connect(&url(&listening)).await.unwrap();
    let (principal, _) = vault.whoami().await.unwrap();
    assert!(principal.starts_with(&format!("uid:{uid} ")), "{principal}");
    drop(listening);

    // A server may accept keys beside peer credentials: a key holder is then its key.
    let shm = format!("shm://lanner-sec-{}", std::process::id());
    let (_server, listening) = serve(
        Server::new().with_auth(ServerAuth::peer_credentials().and_psk(key("batch", 3))),
        &shm,
    )
    .await;
    let by_key: GuardedProxy = Client::new()
        .with_auth(ClientAuth::psk(key("batch", 3)))
        .connect(&url(&listening))
        .await
        .unwrap();
    assert_eq!(by_key.whoami().await.unwrap().0, "psk:batch");
    let by_uid: GuardedProxy = Client::new().connect(&url(&listening)).await.unwrap();
    assert!(by_uid.whoami().await.unwrap().0.starts_with("uid:"));
}

/// A policy: `readers` (this process's uid, or the `ops` key) may read and ask who they
/// are; only `ops` may reset.
fn policy(uid: u32) -> AccessPolicy {
    AccessPolicy::deny_by_default()
        .role("readers", [format!("uid:{uid}"), "psk:ops".to_owned()])
        .role("admins", ["psk:ops"])
        .allow(Target::object("vault"), ["role:readers"])
        .deny(
            Target::object("vault")
                .interface::<GuardedProxy>()
                .method("reset"),
            ["*"],
        )
        .allow(Target::object("vault").method("reset"), ["role:admins"])
}

#[tokio::test]
async fn denied_methods_fail_alone_and_the_connection_stays_usable() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let endpoint = unix_endpoint("policy");
    let (_server, listening) = serve(Server::new().with_access(policy(uid)), &endpoint).await;
    let vault: GuardedProxy = Client::new().connect(&url(&listening)).await.unwrap();
    let (principal, roles) = vault.whoami().await.unwrap();
    assert_eq!(roles, vec!["readers"]);
    // Deny wins over allow, even for the admin role's own allow rule.
    let error = vault.reset().await.unwrap_err();
    assert_error(&error, ErrorKind::PermissionDenied, "may not call");
    assert_error(&error, ErrorKind::PermissionDenied, "reset");
    assert!(
        error
            .message()
            .contains(principal.split(' ').next().unwrap()),
        "{error}"
    );
    assert!(!error.may_have_executed());
    assert_eq!(vault.read().await, Ok(42));
}

/// A hand-written stub for [`Guarded`] that dispatches on the ordinal the caller named and
/// never asks `IncomingCall::route` (which applies the policy): it answers which ordinal
/// ran.
struct Unrouted;

impl lanner::Stub for Unrouted {
    fn interface_id(&self) -> lanner::InterfaceId {
        <GuardedProxy as Proxy>::INTERFACE_ID
    }

    fn interface_name(&self) -> &'static str {
        <GuardedProxy as Proxy>::INTERFACE_NAME
    }

    fn methods(&self) -> &'static [lanner::MethodInfo] {
        <GuardedProxy as Proxy>::METHODS
    }

    fn dispatch(&self, call: lanner::IncomingCall<'_>) -> lanner::DispatchFuture {
        let ran = format!("the stub ran method {}", call.method());
        Box::pin(async move { lanner::Reply::error(&Error::new(ErrorKind::Internal, ran)) })
    }
}

#[tokio::test]
async fn the_policy_holds_for_a_hand_written_stub_that_does_not_route() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let endpoint = unix_endpoint("unrouted");
    let server = Server::new().with_access(policy(uid));
    server.publish("vault", Object::new(Unrouted));
    let _listening = server.listen(&endpoint).await.unwrap();
    let vault: GuardedProxy = Client::new()
        .connect(&format!("{endpoint}/vault"))
        .await
        .unwrap();
    let error = vault.reset().await.unwrap_err();
    assert_error(&error, ErrorKind::PermissionDenied, "may not call");
    // What the policy allows reaches the stub.
    let error = vault.read().await.unwrap_err();
    assert_error(&error, ErrorKind::Internal, "the stub ran method 1");
}

#[tokio::test]
async fn a_principal_that_may_call_nothing_cannot_even_resolve_the_object() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    // The policy admits another uid only: this process is, to it, a stranger.
    let endpoint = unix_endpoint("stranger");
    let (_server, listening) = serve(
        Server::new().with_access(policy(uid.wrapping_add(1))),
        &endpoint,
    )
    .await;
    let error = Client::new()
        .connect::<GuardedProxy>(&url(&listening))
        .await
        .unwrap_err();
    assert_error(&error, ErrorKind::PermissionDenied, "may not use");
    assert_error(&error, ErrorKind::PermissionDenied, &format!("uid:{uid}"));
}

#[tokio::test]
async fn without_a_policy_every_authenticated_peer_may_call_everything() {
    let (_server, listening) = serve(Server::new(), "mem://sec-no-policy").await;
    let vault: GuardedProxy = Client::new().connect(&url(&listening)).await.unwrap();
    assert_eq!(vault.reset().await, Ok(()));
}

#[tokio::test]
async fn tls_with_client_certificates_names_the_subject_and_the_policy_uses_it() {
    let pki = Pki::new();
    let policy = AccessPolicy::deny_by_default().allow(Target::everything(), ["cert:CN=alice"]);
    let (_server, listening) = serve(
        Server::new()
            .with_auth(ServerAuth::tls(tls_server_config(&pki, true)))
            .with_access(policy),
        "tcp://127.0.0.1:0",
    )
    .await;
    let alice: GuardedProxy = Client::new()
        .with_auth(ClientAuth::tls(
            tls_client_config(&pki, Some("alice")),
            "localhost",
        ))
        .connect(&url(&listening))
        .await
        .unwrap();
    assert_eq!(
        alice.whoami().await,
        Ok(("cert:CN=alice".to_owned(), vec![]))
    );

    let bob = Client::new()
        .with_auth(ClientAuth::tls(
            tls_client_config(&pki, Some("bob")),
            "localhost",
        ))
        .connect::<GuardedProxy>(&url(&listening))
        .await
        .unwrap_err();
    assert_error(&bob, ErrorKind::PermissionDenied, "cert:CN=bob");

    // No client certificate: the TLS handshake itself fails.
    let nobody = Client::new()
        .with_auth(ClientAuth::tls(tls_client_config(&pki, None), "localhost"))
        .connect::<GuardedProxy>(&url(&listening))
        .await
        .unwrap_err();
    // (TLS 1.3 clients finish before the server checks them: the refusal arrives as
    // an alert while the client waits for its WELCOME.)
    assert_error(&nobody, ErrorKind::Unauthenticated, "CertificateRequired");
}

#[tokio::test]
async fn a_tls_client_refuses_a_server_it_does_not_trust() {
    let (_server, listening) = serve(
        Server::new().with_auth(ServerAuth::tls(tls_server_config(&Pki::new(), false))),
        "tcp://127.0.0.1:0",
    )
    .await;
    // The client trusts another CA.
    let error = Client::new()
        .with_auth(ClientAuth::tls(
            tls_client_config(&Pki::new(), None),
            "localhost",
        ))
        .connect::<GuardedProxy>(&url(&listening))
        .await
        .unwrap_err();
    assert_error(
        &error,
        ErrorKind::Unauthenticated,
        "invalid peer certificate",
    );
    // A plain client at a TLS server gets nowhere either.
    let error = Client::new()
        .with_auth(ClientAuth::none())
        .connect::<GuardedProxy>(&url(&listening))
        .await
        .unwrap_err();
    assert_error(
        &error,
        ErrorKind::Unavailable,
        "connect with ClientAuth::tls",
    );
}

#[tokio::test]
async fn a_tls_client_without_a_certificate_is_anonymous_only_if_the_server_says_so() {
    let pki = Pki::new();
    // TLS alone encrypts; it does not say who the client is.
    let (_server, listening) = serve(
        Server::new().with_auth(ServerAuth::tls(tls_server_config(&pki, false))),
        "tcp://127.0.0.1:0",
    )
    .await;
    let error = Client::new()
        .with_auth(ClientAuth::tls(tls_client_config(&pki, None), "localhost"))
        .connect::<GuardedProxy>(&url(&listening))
        .await
        .unwrap_err();
    assert_error(&error, ErrorKind::Unauthenticated, "no client certificate");

    let (_server, listening) = serve(
        Server::new().with_auth(ServerAuth::tls(tls_server_config(&pki, false)).and_none()),
        "tcp://127.0.0.1:0",
    )
    .await;
    let vault: GuardedProxy = Client::new()
        .with_auth(ClientAuth::tls(tls_client_config(&pki, None), "localhost"))
        .connect(&url(&listening))
        .await
        .unwrap();
    assert_eq!(vault.whoami().await, Ok(("anonymous".to_owned(), vec![])));
    assert!(Principal::Anonymous.is_named("anonymous"));
}

/// The environment variable through which [`a_peer_running_as_another_user_is_that_user`]
/// hands its two object URLs (denied, then open) to the copy of this test binary it runs
/// as another user.
const CHILD_URLS: &str = "LANNER_SECURITY_CHILD_URLS";

#[tokio::test]
async fn a_peer_running_as_another_user_is_that_user() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if uid != 0 {
        eprintln!("skipped: running a client as another user needs root");
        return;
    }
    let pid = std::process::id();
    // Only this process's user may use the first vault; anyone the second.
    let (_guarded, denied) = serve(
        Server::new().with_access(policy(uid)),
        &format!("shm://lanner-sec-uid-{pid}"),
    )
    .await;
    let (_open, open) = serve(Server::new(), &format!("shm://lanner-sec-open-{pid}")).await;

    // A copy of this test binary, runnable by `nobody` whatever the checkout's permissions.
    let dir = std::env::temp_dir().join(format!("lanner-sec-child-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let child = dir.join("child");
    std::fs::copy(std::env::current_exe().unwrap(), &child).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&child, std::fs::Permissions::from_mode(0o755)).unwrap();
    let urls = format!("{} {}", url(&denied), url(&open));
    let output = tokio::task::spawn_blocking(move || {
        use std::os::unix::process::CommandExt;
        std::process::Command::new(&child)
            .args(["--exact", "child_calls_as_whoever_runs_it", "--nocapture"])
            .env(CHILD_URLS, urls)
            .uid(65534)
            .gid(65534)
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let denied = stdout
        .lines()
        .find(|line| line.starts_with("denied: "))
        .unwrap_or_default();
    assert!(
        denied.starts_with("denied: permission denied: "),
        "{stdout}"
    );
    assert!(denied.contains("uid:65534 (gid 65534"), "{stdout}");
    assert!(stdout.contains("open: uid:65534 (gid 65534"), "{stdout}");
}

/// Not a test of its own: the client half of [`a_peer_running_as_another_user_is_that_user`],
/// which runs it in a child process as another user. Without its environment variable it
/// does nothing.
#[tokio::test]
async fn child_calls_as_whoever_runs_it() {
    let Ok(urls) = std::env::var(CHILD_URLS) else {
        return;
    };
    let (denied, open) = urls.split_once(' ').unwrap();
    match Client::new().connect::<GuardedProxy>(denied).await {
        Ok(_) => println!("denied: resolved (should not have)"),
        Err(error) => println!("denied: {}: {}", error.kind().name(), error.message()),
    }
    let open: GuardedProxy = Client::new().connect(open).await.unwrap();
    println!("open: {}", open.whoami().await.unwrap().0);
}

#[tokio::test]
async fn a_request_that_skips_the_last_authentication_step_is_refused() {
    use lanner_proto::auth::psk::PskClient;
    use lanner_proto::{Event, Frame, Limits, MessageBuilder, Status};
    use tokio::io::AsyncWriteExt;

    let (_server, listening) = serve(
        Server::new().with_auth(ServerAuth::psk(key("ops", 7))),
        "tcp://127.0.0.1:0",
    )
    .await;
    let address = listening.endpoint().to_string().replace("tcp://", "");
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    // A genuine HELLO and WELCOME (the client even holds the key)...
    let secret: Arc<[u8]> = Arc::from(&[7u8; 32][..]);
    let psk = PskClient::new("ops", secret, [9; 32]).unwrap();
    let (mut proto, hello) =
        lanner_proto::Connection::client_with(Limits::default(), Box::new(psk));
    socket.write_all(&hello).await.unwrap();
    let welcome = common::read_frame(&mut socket).await.unwrap();
    assert!(matches!(
        proto.handle_frame(welcome),
        Ok(Event::Established { auth: Some(_) })
    ));
    // ...but a request instead of the AUTH frame.
    let request = MessageBuilder::request(0, 0, 0, 0);
    let (_, frame) = proto.send_request(request).map_err(|(e, _)| e).unwrap();
    socket.write_all(&frame.into_contiguous()).await.unwrap();
    let close = common::read_frame(&mut socket).await.unwrap();
    match Frame::decode(close) {
        Ok(Frame::Close(close)) => {
            assert_eq!(close.status, Status::Unauthenticated);
            assert!(
                close.reason.contains("before authentication"),
                "{}",
                close.reason
            );
        }
        other => panic!("expected CLOSE, got {other:?}"),
    }
    // And the server hangs up.
    assert!(common::read_frame(&mut socket).await.is_err());
}

#[tokio::test]
async fn a_truncated_or_oversized_handshake_gets_nothing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let options = lanner::ConnectionOptions::default()
        .with_handshake_timeout(std::time::Duration::from_millis(200));
    let (_server, listening) = serve(
        Server::with_options(options).with_auth(ServerAuth::psk(key("ops", 7))),
        "tcp://127.0.0.1:0",
    )
    .await;
    let address = listening.endpoint().to_string().replace("tcp://", "");
    let hang_up = std::time::Duration::from_secs(10);

    // The first ten bytes of a HELLO, then silence: the server hangs up at the handshake
    // timeout, having said nothing.
    let (_, hello) = lanner_proto::Connection::client(lanner_proto::Limits::default());
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    socket.write_all(&hello[..10]).await.unwrap();
    let mut received = Vec::new();
    tokio::time::timeout(hang_up, socket.read_to_end(&mut received))
        .await
        .expect("the server hangs up")
        .unwrap();
    assert!(received.is_empty(), "{received:?}");

    // A header announcing a 2 GiB frame: refused from the header alone (nothing is
    // reserved for it), with a CLOSE saying why.
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    socket
        .write_all(&[0xff, 0xff, 0xff, 0x7f, 1, 0, 0, 0])
        .await
        .unwrap();
    let mut received = Vec::new();
    tokio::time::timeout(hang_up, socket.read_to_end(&mut received))
        .await
        .expect("the server hangs up")
        .unwrap();
    match lanner_proto::Frame::decode(received.into()) {
        Ok(lanner_proto::Frame::Close(close)) => {
            assert_eq!(close.status, lanner_proto::Status::Protocol);
            assert!(
                close
                    .reason
                    .contains("exceeds the maximum frame size of 4096"),
                "{}",
                close.reason
            );
        }
        other => panic!("expected CLOSE, got {other:?}"),
    }
}

#[tokio::test]
async fn silent_clients_beyond_the_handshake_bound_wait_and_real_ones_get_in() {
    use tokio::io::AsyncReadExt;

    let options = lanner::ConnectionOptions::default()
        .with_handshake_timeout(std::time::Duration::from_millis(300));
    let (_server, listening) = serve(
        Server::with_options(options)
            .with_auth(ServerAuth::psk(key("ops", 7)))
            .with_max_pending_handshakes(2),
        "tcp://127.0.0.1:0",
    )
    .await;
    let address = listening.endpoint().to_string().replace("tcp://", "");
    // Four clients that connect and say nothing: each takes a handshake slot, the oldest
    // dropped to make room for the next. None of this stops a real client.
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    let vault: GuardedProxy = Client::new()
        .with_auth(ClientAuth::psk(key("ops", 7)))
        .connect(&listening.endpoint().object_url("vault"))
        .await
        .unwrap();
    assert_eq!(vault.read().await, Ok(42));
    // Every silent client was hung up on.
    for mut socket in silent {
        let mut received = Vec::new();
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            socket.read_to_end(&mut received),
        )
        .await
        .expect("the server hangs up")
        .unwrap();
        assert!(received.is_empty());
    }
}

#[tokio::test]
async fn silent_clients_renewing_every_handshake_slot_do_not_keep_a_real_one_waiting() {
    use std::time::Duration;

    // Silent clients outnumbering the slots, each allowed a long handshake: a server that
    // stopped accepting while its slots were full would keep the real client in the
    // backlog behind them for minutes.
    let options =
        lanner::ConnectionOptions::default().with_handshake_timeout(Duration::from_secs(60));
    let (_server, listening) = serve(
        Server::with_options(options)
            .with_auth(ServerAuth::psk(key("ops", 7)))
            .with_max_pending_handshakes(4),
        "tcp://127.0.0.1:0",
    )
    .await;
    let address = listening.endpoint().to_string().replace("tcp://", "");
    let mut silent = Vec::new();
    for _ in 0..32 {
        silent.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    let client = Client::new().with_auth(ClientAuth::psk(key("ops", 7)));
    let url = listening.endpoint().object_url("vault");
    let vault: GuardedProxy = tokio::time::timeout(Duration::from_secs(10), client.connect(&url))
        .await
        .expect("the real client got in while silent ones held the slots")
        .unwrap();
    assert_eq!(vault.read().await, Ok(42));
    drop(silent);
}

#[tokio::test]
async fn the_handshake_timeout_bounds_the_whole_handshake_not_each_step() {
    use lanner_proto::auth::psk::{NONCE_LEN, PskClient};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    // Long enough that a stall of a second on a loaded machine changes nothing.
    let timeout = Duration::from_secs(4);
    let options = lanner::ConnectionOptions::default().with_handshake_timeout(timeout);
    let (_server, listening) = serve(
        Server::with_options(options).with_auth(ServerAuth::psk(key("ops", 7))),
        "tcp://127.0.0.1:0",
    )
    .await;
    let address = listening.endpoint().to_string().replace("tcp://", "");

    // A client that knows the key and takes most of the timeout over each step: HELLO
    // after half of it, AUTH three quarters of it after the WELCOME. Each step is in
    // time; the handshake as a whole is not, and the server hangs up before the AUTH.
    let authenticator = PskClient::new("ops", Arc::from([7u8; 32]), [1; NONCE_LEN]).unwrap();
    let (mut proto, hello) = lanner_proto::Connection::client_with(
        lanner_proto::Limits::default(),
        Box::new(authenticator),
    );
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    tokio::time::sleep(timeout / 2).await;
    socket.write_all(&hello).await.unwrap();
    let welcome = common::read_frame(&mut socket).await.unwrap();
    let auth = match proto.handle_frame(welcome) {
        Ok(lanner_proto::Event::Established { auth: Some(auth) }) => auth,
        other => panic!("expected WELCOME asking for AUTH, got {other:?}"),
    };
    tokio::time::sleep(timeout * 3 / 4).await;
    // The server may have reset the connection already.
    let _ = socket.write_all(&auth).await;
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut received))
        .await
        .expect("the server hangs up instead of admitting a late client");
    assert!(received.is_empty(), "{read:?} {received:?}");
}

#[tokio::test]
async fn a_client_connects_only_to_a_local_server_running_as_a_user_it_trusts() {
    use std::os::unix::fs::MetadataExt;
    // This process's effective uid (the owner of its /proc entry), which the servers
    // below run as.
    let own = std::fs::metadata("/proc/self").unwrap().uid();
    let shm = format!("shm://lanner-sec-trusting-{}", std::process::id());
    for endpoint in [unix_endpoint("trusting"), shm] {
        let (_server, listening) = serve(Server::new(), &endpoint).await;
        // By default a server running as this user is trusted.
        let vault: GuardedProxy = Client::new().connect(&url(&listening)).await.unwrap();
        assert_eq!(vault.read().await, Ok(42));
        // A client that trusts only another user refuses it before saying anything.
        let error = Client::new()
            .with_auth(ClientAuth::peer_credentials_trusting([own.wrapping_add(1)]))
            .connect::<GuardedProxy>(&url(&listening))
            .await
            .unwrap_err();
        assert_error(
            &error,
            ErrorKind::Unauthenticated,
            &format!("the server runs as uid {own}"),
        );
        // Naming the server's user trusts it.
        let vault: GuardedProxy = Client::new()
            .with_auth(ClientAuth::peer_credentials_trusting([own]))
            .connect(&url(&listening))
            .await
            .unwrap();
        assert_eq!(vault.read().await, Ok(42));
    }
}

#[tokio::test]
async fn a_server_does_not_listen_with_a_policy_naming_nobody() {
    // A misspelt name in a deny rule would deny nobody.
    let policy = AccessPolicy::allow_by_default().deny(Target::object("vault"), ["user:1000"]);
    let error = Server::new()
        .with_access(policy)
        .listen(&unix_endpoint("misspelt"))
        .await
        .unwrap_err();
    assert_error(&error, ErrorKind::InvalidArgument, "\"user:1000\"");
}

#[tokio::test]
async fn a_rule_naming_a_method_its_interface_lacks_is_refused_at_listen() {
    // "rest" for "reset": the deny rule would deny nothing.
    let misspelt = AccessPolicy::allow_by_default().deny(
        Target::everything()
            .interface::<GuardedProxy>()
            .method("rest"),
        ["*"],
    );
    let server = Server::new().with_access(misspelt);
    server.publish("vault", vault());
    let error = server.listen("mem://sec-misspelt").await.unwrap_err();
    assert_error(&error, ErrorKind::InvalidArgument, "\"rest\"");
    assert_error(&error, ErrorKind::InvalidArgument, "reset");

    // In either order, the method is checked against the interface.
    let spelt = AccessPolicy::allow_by_default().deny(
        Target::everything()
            .method("reset")
            .interface::<GuardedProxy>(),
        ["*"],
    );
    let (_server, listening) = serve(Server::new().with_access(spelt), "mem://sec-spelt").await;
    let vault: GuardedProxy = Client::new().connect(&url(&listening)).await.unwrap();
    assert_error(
        &vault.reset().await.unwrap_err(),
        ErrorKind::PermissionDenied,
        "reset",
    );
}
