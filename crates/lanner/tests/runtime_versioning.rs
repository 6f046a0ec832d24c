//! Interface versioning by extension: `trait V2: V1` adds methods; an object serving V2
//! serves V1 too, so V1 clients keep working, and a V2 proxy calls V1 methods as its own.

use std::sync::Arc;

use lanner::{Client, Error, ErrorKind, Object, Proxy, Server};

#[lanner::interface(name = "tests.versioning.Calc")]
trait Calc {
    async fn add(&self, a: i64, b: i64) -> Result<i64, Error>;
}

#[lanner::interface(name = "tests.versioning.CalcV2")]
trait CalcV2: Calc {
    async fn multiply(&self, a: i64, b: i64) -> Result<i64, Error>;
}

#[lanner::interface(name = "tests.versioning.CalcV3")]
trait CalcV3: CalcV2 + Send + Sync + 'static {
    async fn negate(&self, a: i64) -> Result<i64, Error>;
}

struct Desk;

impl Calc for Desk {
    async fn add(&self, a: i64, b: i64) -> Result<i64, Error> {
        Ok(a + b)
    }
}

impl CalcV2 for Desk {
    async fn multiply(&self, a: i64, b: i64) -> Result<i64, Error> {
        Ok(a * b)
    }
}

impl CalcV3 for Desk {
    async fn negate(&self, a: i64) -> Result<i64, Error> {
        Ok(-a)
    }
}

#[tokio::test]
async fn old_clients_keep_working_against_an_extended_object() {
    let object = Object::new(CalcV3Stub::new(Arc::new(Desk)));
    // The object serves every version it extends.
    for id in [
        CalcProxy::INTERFACE_ID,
        CalcV2Proxy::INTERFACE_ID,
        CalcV3Proxy::INTERFACE_ID,
    ] {
        assert!(object.implements(id), "{id}");
    }
    let server = Server::new();
    server.publish("calc", object);
    let listening = server.listen("mem://versioning").await.unwrap();
    let url = listening.endpoint().object_url("calc");
    let client = Client::new();

    // A client built against version 1.
    let v1: CalcProxy = client.connect(&url).await.unwrap();
    assert_eq!(v1.add(2, 3).await, Ok(5));

    // A client of version 3 calls every version's methods through one proxy.
    let v3: CalcV3Proxy = client.connect(&url).await.unwrap();
    assert_eq!(v3.negate(4).await, Ok(-4));
    assert_eq!(v3.multiply(6, 7).await, Ok(42));
    assert_eq!(v3.add(1, 1).await, Ok(2));
}

#[tokio::test]
async fn a_new_client_against_an_old_object_fails_clearly() {
    struct Old;
    impl Calc for Old {
        async fn add(&self, a: i64, b: i64) -> Result<i64, Error> {
            Ok(a + b)
        }
    }
    let server = Server::new();
    server.publish("calc", Object::new(CalcStub::new(Arc::new(Old))));
    let listening = server.listen("mem://versioning-old").await.unwrap();
    let reference = Client::new()
        .resolve(&listening.endpoint().object_url("calc"))
        .await
        .unwrap();
    assert!(reference.supports::<CalcProxy>());
    let error = reference.query::<CalcV2Proxy>().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unimplemented, "{error}");
}
