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

#[lanner::interface(name = "tests.versioning.Named")]
trait Named {
    async fn name(&self) -> Result<String, Error>;
}

#[lanner::interface(name = "tests.versioning.Left")]
trait Left: Named {
    async fn left(&self) -> Result<u8, Error>;
}

#[lanner::interface(name = "tests.versioning.Right")]
trait Right: Named {
    async fn right(&self) -> Result<u8, Error>;
}

/// A diamond: `Named` is reached through both `Left` and `Right`, and named again
/// directly.
#[lanner::interface(name = "tests.versioning.Both")]
trait Both: Left + Right + Named {
    async fn both(&self) -> Result<u8, Error>;
}

struct Corner;

impl Named for Corner {
    async fn name(&self) -> Result<String, Error> {
        Ok("corner".into())
    }
}

impl Left for Corner {
    async fn left(&self) -> Result<u8, Error> {
        Ok(1)
    }
}

impl Right for Corner {
    async fn right(&self) -> Result<u8, Error> {
        Ok(2)
    }
}

impl Both for Corner {
    async fn both(&self) -> Result<u8, Error> {
        Ok(3)
    }
}

#[tokio::test]
async fn an_interface_reached_along_two_paths_is_implemented_once() {
    let object = Object::new(BothStub::new(Arc::new(Corner)));
    let server = Server::new();
    server.publish("corner", object);
    let listening = server.listen("mem://versioning-diamond").await.unwrap();
    let url = listening.endpoint().object_url("corner");
    let client = Client::new();

    // One proxy calls the methods of every interface in the diamond as its own.
    let both: BothProxy = client.connect(&url).await.unwrap();
    assert_eq!(both.name().await, Ok("corner".to_string()));
    assert_eq!(both.left().await, Ok(1));
    assert_eq!(both.right().await, Ok(2));
    assert_eq!(both.both().await, Ok(3));

    // The object lists each interface once, and each side of the diamond works alone.
    let interfaces = both.object().interfaces().to_vec();
    for id in [
        NamedProxy::INTERFACE_ID,
        LeftProxy::INTERFACE_ID,
        RightProxy::INTERFACE_ID,
        BothProxy::INTERFACE_ID,
    ] {
        assert_eq!(interfaces.iter().filter(|&&i| i == id).count(), 1, "{id}");
    }
    let right: RightProxy = both.query().unwrap();
    assert_eq!(right.name().await, Ok("corner".to_string()));
    assert_eq!(right.right().await, Ok(2));
}

/// Methods named like `Arc`'s own (the stub holds the implementation in one).
#[lanner::interface(name = "tests.versioning.Copier")]
trait Copier {
    async fn clone(&self) -> Result<u64, Error>;
    async fn as_ref(&self) -> Result<u64, Error>;
}

/// A version 2 that declares a method of the same name as its base's, with another
/// signature: a new method (its own ordinal and fingerprint), not a replacement.
#[lanner::interface(name = "tests.versioning.SumV2")]
trait SumV2: Calc {
    async fn add(&self, a: i64, b: i64, c: i64) -> Result<i64, Error>;
}

struct Namesake;

impl Copier for Namesake {
    async fn clone(&self) -> Result<u64, Error> {
        Ok(1)
    }

    async fn as_ref(&self) -> Result<u64, Error> {
        Ok(2)
    }
}

impl Calc for Namesake {
    async fn add(&self, a: i64, b: i64) -> Result<i64, Error> {
        Ok(a + b)
    }
}

impl SumV2 for Namesake {
    async fn add(&self, a: i64, b: i64, c: i64) -> Result<i64, Error> {
        Ok(a + b + c)
    }
}

#[tokio::test]
async fn the_stub_calls_the_interfaces_method_whatever_its_name() {
    let both = Arc::new(Namesake);
    let object = Object::new(CopierStub::new(both.clone())).with(SumV2Stub::new(both));
    let server = Server::new();
    server.publish("both", object);
    let listening = server.listen("mem://versioning-names").await.unwrap();
    let url = listening.endpoint().object_url("both");
    let client = Client::new();
    let copier: CopierProxy = client.connect(&url).await.unwrap();
    assert_eq!(Copier::clone(&copier).await, Ok(1));
    assert_eq!(Copier::as_ref(&copier).await, Ok(2));
    let sum: SumV2Proxy = client.connect(&url).await.unwrap();
    assert_eq!(SumV2::add(&sum, 1, 2, 3).await, Ok(6));
    assert_eq!(Calc::add(&sum, 1, 2).await, Ok(3));
    let v1: CalcProxy = client.connect(&url).await.unwrap();
    assert_eq!(v1.add(4, 5).await, Ok(9));
}
