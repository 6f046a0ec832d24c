//! Serving objects: publish them under names, listen on endpoints.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio::task::JoinHandle;

use crate::connection;
use crate::error::Error;
use crate::object::Object;
use crate::options::ConnectionOptions;
use crate::transport::Listener;
use crate::url::Endpoint;

/// Published names → objects, shared by all of a server's connections.
#[derive(Default)]
pub(crate) struct NameRegistry {
    names: RwLock<HashMap<String, Object>>,
}

impl NameRegistry {
    pub(crate) fn get(&self, name: &str) -> Option<Object> {
        self.names
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    fn insert(&self, name: String, object: Object) -> Option<Object> {
        self.names
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, object)
    }

    fn remove(&self, name: &str) -> Option<Object> {
        self.names
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name)
    }
}

/// A Lanner server: a set of published objects, reachable on any number of endpoints.
///
/// ```ignore
/// let server = Server::new();
/// server.publish("calc", Object::new(CalculatorStub::new(Arc::new(MyCalc))));
/// let listening = server.listen("tcp://127.0.0.1:0").await?;
/// println!("serving at {}", listening.endpoint().object_url("calc"));
/// ```
#[derive(Clone)]
pub struct Server {
    names: Arc<NameRegistry>,
    options: ConnectionOptions,
}

impl Default for Server {
    fn default() -> Self {
        Server::new()
    }
}

impl Server {
    /// A server with default [`ConnectionOptions`].
    pub fn new() -> Server {
        Server::with_options(ConnectionOptions::default())
    }

    /// A server whose connections use `options`.
    pub fn with_options(options: ConnectionOptions) -> Server {
        Server {
            names: Arc::new(NameRegistry::default()),
            options,
        }
    }

    /// Publishes `object` as `name`; clients reach it at `<endpoint>/<name>`. Returns the
    /// object previously published under that name, if any.
    pub fn publish(&self, name: impl Into<String>, object: Object) -> Option<Object> {
        self.names.insert(name.into(), object)
    }

    /// Withdraws a name. Clients already holding a reference keep it.
    pub fn unpublish(&self, name: &str) -> Option<Object> {
        self.names.remove(name)
    }

    /// Starts accepting connections on `endpoint` (`tcp://host:port`, `unix:///path`,
    /// `shm://name`, `mem://name`). Runs until the returned [`Listening`] is dropped or
    /// closed.
    pub async fn listen(&self, endpoint: &str) -> Result<Listening, Error> {
        let endpoint = Endpoint::parse(endpoint)?;
        let mut listener = Listener::bind(&endpoint)
            .await
            .map_err(|e| Error::io(&format!("listening on {endpoint}"), &e))?;
        let endpoint = listener
            .local_endpoint()
            .map_err(|e| Error::io("reading the bound address", &e))?;
        let names = self.names.clone();
        let options = self.options.clone();
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok(transport) => {
                        let names = names.clone();
                        let options = options.clone();
                        tokio::spawn(async move {
                            let peer = transport.peer.clone();
                            if let Err(error) = connection::accept(transport, &options, names).await
                            {
                                tracing::info!(%peer, %error, "connection refused");
                            }
                        });
                    }
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                }
            }
        });
        Ok(Listening { endpoint, task })
    }
}

/// A running listener. Dropping it (or [`Listening::close`]) stops accepting new
/// connections; connections already open keep working.
#[derive(Debug)]
pub struct Listening {
    endpoint: Endpoint,
    task: JoinHandle<()>,
}

impl Listening {
    /// The endpoint actually bound (a TCP port of 0 is replaced by the real port).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Stops accepting connections and releases the endpoint: once this returns, the
    /// endpoint can be listened on again. (Dropping a `Listening` stops it too, but the
    /// endpoint is released only when the runtime gets to cancel the accepting task.)
    pub async fn close(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.task.abort();
    }
}
