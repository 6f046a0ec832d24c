//! Objects, references and interface identity: one object with several interfaces reached
//! through one resolve, local interface queries, interface ids and their overrides, and
//! publishing and withdrawing names.

mod common;

use std::sync::Arc;

use common::*;
use lanner::{Client, ErrorKind, InterfaceId, Object, Proxy, Server};

#[tokio::test]
async fn one_resolve_reaches_every_interface_of_an_object() {
    let service = Arc::new(Service::default());
    let object =
        Object::new(CalculatorStub::new(service.clone())).with(BlobsStub::new(service.clone()));
    assert_eq!(
        object.interfaces(),
        [CalculatorProxy::INTERFACE_ID, BlobsProxy::INTERFACE_ID]
    );
    let (_server, _listening) = serve("objects-two-interfaces", Server::new(), object).await;

    let reference = Client::new()
        .resolve(&url("objects-two-interfaces"))
        .await
        .unwrap();
    assert_eq!(
        reference.interfaces(),
        [CalculatorProxy::INTERFACE_ID, BlobsProxy::INTERFACE_ID]
    );
    assert!(reference.supports::<CalculatorProxy>());
    assert!(reference.supports::<BlobsProxy>());
    assert!(!reference.supports::<ControlProxy>());
    assert_eq!(reference.peer(), "mem://objects-two-interfaces");

    let calc: CalculatorProxy = reference.query().unwrap();
    let blobs: BlobsProxy = reference.query().unwrap();
    assert_eq!(calc.add(40, 2).await, Ok(42));
    assert_eq!(blobs.make(3, 0).await.unwrap(), pattern(3, 0));

    // From one proxy to another interface of the same object, and back.
    let blobs_again: BlobsProxy = calc.query().unwrap();
    let calc_again: CalculatorProxy = blobs_again.query().unwrap();
    assert_eq!(
        blobs_again.echo(pattern(5, 1)).await.unwrap(),
        pattern(5, 1)
    );
    assert_eq!(calc_again.divide(9, 3).await, Ok(3));
    assert_eq!(
        calc_again.object().interfaces(),
        [CalculatorProxy::INTERFACE_ID, BlobsProxy::INTERFACE_ID]
    );
}

#[tokio::test]
async fn query_of_an_unsupported_interface_fails_locally() {
    let service = Arc::new(Service::default());
    let object = Object::new(CalculatorStub::new(service.clone()));
    let (_server, _listening) = serve("objects-unsupported", Server::new(), object).await;

    let reference = Client::new()
        .resolve(&url("objects-unsupported"))
        .await
        .unwrap();
    // `query` is not async: it cannot make a round trip.
    let error = reference.query::<ControlProxy>().unwrap_err();
    assert_error_contains(
        &error,
        ErrorKind::Unimplemented,
        ControlProxy::INTERFACE_NAME,
    );
    assert!(ControlProxy::INTERFACE_NAME.ends_with("::Control"));
    assert!(
        error
            .message()
            .contains(&ControlProxy::INTERFACE_ID.to_string()),
        "{error}"
    );
    assert!(
        error.message().contains("mem://objects-unsupported"),
        "{error}"
    );

    let calc: CalculatorProxy = reference.query().unwrap();
    let error = calc.query::<BlobsProxy>().unwrap_err();
    assert_error_contains(&error, ErrorKind::Unimplemented, BlobsProxy::INTERFACE_NAME);

    // `connect` to an object without the interface fails the same way.
    let error = Client::new()
        .connect::<BlobsProxy>(&url("objects-unsupported"))
        .await
        .unwrap_err();
    assert_error_contains(&error, ErrorKind::Unimplemented, BlobsProxy::INTERFACE_NAME);

    // The reference still works.
    assert_eq!(calc.add(1, 2).await, Ok(3));
}

/// Two declarations of "the same" interface in different modules: with a `name` they agree,
/// without one their module paths keep them apart.
mod v1 {
    #[lanner::interface(name = "test.Greeter")]
    pub trait Greeter {
        async fn greet(&self, name: String) -> Result<String, lanner::Error>;
    }

    #[lanner::interface]
    pub trait Plain {
        async fn greet(&self, name: String) -> Result<String, lanner::Error>;
    }

    #[lanner::interface(id = "6f9619ff-8b86-d011-b42d-00c04fc964ff")]
    pub trait Fixed {
        async fn greet(&self, name: String) -> Result<String, lanner::Error>;
        async fn count(&self) -> Result<u32, lanner::Error>;
    }

    pub(crate) struct English;

    impl Greeter for English {
        async fn greet(&self, name: String) -> Result<String, lanner::Error> {
            Ok(format!("Hello, {name}!"))
        }
    }

