//! tarpc: the echo service with tarpc's serde transport (bincode in length-delimited
//! frames) over any byte stream, so over TCP and Unix sockets alike.
//!
//! Settings: `TCP_NODELAY`, frames up to 64 MiB (the codec's default limit is 8 MiB),
//! tarpc's default client and server configuration, each request served in its own task on
//! a multi-thread runtime (tarpc's documented pattern).

use bytes::Bytes;
use futures::StreamExt;
use tarpc::context::Context;
use tarpc::serde_transport;
use tarpc::server::{BaseChannel, Channel};
use tarpc::tokio_serde::formats::Bincode;
use tarpc::tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::endpoint::{self, Endpoint, Listener, Stream};
use crate::workload::{BoxError, EchoClient};

/// The echo service.
#[tarpc::service]
pub trait EchoService {
    /// Returns the payload it was given.
    async fn echo(data: Bytes) -> Bytes;
}

/// Largest frame either side accepts.
const MAX_FRAME: usize = 64 << 20;

/// The echo object.
#[derive(Clone)]
struct Service;

impl EchoService for Service {
    async fn echo(self, _: Context, data: Bytes) -> Bytes {
        data
    }
}

/// `stream` cut into length-delimited frames, for tarpc's serde transport.
fn framed(stream: Stream) -> Framed<Stream, LengthDelimitedCodec> {
    let codec = LengthDelimitedCodec::builder()
        .max_frame_length(MAX_FRAME)
        .new_codec();
    Framed::new(stream, codec)
}

/// Serves the echo service on `listener` until the process ends.
pub async fn serve(listener: Listener) -> Result<(), BoxError> {
    loop {
        let stream = listener.accept().await?;
        let channel =
            BaseChannel::with_defaults(serde_transport::new(framed(stream), Bincode::default()));
        tokio::spawn(
            channel
                .execute(Service.serve())
                .for_each(|response| async move {
                    tokio::spawn(response);
                }),
        );
    }
}

/// A tarpc client on one connection.
#[derive(Clone)]
pub struct Client(EchoServiceClient);

impl Client {
    /// Connects to a server started by [`serve`].
    pub async fn connect(endpoint: &Endpoint) -> Result<Client, BoxError> {
        let stream = endpoint::connect(endpoint).await?;
        Ok(Client(
            EchoServiceClient::new(
                tarpc::client::Config::default(),
                serde_transport::new(framed(stream), Bincode::default()),
            )
            .spawn(),
        ))
    }
}

impl EchoClient for Client {
    async fn echo(&mut self, payload: Bytes) -> Result<usize, BoxError> {
        Ok(self.0.echo(tarpc::context::current(), payload).await?.len())
    }
}
