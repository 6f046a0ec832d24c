//! Trait shapes a user may reasonably write: each compiles, and a call through the proxy
//! over `mem://` reaches the right method with the right arguments. (Argument and method
//! names like the generated code's own, methods named like `Proxy` and `Stub` methods,
//! a user type called `T`, more arguments than serde's largest tuple, interfaces declared by a
//! `macro_rules!` or without the prelude, deprecated interfaces and methods, extension by
//! several interfaces with clashing method names, a diamond.)
#![allow(dead_code, clippy::too_many_arguments)]
// A method deprecated in an interface is no use of it by the generated stub or proxy.
#![deny(deprecated)]

use std::sync::Arc;

use lanner::{Client, Error, Object, Proxy, Server};

// --- hygiene: argument names like the generated locals and fields -------------------------
#[lanner::interface]
trait Names {
    async fn locals(
        &self,
        call: u32,
        connection: u32,
        request: u32,
        proxy: u32,
        self_: u32,
        args: u32,
        result: u32,
        __x: u32,
        method: u32,
        segments: u32,
    ) -> Result<Vec<u32>, Error>;
    async fn more(
        &self,
        core: u32,
        to: u32,
        error: u32,
        this: u32,
        methods: u32,
        ordinal: u32,
        interface: u32,
        answer: u32,
        segment: u32,
        target: u32,
    ) -> Result<Vec<u32>, Error>;
    async fn base(&self, base: u32, all: u32, inner: u32, reply: u32) -> Result<Vec<u32>, Error>;
    async fn bulk(
        &self,
        segment: bytes::Bytes,
        answer: bytes::Bytes,
        call: u32,
    ) -> Result<Vec<u32>, Error>;
    // methods named like Proxy/Stub methods and generated helpers
    async fn object(&self) -> Result<u32, Error>;
    async fn query(&self) -> Result<u32, Error>;
    async fn with_timeout(&self, t: u32) -> Result<u32, Error>;
    async fn new(&self) -> Result<u32, Error>;
    async fn dispatch(&self) -> Result<u32, Error>;
    async fn interface_id(&self) -> Result<u32, Error>;
    async fn methods(&self) -> Result<u32, Error>;
    async fn bases(&self) -> Result<u32, Error>;
    async fn __serve(&self) -> Result<u32, Error>;
    async fn __direct(&self) -> Result<u32, Error>;
    async fn __from_core(&self) -> Result<u32, Error>;
    async fn __core(&self) -> Result<u32, Error>;
    async fn clone(&self) -> Result<u32, Error>;
    async fn fmt(&self) -> Result<u32, Error>;
    async fn interface_name(&self) -> Result<u32, Error>;
    // patterns
    async fn patterns(&self, mut x: u32, ref y: u32) -> Result<u32, Error>;
    async fn unit(&self) -> Result<(), Error>;
}

struct N;
impl Names for N {
    async fn locals(
        &self,
        a: u32,
        b: u32,
        c: u32,
        d: u32,
        e: u32,
        f: u32,
        g: u32,
        h: u32,
        i: u32,
        j: u32,
    ) -> Result<Vec<u32>, Error> {
        Ok(vec![a, b, c, d, e, f, g, h, i, j])
    }
    async fn more(
        &self,
        a: u32,
        b: u32,
        c: u32,
        d: u32,
        e: u32,
        f: u32,
        g: u32,
        h: u32,
        i: u32,
        j: u32,
    ) -> Result<Vec<u32>, Error> {
        Ok(vec![a, b, c, d, e, f, g, h, i, j])
    }
    async fn base(&self, a: u32, b: u32, c: u32, d: u32) -> Result<Vec<u32>, Error> {
        Ok(vec![a, b, c, d])
    }
    async fn bulk(&self, a: bytes::Bytes, b: bytes::Bytes, c: u32) -> Result<Vec<u32>, Error> {
        Ok(vec![a.len() as u32, b.len() as u32, c])
    }
    async fn object(&self) -> Result<u32, Error> {
        Ok(1)
    }
    async fn query(&self) -> Result<u32, Error> {
        Ok(2)
    }
    async fn with_timeout(&self, t: u32) -> Result<u32, Error> {
        Ok(t)
    }
    async fn new(&self) -> Result<u32, Error> {
        Ok(4)
    }
    async fn dispatch(&self) -> Result<u32, Error> {
        Ok(5)
    }
    async fn interface_id(&self) -> Result<u32, Error> {
        Ok(6)
    }
    async fn methods(&self) -> Result<u32, Error> {
        Ok(7)
    }
    async fn bases(&self) -> Result<u32, Error> {
        Ok(8)
    }
    async fn __serve(&self) -> Result<u32, Error> {
        Ok(9)
    }
    async fn __direct(&self) -> Result<u32, Error> {
        Ok(10)
    }
    async fn __from_core(&self) -> Result<u32, Error> {
        Ok(11)
    }
    async fn __core(&self) -> Result<u32, Error> {
        Ok(12)
    }
    async fn clone(&self) -> Result<u32, Error> {
        Ok(13)
    }
    async fn fmt(&self) -> Result<u32, Error> {
        Ok(14)
    }
    async fn interface_name(&self) -> Result<u32, Error> {
        Ok(15)
    }
    async fn patterns(&self, x: u32, y: u32) -> Result<u32, Error> {
        Ok(x * 10 + y)
    }
    async fn unit(&self) -> Result<(), Error> {
        Ok(())
    }
}

