//! capnp-rpc: the echo interface with Cap'n Proto's two-party RPC over any byte stream,
//! so over TCP and Unix sockets alike.
//!
//! capnp-rpc is single-threaded by design (its objects are `Rc`, not `Send`): both sides
//! run it on a current-thread runtime inside a `LocalSet`, as its own examples do. Streams
//! are buffered both ways (`BufReader`/`BufWriter`, as capnp-rpc recommends) and TCP has
//! `TCP_NODELAY`; reader limits are the defaults (64 MiB traversal limit), which a 1 MiB
//! payload fits.

use std::rc::Rc;

use bytes::Bytes;
use capnp_rpc::rpc_twoparty_capnp::Side;
use capnp_rpc::{RpcSystem, twoparty};
use futures::AsyncReadExt;
use futures::io::{BufReader, BufWriter};
use tokio_util::compat::TokioAsyncReadCompatExt;

use crate::endpoint::{self, Endpoint, Listener, Stream};
use crate::workload::{BoxError, EchoClient};

/// The code generated from `schema/bench.capnp`.
#[allow(missing_docs, clippy::all, clippy::pedantic, unused_qualifications)]
pub mod bench_capnp {
    include!(concat!(env!("OUT_DIR"), "/bench_capnp.rs"));
}

use bench_capnp::echo;

/// The echo object.
struct Service;

impl echo::Server for Service {
    async fn echo(
        self: Rc<Self>,
        params: echo::EchoParams,
        mut results: echo::EchoResults,
    ) -> Result<(), capnp::Error> {
        let data = params.get()?.get_data()?;
        results.get().set_data(data);
        Ok(())
    }
}

/// The two-party network on `stream`, seen from `side`.
fn network(stream: Stream, side: Side) -> twoparty::VatNetwork<impl futures::AsyncRead + Unpin> {
    let (reader, writer) = stream.compat().split();
    twoparty::VatNetwork::new(
        BufReader::new(reader),
        BufWriter::new(writer),
        side,
        capnp::message::ReaderOptions::default(),
    )
}

/// Serves the echo interface on `listener` until the process ends. Must run inside a
/// `LocalSet`.
pub async fn serve(listener: Listener) -> Result<(), BoxError> {
    let bootstrap: echo::Client = capnp_rpc::new_client(Service);
    loop {
        let stream = listener.accept().await?;
        let system = RpcSystem::new(
            Box::new(network(stream, Side::Server)),
            Some(bootstrap.clone().client),
        );
        tokio::task::spawn_local(system);
    }
}

/// A capnp-rpc client (a capability on one connection). Must be used inside a `LocalSet`.
#[derive(Clone)]
pub struct Client(echo::Client);

impl Client {
    /// Connects to a server started by [`serve`] and takes its bootstrap capability.
    pub async fn connect(endpoint: &Endpoint) -> Result<Client, BoxError> {
        let stream = endpoint::connect(endpoint).await?;
        let mut system = RpcSystem::new(Box::new(network(stream, Side::Client)), None);
        let echo: echo::Client = system.bootstrap(Side::Server);
        tokio::task::spawn_local(system);
        Ok(Client(echo))
    }
}

impl EchoClient for Client {
    async fn echo(&mut self, payload: Bytes) -> Result<usize, BoxError> {
        let mut request = self.0.echo_request();
        request.get().set_data(&payload);
        let response = request.send().promise.await?;
        Ok(response.get()?.get_data()?.len())
    }
}
