//! Access rules follow the names they are written for: a method named as Rust spells it
//! without its raw prefix (`r#type` is `"type"`), an object by the name it was published
//! under when it was handed out, also when it is handed on to a third party or published
//! again.

use std::sync::Arc;

use lanner::{AccessPolicy, Client, Error, ErrorKind, Object, Proxy, Server, Target};

mod common;

/// An interface whose method names are Rust keywords, written as raw identifiers.
#[lanner::interface(name = "tests.access_names.Keywords")]
trait Keywords {
    async fn r#type(&self) -> Result<u32, Error>;
    async fn read(&self) -> Result<u32, Error>;
}

struct Words;

impl Keywords for Words {
    async fn r#type(&self) -> Result<u32, Error> {
        Ok(1)
    }

    async fn read(&self) -> Result<u32, Error> {
        Ok(2)
    }
}

#[test]
fn a_raw_identifier_method_is_named_without_its_prefix() {
    let methods = <KeywordsProxy as Proxy>::METHODS;
    assert_eq!(methods[0].name, "type", "{:?}", methods[0]);
}

#[tokio::test]
async fn a_deny_rule_naming_a_keyword_method_denies_it() {
    let policy = AccessPolicy::allow_by_default().deny(Target::everything().method("type"), ["*"]);
    let server = Server::new().with_access(policy);
    server.publish("words", Object::new(KeywordsStub::new(Arc::new(Words))));
    let listening = server.listen("mem://access-names-keywords").await.unwrap();
    let words: KeywordsProxy = Client::new()
        .connect(&listening.endpoint().object_url("words"))
        .await
        .unwrap();
    assert_eq!(words.read().await, Ok(2));
    let denied = words.r#type().await;
    assert_eq!(
        denied.as_ref().map_err(Error::kind),
        Err(ErrorKind::PermissionDenied),
        "{denied:?}"
    );
}

mod plain {
    use lanner::Error;
    /// [`super::Keywords`] with `read` written as a raw identifier: the same method.
    #[lanner::interface(name = "tests.access_names.Keywords")]
    pub trait Keywords {
        async fn r#type(&self) -> Result<u32, Error>;
        async fn r#read(&self) -> Result<u32, Error>;
    }
}

#[test]
fn a_method_written_as_a_raw_identifier_is_the_same_method() {
    assert_eq!(
        <KeywordsProxy as Proxy>::METHODS[1].fingerprint,
        <plain::KeywordsProxy as Proxy>::METHODS[1].fingerprint
    );
    assert_eq!(
        <KeywordsProxy as Proxy>::INTERFACE_ID,
        <plain::KeywordsProxy as Proxy>::INTERFACE_ID
    );
}

/// A guarded object: anyone may read it, nobody may reset it while it is published as
/// "vault" (see [`vault_policy`]).
#[lanner::interface(name = "tests.access_names.Vault")]
trait Vault {
    async fn read(&self) -> Result<u32, Error>;
    async fn reset(&self) -> Result<(), Error>;
}

struct VaultImpl(std::sync::atomic::AtomicU32);