    impl Plain for English {
        async fn greet(&self, name: String) -> Result<String, lanner::Error> {
            Ok(format!("Hi, {name}."))
        }
    }

    impl Fixed for English {
        async fn greet(&self, name: String) -> Result<String, lanner::Error> {
            Ok(format!("Good day, {name}."))
        }

        async fn count(&self) -> Result<u32, lanner::Error> {
            Ok(7)
        }
    }
}

mod v2 {
    #[lanner::interface(name = "test.Greeter")]
    pub trait Greeter {
        async fn greet(&self, name: String) -> Result<String, lanner::Error>;
    }

    #[lanner::interface]
    pub trait Plain {
        async fn greet(&self, name: String) -> Result<String, lanner::Error>;
    }

    /// Same fixed id as `v1::Fixed`, but the interface grew a method in front and changed
    /// `greet`'s signature: ids no longer protect the call, fingerprints do.
    #[lanner::interface(id = "6F9619FF8B86D011B42D00C04FC964FF")]
    pub trait Fixed {
        async fn reset(&self) -> Result<(), lanner::Error>;
        async fn greet(&self, name: String, polite: bool) -> Result<String, lanner::Error>;
        async fn count(&self) -> Result<u32, lanner::Error>;
    }
}

#[test]
fn interface_ids_are_stable_and_distinct() {
    let ids = [
        CalculatorProxy::INTERFACE_ID,
        BlobsProxy::INTERFACE_ID,
        ControlProxy::INTERFACE_ID,
        v1::GreeterProxy::INTERFACE_ID,
        v1::PlainProxy::INTERFACE_ID,
        v2::PlainProxy::INTERFACE_ID,
        v1::FixedProxy::INTERFACE_ID,
    ];
    for (i, a) in ids.iter().enumerate() {
        for (j, b) in ids.iter().enumerate() {
            assert_eq!(i == j, a == b, "ids {i} and {j}: {a} vs {b}");
        }
    }

    // Derived from the trait's path and the methods' signatures, as documented.
    let signature: Vec<&str> = CalculatorProxy::METHODS
        .iter()
        .map(|m| m.signature)
        .collect();
    assert_eq!(
        signature,
        [
            "add(i64,i64)->Result<i64,CalcError>",
            "divide(i64,i64)->Result<i64,CalcError>",
            "stats(Vec<i64>,Option<String>)->Result<Stats,CalcError>",
            "ping()->Result<(),lanner::Error>",
            "fail(Failure)->Result<i64,CalcError>",
        ]
    );
    assert_eq!(
        CalculatorProxy::INTERFACE_NAME,
        "runtime_objects::common::Calculator"
    );
    assert_eq!(
        CalculatorProxy::INTERFACE_ID,
        InterfaceId::derive(CalculatorProxy::INTERFACE_NAME, &signature.join(";"))
    );

    // A `name` replaces the module path: the id no longer depends on where the trait is.
    assert_eq!(
        v1::GreeterProxy::INTERFACE_ID,
        v2::GreeterProxy::INTERFACE_ID
    );
    assert_eq!(
        v1::GreeterProxy::INTERFACE_ID,
        InterfaceId::derive(
            "test.Greeter",
            "greet(String)->Result<String,lanner::Error>"
        )
    );
    // Ids travel between builds and versions: their values must never change.
    assert_eq!(v1::GreeterProxy::INTERFACE_ID.to_string(), GREETER_ID);
    assert_eq!(
        v1::GreeterProxy::INTERFACE_NAME,
        "runtime_objects::v1::Greeter"
    );
    assert_ne!(v1::PlainProxy::INTERFACE_ID, v2::PlainProxy::INTERFACE_ID);

    // An `id` is taken as is, dashes or not, in either case.
    let fixed = InterfaceId::from_u128(0x6f96_19ff_8b86_d011_b42d_00c0_4fc9_64ff);
    assert_eq!(v1::FixedProxy::INTERFACE_ID, fixed);
    assert_eq!(v2::FixedProxy::INTERFACE_ID, fixed);
    assert_eq!(fixed.to_string(), "6f9619ff-8b86-d011-b42d-00c04fc964ff");
    assert_eq!(fixed.as_u128(), 0x6f96_19ff_8b86_d011_b42d_00c0_4fc9_64ff);

    // Method tables: ordinals are positions, fingerprints differ by signature.
    for (ordinal, method) in v2::FixedProxy::METHODS.iter().enumerate() {
        assert_eq!(usize::from(method.ordinal), ordinal);
    }
    assert_eq!(
        v1::FixedProxy::METHODS[1].fingerprint,
        v2::FixedProxy::METHODS[2].fingerprint
    );
    assert_ne!(
        v1::FixedProxy::METHODS[0].fingerprint,
        v2::FixedProxy::METHODS[1].fingerprint
    );
}

