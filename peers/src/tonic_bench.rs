//! gRPC with tonic: the echo service over HTTP/2, on TCP or on a Unix socket (served with
//! `serve_with_incoming`, reached with a custom connector).
//!
//! Settings a careful user would pick for this workload: `TCP_NODELAY` on both sides,
//! HTTP/2 windows of 4 MiB per stream and 8 MiB per connection (so a 1 MiB message is not
//! throttled by the 64 KiB defaults), message size limits raised to 64 MiB (the default
//! limit of 4 MiB on decoding is enough for 1 MiB, but a user sending large payloads
//! raises it), everything else tonic's default.

use bytes::Bytes;
use hyper_util::rt::TokioIo;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint as GrpcEndpoint, Server, Uri};
use tonic::{Request, Response, Status};

use crate::endpoint::{Endpoint, Listener, connect_unix};
use crate::workload::{BoxError, EchoClient};

/// The code generated from `proto/bench.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("lanner.peers");
}

use proto::Payload;
use proto::echo_client::EchoClient as GrpcEchoClient;
use proto::echo_server::{Echo, EchoServer};

/// Largest message either side accepts.
const MAX_MESSAGE: usize = 64 << 20;
/// HTTP/2 flow-control window per stream.
const STREAM_WINDOW: u32 = 4 << 20;
/// HTTP/2 flow-control window per connection.
const CONNECTION_WINDOW: u32 = 8 << 20;

/// The echo object.
struct Service;

#[tonic::async_trait]
impl Echo for Service {
    async fn echo(&self, request: Request<Payload>) -> Result<Response<Payload>, Status> {
        Ok(Response::new(request.into_inner()))
    }
}

/// Serves the echo service on `listener` until the process ends (on a multi-thread
/// runtime).
pub async fn serve(listener: Listener) -> Result<(), BoxError> {
    let service = EchoServer::new(Service)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let mut server = Server::builder()
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW);
    let router = server.add_service(service);
    match listener {
        Listener::Tcp(listener) => {
            let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
            router.serve_with_incoming(incoming).await?;
        }
        Listener::Unix(listener, socket_file) => {
            router
                .serve_with_incoming(UnixListenerStream::new(listener))
                .await?;
            drop(socket_file);
        }
    }
    Ok(())
}

/// A gRPC client on one HTTP/2 connection.
#[derive(Clone)]
pub struct Client(GrpcEchoClient<Channel>);

impl Client {
    /// Connects to a server started by [`serve`].
    pub async fn connect(endpoint: &Endpoint) -> Result<Client, BoxError> {
        let channel = match endpoint {
            Endpoint::Tcp(addr) => {
                grpc_endpoint(GrpcEndpoint::from_shared(format!("http://{addr}"))?)
                    .connect()
                    .await?
            }
            Endpoint::Unix(path) => {
                let path = path.clone();
                // The URI is required but unused: the connector ignores it.
                grpc_endpoint(GrpcEndpoint::from_static("http://localhost"))
                    .connect_with_connector(tower::service_fn(move |_: Uri| {
                        let path = path.clone();
                        async move { Ok::<_, std::io::Error>(TokioIo::new(connect_unix(&path).await?)) }
                    }))
                    .await?
            }
        };
        Ok(Client(
            GrpcEchoClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        ))
    }
}

/// The client's connection settings.
fn grpc_endpoint(endpoint: GrpcEndpoint) -> GrpcEndpoint {
    endpoint
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
}

impl EchoClient for Client {
    async fn echo(&mut self, payload: Bytes) -> Result<usize, BoxError> {
        let reply = self.0.echo(Payload { data: payload }).await?;
        Ok(reply.into_inner().data.len())
    }
}