// --- extension: base method parameter names inside the extension macro -------------------
#[lanner::interface]
trait Base1 {
    async fn get(
        &self,
        base: u32,
        error: u32,
        self_: u32,
        interface: u32,
    ) -> Result<Vec<u32>, Error>;
    async fn ping(&self) -> Result<u32, Error>;
}
#[lanner::interface]
trait Base2 {
    async fn ping(&self) -> Result<u32, Error>;
}
#[lanner::interface]
trait Ext: Base1 + Base2 {
    async fn get(&self, x: u32) -> Result<Vec<u32>, Error>;
}

struct E;
impl Base1 for E {
    async fn get(&self, a: u32, b: u32, c: u32, d: u32) -> Result<Vec<u32>, Error> {
        Ok(vec![a, b, c, d])
    }
    async fn ping(&self) -> Result<u32, Error> {
        Ok(1)
    }
}
impl Base2 for E {
    async fn ping(&self) -> Result<u32, Error> {
        Ok(2)
    }
}
impl Ext for E {
    async fn get(&self, x: u32) -> Result<Vec<u32>, Error> {
        Ok(vec![x, 99])
    }
}

// --- a method deprecated in favour of a later version's --------------------------------------
#[lanner::interface]
trait Store {
    #[deprecated(note = "use StoreV2::put_all")]
    async fn put(&self, value: u32) -> Result<u32, Error>;
}
#[lanner::interface]
trait StoreV2: Store {
    async fn put_all(&self, values: Vec<u32>) -> Result<u32, Error>;
}

struct S;
#[allow(deprecated)]
impl Store for S {
    async fn put(&self, value: u32) -> Result<u32, Error> {
        Ok(value)
    }
}
impl StoreV2 for S {
    async fn put_all(&self, values: Vec<u32>) -> Result<u32, Error> {
        Ok(values.iter().sum())
    }
}

// --- a whole interface deprecated ------------------------------------------------------------
#[deprecated(note = "use StoreV2")]
#[lanner::interface]
trait Legacy {
    async fn get(&self) -> Result<u32, Error>;
}

#[allow(deprecated)]
impl Legacy for S {
    async fn get(&self) -> Result<u32, Error> {
        Ok(5)
    }
}

// --- diamond ---
#[lanner::interface]
trait Root {
    async fn root(&self) -> Result<u32, Error>;
}
#[lanner::interface]
trait Left: Root {
    async fn left(&self) -> Result<u32, Error>;
}
#[lanner::interface]
trait Right: Root {
    async fn right(&self) -> Result<u32, Error>;
}
#[lanner::interface]
trait Both: Left + Right {}

struct D;
impl Root for D {
    async fn root(&self) -> Result<u32, Error> {
        Ok(0)
    }
}
impl Left for D {
    async fn left(&self) -> Result<u32, Error> {
        Ok(1)
    }
}
impl Right for D {
    async fn right(&self) -> Result<u32, Error> {
        Ok(2)
    }
}
impl Both for D {}