const GREETER_ID: &str = "a5dadf20-cf44-234a-aa7b-3462dfc3891f";

#[tokio::test]
async fn named_interfaces_interoperate_across_modules() {
    let object = Object::new(v1::GreeterStub::new(Arc::new(v1::English)))
        .with(v1::PlainStub::new(Arc::new(v1::English)));
    let (_server, _listening) = serve("objects-named", Server::new(), object).await;

    let reference = Client::new().resolve(&url("objects-named")).await.unwrap();
    // Same `name`, same signature: a v2 proxy calls a v1 object.
    let greeter: v2::GreeterProxy = reference.query().unwrap();
    assert_eq!(
        v2::Greeter::greet(&greeter, "Ada".into()).await,
        Ok("Hello, Ada!".to_owned())
    );
    // No `name`: the module path is part of the id, so v2 is a different interface.
    let error = reference.query::<v2::PlainProxy>().unwrap_err();
    assert_error_contains(
        &error,
        ErrorKind::Unimplemented,
        "runtime_objects::v2::Plain",
    );
    let plain: v1::PlainProxy = reference.query().unwrap();
    assert_eq!(
        v1::Plain::greet(&plain, "Bob".into()).await,
        Ok("Hi, Bob.".to_owned())
    );
}

#[tokio::test]
async fn fixed_ids_route_by_fingerprint_and_reject_changed_signatures() {
    let object = Object::new(v1::FixedStub::new(Arc::new(v1::English)));
    let (_server, _listening) = serve("objects-fixed-id", Server::new(), object).await;

    let fixed: v2::FixedProxy = connect("objects-fixed-id").await;
    // `count` moved from ordinal 1 to 2 but kept its signature: found by fingerprint.
    assert_eq!(v2::Fixed::count(&fixed).await, Ok(7));

    // `greet` changed its signature: refused, naming the caller's ordinal and fingerprint
    // and what the server has at that ordinal.
    let error = v2::Fixed::greet(&fixed, "Cy".into(), true)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unimplemented);
    assert_eq!(
        error.message(),
        format!(
            "incompatible method: the caller's method 1 of runtime_objects::v1::Fixed has a \
             different signature (fingerprint {:08x}); this server has \
             `count()->Result<u32,lanner::Error>`",
            v2::FixedProxy::METHODS[1].fingerprint
        )
    );

    // `reset` does not exist on the server at all (ordinal 0 there is the old `greet`).
    let error = v2::Fixed::reset(&fixed).await.unwrap_err();
    assert_error(&error, ErrorKind::Unimplemented, "incompatible method");
    assert!(
        error
            .message()
            .ends_with("this server has `greet(String)->Result<String,lanner::Error>`"),
        "{error}"
    );

    // The connection is unaffected.
    assert_eq!(v2::Fixed::count(&fixed).await, Ok(7));
}

#[test]
fn adding_an_interface_twice_replaces_its_stub() {
    let service = Arc::new(Service::default());
    let object = Object::new(CalculatorStub::new(service.clone()))
        .with(BlobsStub::new(service.clone()))
        .with(CalculatorStub::new(service.clone()));
    assert_eq!(
        object.interfaces(),
        [CalculatorProxy::INTERFACE_ID, BlobsProxy::INTERFACE_ID]
    );
    assert!(object.implements(BlobsProxy::INTERFACE_ID));
    assert!(!object.implements(ControlProxy::INTERFACE_ID));
}

#[tokio::test]
async fn resolving_an_unknown_name_is_not_found() {
    let (_server, _listening, _service) =
        serve_service("objects-unknown-name", Server::new()).await;

    let error = Client::new()
        .resolve("mem://objects-unknown-name/nobody")
        .await
        .unwrap_err();
    assert_error_contains(&error, ErrorKind::NotFound, "\"nobody\"");
    assert!(
        error
            .message()
            .contains("mem://objects-unknown-name/nobody"),
        "{error}"
    );

    let error = lanner::connect::<CalculatorProxy>("mem://objects-unknown-name/Obj")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound);

    // The connection the failed resolves used is still good.
    let calc: CalculatorProxy = lanner::connect(&url("objects-unknown-name")).await.unwrap();
    assert_eq!(calc.add(2, 2).await, Ok(4));
}

