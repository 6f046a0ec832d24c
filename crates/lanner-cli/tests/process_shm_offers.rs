//! Clients that never read their shared-memory offers, against a real unprivileged server:
//! the descriptors of an unread offer are charged to the server's user, and once it has
//! more in flight than its `RLIMIT_NOFILE` every later offer fails (`ETOOMANYREFS`; root is
//! exempt, so the server runs as `nobody`). Its listeners (Lanner's, and the raw
//! baseline's beside it, whose offers are charged to the same user) refuse a user's
//! connections beyond a bound of untaken offers instead, and an honest client of another
//! user still connects (see `docs/decisions.md`, "Offers a client never takes").

mod support;

use std::io::{BufRead, BufReader, Read};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use lanner_cli::server_process::{ServeAuth, ServerProcess};
use lanner_cli::services::{Calculator, CalculatorProxy};
use lanner_cli::transport_arg::TransportArg;
use support::{PATIENCE, runtime};

/// The server's user: `nobody`.
const SERVER_UID: u32 = 65534;
/// The never-reading clients' user: neither the server's nor the honest client's (root).
const NEVER_READING_UID: u32 = 65533;
/// The server's `RLIMIT_NOFILE`: past 33 unread offers (2 descriptors each), every offer
/// of its user would fail.
const OPEN_FILES: u32 = 64;
/// How many connections the never-reading user makes to each listener.
const NEVER_READING: usize = 40;
/// Set (to `<abstract socket name>,<abstract socket name>:<count>`) in the environment of
/// the never-reading child process.
const NEVER_READING_ENV: &str = "LANNER_TEST_NEVER_READING";
/// What the never-reading child prints once its connections are all made (after the
/// harness's "test <name> ... " on the same line).
const HELD: &str = "never-reading: held";

/// Why `path` cannot be executed by another user, if it cannot: each directory on the way
/// must be searchable by others and the file executable by them.
fn not_executable_by_others(path: &Path) -> Option<String> {
    let mut needed = vec![(path, 0o001)];
    needed.extend(path.ancestors().skip(1).map(|dir| (dir, 0o001)));
    for (entry, bit) in needed {
        match std::fs::metadata(entry) {
            Ok(metadata) if metadata.permissions().mode() & bit != 0 => {}
            Ok(_) => return Some(format!("{} is not accessible to others", entry.display())),
            Err(e) => return Some(format!("{}: {e}", entry.display())),
        }
    }
    None
}

#[test]
fn an_honest_client_connects_to_an_unprivileged_server_after_many_never_reading_ones() {
    if lanner_shm::sys::process_credentials().uid != 0 {
        eprintln!("skipped: the test must run as root to start processes as other users");
        return;
    }
    let program = Path::new(env!("CARGO_BIN_EXE_lanner"));
    let this_test = std::env::current_exe().expect("the test's executable");
    for executable in [program, &this_test] {
        if let Some(why) = not_executable_by_others(executable) {
            eprintln!("skipped: the other users cannot run the executables ({why})");
            return;
        }
    }
    let serve = ServerProcess::command(
        program,
        TransportArg::Shm,
        None,
        Duration::from_micros(50),
        &ServeAuth::PeerCredentials,
    );
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!("ulimit -n {OPEN_FILES} && exec \"$0\" \"$@\""))
        .arg(serve.get_program())
        .args(serve.get_args())
        .uid(SERVER_UID)
        .gid(SERVER_UID);
    let server = ServerProcess::start(command).expect("the server starts as nobody");
    let runtime = runtime();
    let honest_call = || {
        runtime.block_on(async {
            let calc: CalculatorProxy = lanner::Client::new()
                .with_auth(lanner::ClientAuth::peer_credentials_trusting([SERVER_UID]))
                .connect(&format!("{}/calc", server.lanner))
                .await
                .map_err(|e| e.to_string())?;
            tokio::time::timeout(PATIENCE, calc.add(2, 2))
                .await
                .map_err(|_| "no answer".to_owned())?
                .map_err(|e| format!("{e:?}"))
        })
    };
    assert_eq!(honest_call(), Ok(4), "before");

    let setup_socket = |endpoint: &str, prefix: &str| {
        let name = endpoint.strip_prefix("shm://").expect("an shm:// endpoint");
        format!("{prefix}/{name}")
    };
    let listeners = [
        setup_socket(&server.lanner, "lanner-shm"),
        setup_socket(&server.raw, "lanner-raw-shm"),
    ];
    let mut never_reading = Command::new(&this_test)
        .args([
            "never_reading_clients_of_another_user",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            NEVER_READING_ENV,
            format!("{}:{NEVER_READING}", listeners.join(",")),
        )
        .uid(NEVER_READING_UID)
        .gid(NEVER_READING_UID)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the never-reading clients start");
    let mut output = BufReader::new(never_reading.stdout.take().unwrap()).lines();
    let held = output
        .by_ref()
        .map_while(Result::ok)
        .find(|line| line.contains(HELD));
    assert!(
        held.is_some(),
        "the never-reading clients did not connect (their output is above)"
    );

    assert_eq!(
        honest_call(),
        Ok(4),
        "after {NEVER_READING} connections to each listener that never read their offers"
    );
    drop(never_reading.stdin.take());
    output.for_each(drop);
    never_reading.wait().unwrap();
}

/// Run by the test above as another user: connects `count` times to each of the abstract
/// sockets named in [`NEVER_READING_ENV`], reads nothing, and keeps the sockets open until
/// its stdin closes. Each connection is shut down for writing, which ends it on the server at once
/// (as a timed-out handshake would later), and the next one is made once the server has
/// let go of it: the server then never holds many connections open at once, and only the
/// offers in flight pile up.
#[test]
#[ignore = "run by the test above, as another user"]
fn never_reading_clients_of_another_user() {
    let Ok(spec) = std::env::var(NEVER_READING_ENV) else {
        return;
    };
    let (names, count) = spec.rsplit_once(':').expect("<names>:<count>");
    let count: usize = count.parse().expect("a count");
    let addresses = names
        .split(',')
        .map(|name| SocketAddr::from_abstract_name(name).unwrap());
    let connections: Vec<_> = addresses
        .flat_map(|address| std::iter::repeat_n(address, count))
        .collect();
    runtime().block_on(async {
        let mut held = Vec::new();
        for address in &connections {
            let socket = UnixStream::connect_addr(address).expect("connected");
            socket.shutdown(std::net::Shutdown::Write).unwrap();
            socket.set_nonblocking(true).unwrap();
            let socket = tokio::net::UnixStream::from_std(socket).unwrap();
            tokio::time::timeout(PATIENCE, async {
                while !socket
                    .ready(tokio::io::Interest::READABLE)
                    .await
                    .unwrap()
                    .is_read_closed()
                {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
            .await
            .expect("the server let go of the connection");
            held.push(socket);
        }
        println!("{HELD} {}", held.len());
        tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new()))
            .await
            .unwrap()
            .unwrap();
        drop(held);
    });
}