// --- in a module, with paths, restricted visibility ---
mod inner {
    use lanner::Error;
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    pub(crate) struct Point {
        pub(crate) x: i32,
    }
    #[lanner::interface]
    pub(crate) trait Geo {
        async fn flip(
            &self,
            p: self::Point,
            q: super::inner::Point,
        ) -> Result<crate::inner::Point, Error>;
    }
    #[lanner::interface]
    pub(crate) trait GeoV2: Geo {
        async fn flip2(&self, p: Point) -> Result<Point, Error>;
    }
}

#[tokio::test]
async fn shapes_reach_the_right_methods() {
    let server = Server::new();
    server.publish("n", Object::new(NamesStub::new(Arc::new(N))));
    server.publish("e", Object::new(ExtStub::new(Arc::new(E))));
    server.publish("d", Object::new(BothStub::new(Arc::new(D))));
    let listening = server.listen("mem://review-shapes").await.unwrap();
    let client = Client::new();
    let n: NamesProxy = client
        .connect(&listening.endpoint().object_url("n"))
        .await
        .unwrap();
    assert_eq!(
        n.locals(1, 2, 3, 4, 5, 6, 7, 8, 9, 10).await,
        Ok(vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    );
    assert_eq!(
        n.more(1, 2, 3, 4, 5, 6, 7, 8, 9, 10).await,
        Ok(vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    );
    assert_eq!(Names::base(&n, 1, 2, 3, 4).await, Ok(vec![1, 2, 3, 4]));
    assert_eq!(
        n.bulk(
            bytes::Bytes::from_static(b"a"),
            bytes::Bytes::from_static(b"bb"),
            3
        )
        .await,
        Ok(vec![1, 2, 3])
    );
    assert_eq!(Names::object(&n).await, Ok(1));
    assert_eq!(Names::query(&n).await, Ok(2));
    assert_eq!(Names::with_timeout(&n, 3).await, Ok(3));
    assert_eq!(Names::new(&n).await, Ok(4));
    assert_eq!(Names::dispatch(&n).await, Ok(5));
    assert_eq!(Names::interface_id(&n).await, Ok(6));
    assert_eq!(Names::methods(&n).await, Ok(7));
    assert_eq!(Names::bases(&n).await, Ok(8));
    assert_eq!(Names::__serve(&n).await, Ok(9));
    assert_eq!(Names::__direct(&n).await, Ok(10));
    assert_eq!(Names::__from_core(&n).await, Ok(11));
    assert_eq!(Names::__core(&n).await, Ok(12));
    assert_eq!(Names::clone(&n).await, Ok(13));
    assert_eq!(Names::fmt(&n).await, Ok(14));
    assert_eq!(Names::interface_name(&n).await, Ok(15));
    assert_eq!(n.patterns(1, 2).await, Ok(12));
    assert_eq!(n.unit().await, Ok(()));
    // the Proxy trait's own methods still work
    let again: NamesProxy = Proxy::query(&n).unwrap();
    assert_eq!(Names::query(&again).await, Ok(2));

    let e: ExtProxy = client
        .connect(&listening.endpoint().object_url("e"))
        .await
        .unwrap();
    assert_eq!(Base1::get(&e, 1, 2, 3, 4).await, Ok(vec![1, 2, 3, 4]));
    assert_eq!(Ext::get(&e, 5).await, Ok(vec![5, 99]));
    assert_eq!(Base1::ping(&e).await, Ok(1));
    assert_eq!(Base2::ping(&e).await, Ok(2));

    server.publish("s", Object::new(StoreV2Stub::new(Arc::new(S))));
    let s: StoreV2Proxy = client
        .connect(&listening.endpoint().object_url("s"))
        .await
        .unwrap();
    assert_eq!(s.put_all(vec![1, 2]).await, Ok(3));
    #[allow(deprecated)]
    let old = s.put(4).await;
    assert_eq!(old, Ok(4));
    server.publish("l", Object::new(LegacyStub::new(Arc::new(S))));
    let l: LegacyProxy = client
        .connect(&listening.endpoint().object_url("l"))
        .await
        .unwrap();
    #[allow(deprecated)]
    let legacy = Legacy::get(&l).await;
    assert_eq!(legacy, Ok(5));

    let d: BothProxy = client
        .connect(&listening.endpoint().object_url("d"))
        .await
        .unwrap();
    assert_eq!(d.root().await, Ok(0));
    assert_eq!(d.left().await, Ok(1));
    assert_eq!(d.right().await, Ok(2));
}

// --- a user type called `T` (the stub's type parameter must not hide it) ------------------
mod user_type_t {
    use lanner::Error;

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    pub(crate) struct T(pub(crate) u32);

    #[lanner::interface]
    pub(crate) trait Temperatures {
        async fn warmer(&self, t: T, by: u32) -> Result<T, Error>;
    }

    pub(crate) struct Thermo;

    impl Temperatures for Thermo {
        async fn warmer(&self, t: T, by: u32) -> Result<T, Error> {
            Ok(T(t.0 + by))
        }
    }
}

// --- more inline arguments than serde's largest tuple (16) ---------------------------------
#[lanner::interface]
trait Wide {
    async fn seventeen(
        &self,
        a1: u8,
        a2: u8,
        a3: u8,
        a4: u8,
        a5: u8,
        a6: u8,
        a7: u8,
        a8: u8,
        a9: u8,
        a10: u8,
        a11: u8,
        a12: u8,
        a13: u8,
        a14: u8,
        a15: u8,
        a16: u8,
        a17: String,
    ) -> Result<Vec<String>, Error>;
    async fn with_bulk(
        &self,
        a1: u8,
        a2: u8,
        a3: u8,
        a4: u8,
        a5: u8,
        a6: u8,
        a7: u8,
        a8: u8,
        a9: u8,
        data: bytes::Bytes,
        a10: u8,
        a11: u8,
        a12: u8,
        a13: u8,
        a14: u8,
        a15: u8,
        a16: u8,
        a17: u8,
        a18: u8,
    ) -> Result<Vec<String>, Error>;
}

struct W;

impl Wide for W {
    async fn seventeen(
        &self,
        a1: u8,
        a2: u8,
        a3: u8,
        a4: u8,
        a5: u8,
        a6: u8,
        a7: u8,
        a8: u8,
        a9: u8,
        a10: u8,
        a11: u8,
        a12: u8,
        a13: u8,
        a14: u8,
        a15: u8,
        a16: u8,
        a17: String,
    ) -> Result<Vec<String>, Error> {
        let mut all: Vec<String> = [
            a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16,
        ]
        .iter()
        .map(u8::to_string)
        .collect();
        all.push(a17);
        Ok(all)
    }
    async fn with_bulk(
        &self,
        a1: u8,
        a2: u8,
        a3: u8,
        a4: u8,
        a5: u8,
        a6: u8,
        a7: u8,
        a8: u8,
        a9: u8,
        data: bytes::Bytes,
        a10: u8,
        a11: u8,
        a12: u8,
        a13: u8,
        a14: u8,
        a15: u8,
        a16: u8,
        a17: u8,
        a18: u8,
    ) -> Result<Vec<String>, Error> {
        let mut all: Vec<String> = [
            a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18,
        ]
        .iter()
        .map(u8::to_string)
        .collect();
        all.push(String::from_utf8(data.to_vec()).unwrap());
        Ok(all)
    }
}

// --- interfaces declared by a `macro_rules!` (types arrive as `$t:ty` fragments) ------------
mod generated {
    use bytes::Bytes;
    use lanner::Error;

    macro_rules! echo_interface {
        ($name:ident, $value:ty, $result:ty) => {
            #[lanner::interface]
            pub(crate) trait $name {
                async fn echo(&self, value: $value) -> $result;
            }
        };
    }

    echo_interface!(EchoNumber, u32, Result<u32, Error>);
    echo_interface!(EchoBulk, Bytes, Result<Bytes, Error>);

    pub(crate) struct Echo;

    impl EchoNumber for Echo {
        async fn echo(&self, value: u32) -> Result<u32, Error> {
            Ok(value)
        }
    }

    impl EchoBulk for Echo {
        async fn echo(&self, value: Bytes) -> Result<Bytes, Error> {
            Ok(value)
        }
    }
}

#[tokio::test]
async fn a_user_type_called_t_many_arguments_and_generated_interfaces() {
    use generated::{
        EchoBulk, EchoBulkProxy, EchoBulkStub, EchoNumber, EchoNumberProxy, EchoNumberStub,
    };
    use user_type_t::{T, Temperatures, TemperaturesProxy, TemperaturesStub, Thermo};

    let server = Server::new();
    server.publish("t", Object::new(TemperaturesStub::new(Arc::new(Thermo))));
    server.publish("w", Object::new(WideStub::new(Arc::new(W))));
    let echo = Arc::new(generated::Echo);
    server.publish(
        "g",
        Object::new(EchoNumberStub::new(echo.clone())).with(EchoBulkStub::new(echo)),
    );
    let listening = server.listen("mem://review-shapes-2").await.unwrap();
    let client = Client::new();

    let t: TemperaturesProxy = client
        .connect(&listening.endpoint().object_url("t"))
        .await
        .unwrap();
    assert_eq!(t.warmer(T(20), 3).await, Ok(T(23)));

    let w: WideProxy = client
        .connect(&listening.endpoint().object_url("w"))
        .await
        .unwrap();
    let expected: Vec<String> = (1..=16)
        .map(|n: u8| n.to_string())
        .chain(["x".to_string()])
        .collect();
    assert_eq!(
        w.seventeen(
            1,
            2,
            3,
            4,
            5,
            6,
            7,
            8,
            9,
            10,
            11,
            12,
            13,
            14,
            15,
            16,
            "x".into()
        )
        .await,
        Ok(expected)
    );
    let expected: Vec<String> = (1..=18)
        .map(|n: u8| n.to_string())
        .chain(["bulk".to_string()])
        .collect();
    assert_eq!(
        w.with_bulk(
            1,
            2,
            3,
            4,
            5,
            6,
            7,
            8,
            9,
            bytes::Bytes::from_static(b"bulk"),
            10,
            11,
            12,
            13,
            14,
            15,
            16,
            17,
            18
        )
        .await,
        Ok(expected)
    );

    let number: EchoNumberProxy = client
        .connect(&listening.endpoint().object_url("g"))
        .await
        .unwrap();
    assert_eq!(number.echo(7).await, Ok(7));
    let bulk: EchoBulkProxy = number.query().unwrap();
    let payload = bytes::Bytes::from(vec![5u8; 100_000]);
    assert_eq!(bulk.echo(payload.clone()).await, Ok(payload));
    // A `Bytes` declared through a fragment is a bulk payload, as one written out is.
    assert_eq!(
        <EchoBulkProxy as Proxy>::METHODS[0].signature,
        "echo(Bytes)->Result<Bytes,Error>"
    );
}

// --- interfaces declared where the prelude is not (`#![no_implicit_prelude]`) ----------------
mod no_prelude {
    #![no_implicit_prelude]

    #[::lanner::interface]
    pub(crate) trait Plain {
        async fn twice(&self, x: u32) -> ::core::result::Result<u32, ::lanner::Error>;
    }

    #[::lanner::interface]
    pub(crate) trait PlainV2: Plain {
        async fn size(&self, b: ::lanner::Bytes) -> ::core::result::Result<u64, ::lanner::Error>;
    }
}

struct NoPrelude;

impl no_prelude::Plain for NoPrelude {
    async fn twice(&self, x: u32) -> Result<u32, Error> {
        Ok(2 * x)
    }
}

impl no_prelude::PlainV2 for NoPrelude {
    async fn size(&self, b: bytes::Bytes) -> Result<u64, Error> {
        Ok(b.len() as u64)
    }
}

#[tokio::test]
async fn interfaces_declared_without_the_prelude() {
    use no_prelude::{Plain, PlainV2, PlainV2Proxy, PlainV2Stub};

    let server = Server::new();
    server.publish("p", Object::new(PlainV2Stub::new(Arc::new(NoPrelude))));
    let listening = server.listen("mem://review-shapes-3").await.unwrap();
    let client = Client::new();
    let p: PlainV2Proxy = client
        .connect(&listening.endpoint().object_url("p"))
        .await
        .unwrap();
    assert_eq!(p.twice(21).await, Ok(42));
    assert_eq!(p.size(bytes::Bytes::from_static(b"abc")).await, Ok(3));
}