#[tokio::test]
async fn publishing_replacing_and_withdrawing_names() {
    let first = Arc::new(Service::default());
    let second = Arc::new(Service::default());
    let server = Server::new();
    assert!(server.publish("a", service_object(&first)).is_none());
    let _listening = server.listen("mem://objects-publish").await.unwrap();
    let client = Client::new();

    let control_a: ControlProxy = client.connect("mem://objects-publish/a").await.unwrap();
    assert_eq!(control_a.echo(1).await, Ok(1));
    assert_eq!(first.completed(), 1);

    // Names published after the listener started are visible on the open connection.
    assert!(server.publish("b", service_object(&second)).is_none());
    let control_b: ControlProxy = client.connect("mem://objects-publish/b").await.unwrap();
    assert_eq!(control_b.echo(2).await, Ok(2));
    assert_eq!(second.completed(), 1);

    // Replacing a name returns the previous object; new resolves reach the new one.
    let previous = server.publish("a", service_object(&second)).unwrap();
    assert_eq!(previous.interfaces().len(), 3);
    let control_a2: ControlProxy = client.connect("mem://objects-publish/a").await.unwrap();
    assert_eq!(control_a2.echo(3).await, Ok(3));
    assert_eq!(second.completed(), 2);
    // ... while the old reference keeps calling the old object.
    assert_eq!(control_a.echo(4).await, Ok(4));
    assert_eq!(first.completed(), 2);

    // Withdrawing a name: new resolves fail, references already held keep working.
    assert!(server.unpublish("b").is_some());
    assert!(server.unpublish("b").is_none());
    let error = client.resolve("mem://objects-publish/b").await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound);
    assert_eq!(control_b.echo(5).await, Ok(5));
    assert_eq!(second.completed(), 3);
}

/// An interface without methods: a capability an object can be asked about.
#[lanner::interface]
pub trait Marker {}

struct Marked;

impl Marker for Marked {}

#[tokio::test]
async fn an_interface_without_methods_can_mark_an_object() {
    let service = Arc::new(Service::default());
    let object = service_object(&service).with(MarkerStub::new(Arc::new(Marked)));
    let (_server, _listening) = serve("objects-marker", Server::new(), object).await;

    let reference = Client::new().resolve(&url("objects-marker")).await.unwrap();
    assert!(reference.supports::<MarkerProxy>());
    assert_eq!(reference.interfaces().len(), 4);
    assert_eq!(reference.interfaces()[3], MarkerProxy::INTERFACE_ID);
    let marker: MarkerProxy = reference.query().unwrap();
    assert!(MarkerProxy::METHODS.is_empty());
    let calc: CalculatorProxy = marker.query().unwrap();
    assert_eq!(calc.add(1, 2).await, Ok(3));
    assert_eq!(
        calc.query::<MarkerProxy>().unwrap().object().interfaces()[3],
        MarkerProxy::INTERFACE_ID
    );
}

#[tokio::test]
async fn every_call_is_one_request_and_one_response_even_the_first_on_an_interface() {
    let service = Arc::new(Service::default());
    let object =
        Object::new(CalculatorStub::new(service.clone())).with(BlobsStub::new(service.clone()));
    let (_server, _listening) = serve("objects-traffic", Server::new(), object).await;
    let reference = Client::new()
        .resolve(&url("objects-traffic"))
        .await
        .unwrap();
    // Resolving was one call.
    let resolved = reference.traffic();
    assert_eq!((resolved.messages_sent, resolved.messages_received), (1, 1));

    let calc: CalculatorProxy = reference.query().unwrap();
    assert_eq!(calc.add(1, 2).await, Ok(3));
    let blobs: BlobsProxy = calc.query().unwrap();
    let before = reference.traffic();
    assert_eq!(
        blobs.echo(lanner::Bytes::from_static(b"x")).await.unwrap(),
        "x"
    );
    let after = reference.traffic();
    assert_eq!(after.messages_sent - before.messages_sent, 1);
    assert_eq!(after.messages_received - before.messages_received, 1);
}

/// Declares an interface whose method name comes from a `macro_rules!` parameter.
macro_rules! interface_with_method {
    ($name:ident) => {
        #[lanner::interface(name = "tests.objects.Generated")]
        trait Generated {
            async fn $name(&self, x: u32) -> Result<u32, lanner::Error>;
        }
    };
}

interface_with_method!(double);

struct Doubler;

impl Generated for Doubler {
    async fn double(&self, x: u32) -> Result<u32, lanner::Error> {
        Ok(2 * x)
    }
}

#[tokio::test]
async fn interfaces_may_be_declared_by_other_macros() {
    let (_server, _listening) = serve(
        "objects-generated",
        Server::new(),
        Object::new(GeneratedStub::new(Arc::new(Doubler))),
    )
    .await;
    let generated: GeneratedProxy = Client::new()
        .connect(&url("objects-generated"))
        .await
        .unwrap();
    assert_eq!(generated.double(21).await, Ok(42));
}