impl Vault for VaultImpl {
    async fn read(&self) -> Result<u32, Error> {
        Ok(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }

    async fn reset(&self) -> Result<(), Error> {
        self.0.store(0, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// A third party that resets whatever vault it is handed.
#[lanner::interface(name = "tests.access_names.Relay")]
trait Relay {
    async fn reset_it(&self, vault: lanner::ObjRef<VaultProxy>) -> Result<(), Error>;
}

struct RelayImpl;

impl Relay for RelayImpl {
    async fn reset_it(&self, vault: lanner::ObjRef<VaultProxy>) -> Result<(), Error> {
        vault.into_proxy()?.reset().await
    }
}

fn vault_policy() -> AccessPolicy {
    AccessPolicy::allow_by_default().deny(Target::object("vault").method("reset"), ["*"])
}

fn unix(tag: &str) -> String {
    let path = std::env::temp_dir().join(format!(
        "lanner-access-names-{tag}-{}.sock",
        std::process::id()
    ));
    format!("unix://{}", path.display())
}

#[tokio::test]
async fn handing_a_reference_on_grants_no_more_than_its_holder_had() {
    let b = Server::new().with_access(vault_policy());
    let vault_impl = Arc::new(VaultImpl(std::sync::atomic::AtomicU32::new(7)));
    b.publish("vault", Object::new(VaultStub::new(vault_impl.clone())));
    let b_listening = b.listen(&unix("handoff-b")).await.unwrap();
    let c = Server::new();
    c.publish("relay", Object::new(RelayStub::new(Arc::new(RelayImpl))));
    let c_listening = c.listen(&unix("handoff-c")).await.unwrap();

    let a = Client::new();
    let vault: VaultProxy = a
        .connect(&b_listening.endpoint().object_url("vault"))
        .await
        .unwrap();
    let relay: RelayProxy = a
        .connect(&c_listening.endpoint().object_url("relay"))
        .await
        .unwrap();
    assert_eq!(vault.read().await, Ok(7));
    let denied = vault.reset().await.unwrap_err();
    assert_eq!(denied.kind(), ErrorKind::PermissionDenied, "{denied}");
    // Handed on while the name stands: the third party may not reset it either.
    let denied = relay
        .reset_it(lanner::ObjRef::from_proxy(vault.clone()))
        .await
        .unwrap_err();
    assert_eq!(denied.kind(), ErrorKind::PermissionDenied, "{denied}");

    // The name is withdrawn; A keeps its reference, and its rights on it.
    assert!(b.unpublish("vault").is_some());
    let denied = vault.reset().await.unwrap_err();
    assert_eq!(denied.kind(), ErrorKind::PermissionDenied, "{denied}");
    // Handing it on must not lift the restriction A's reference carries.
    let passed_on = relay
        .reset_it(lanner::ObjRef::from_proxy(vault.clone()))
        .await;
    assert_eq!(
        passed_on.as_ref().map_err(Error::kind),
        Err(ErrorKind::PermissionDenied),
        "{passed_on:?}"
    );
    assert_eq!(vault.read().await, Ok(7), "the vault was reset");
}

/// Hands out the vault it keeps, as a result.
#[lanner::interface(name = "tests.access_names.Shelf")]
trait Shelf {
    async fn get(&self) -> Result<lanner::ObjRef<VaultProxy>, Error>;
}

struct ShelfImpl(Object);

impl Shelf for ShelfImpl {
    async fn get(&self) -> Result<lanner::ObjRef<VaultProxy>, Error> {
        Ok(lanner::ObjRef::new(self.0.clone()))
    }
}

#[tokio::test]
async fn an_object_published_again_under_its_name_obeys_that_names_rules() {
    // Published under many aliases, then as "vault" (last): handed out without a name, it
    // obeys "vault"'s rules, also after it is published as "vault" once more.
    let server = Server::new().with_access(vault_policy());
    let vault = Object::new(VaultStub::new(Arc::new(VaultImpl(
        std::sync::atomic::AtomicU32::new(7),
    ))));
    for alias in 0..63 {
        server.publish(format!("alias-{alias}"), vault.clone());
    }
    server.publish("vault", vault.clone());
    assert!(server.publish("vault", vault.clone()).is_some());
    server.publish(
        "shelf",
        Object::new(ShelfStub::new(Arc::new(ShelfImpl(vault)))),
    );
    let listening = server.listen("mem://access-names-republish").await.unwrap();
    let shelf: ShelfProxy = Client::new()
        .connect(&listening.endpoint().object_url("shelf"))
        .await
        .unwrap();
    let handed = shelf.get().await.unwrap().into_proxy().unwrap();
    let reset = handed.reset().await;
    assert_eq!(
        reset.as_ref().map_err(Error::kind),
        Err(ErrorKind::PermissionDenied),
        "{reset:?}"
    );
}
