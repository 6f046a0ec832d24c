//! Everything the macro accepts, compiled and run: several methods, `Bytes` arguments and
//! results, methods with no arguments and unit results, custom error enums, and the `name`
//! and `id` options.

use std::sync::Arc;

use lanner::{Bytes, InterfaceId, Proxy};

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum StoreError {
    Missing(String),
    Full { capacity: u32 },
    Remote(lanner::Error),
}

impl From<lanner::Error> for StoreError {
    fn from(error: lanner::Error) -> Self {
        StoreError::Remote(error)
    }
}

/// A blob store (doc comments and other attributes on the trait and its methods are kept).
#[lanner::interface]
pub trait BlobStore {
    /// Liveness check.
    async fn ping(&self) -> Result<(), lanner::Error>;
    async fn len(&self) -> Result<u64, StoreError>;
    async fn put(&self, key: String, blob: Bytes) -> Result<u32, StoreError>;
    async fn get(&self, key: String) -> Result<Bytes, StoreError>;
    async fn concat(
        &self,
        first: Bytes,
        separator: u8,
        second: lanner::Bytes,
    ) -> Result<Bytes, StoreError>;
    #[allow(clippy::type_complexity)]
    async fn nested(
        &self,
        blobs: Vec<Vec<u8>>,
        pair: (u8, Option<String>),
    ) -> Result<Vec<u8>, lanner::Error>;
}

#[lanner::interface(name = "app.Named")]
pub trait Named {
    async fn hello(&self) -> Result<String, lanner::Error>;
}

#[lanner::interface(id = "6f9619ff-8b86-d011-b42d-00c04fc964ff")]
pub trait Fixed {
    async fn hello(&self) -> Result<String, lanner::Error>;
}

#[lanner::interface(name = "app.Both", id = "0123456789abcdef0123456789ABCDEF")]
pub(crate) trait Both {
    async fn nothing(&self) -> Result<(), lanner::Error>;
}

struct Impl;

impl BlobStore for Impl {
    async fn ping(&self) -> Result<(), lanner::Error> {
        Ok(())
    }
    async fn len(&self) -> Result<u64, StoreError> {
        Ok(0)
    }
    async fn put(&self, _key: String, blob: Bytes) -> Result<u32, StoreError> {
        Ok(blob.len() as u32)
    }
    async fn get(&self, key: String) -> Result<Bytes, StoreError> {
        Err(StoreError::Missing(key))
    }
    async fn concat(
        &self,
        first: Bytes,
        separator: u8,
        second: Bytes,
    ) -> Result<Bytes, StoreError> {
        let mut out = first.to_vec();
        out.push(separator);
        out.extend_from_slice(&second);
        Ok(out.into())
    }
    async fn nested(
        &self,
        blobs: Vec<Vec<u8>>,
        pair: (u8, Option<String>),
    ) -> Result<Vec<u8>, lanner::Error> {
        let _ = pair;
        Ok(blobs.concat())
    }
}

impl Named for Impl {
    async fn hello(&self) -> Result<String, lanner::Error> {
        Ok("named".into())
    }
}

impl Fixed for Impl {
    async fn hello(&self) -> Result<String, lanner::Error> {
        Ok("fixed".into())
    }
}

impl Both for Impl {
    async fn nothing(&self) -> Result<(), lanner::Error> {
        Ok(())
    }
}

fn main() {
    let implementation = Arc::new(Impl);
    let object = lanner::Object::new(BlobStoreStub::new(implementation.clone()))
        .with(NamedStub::new(implementation.clone()))
        .with(FixedStub::new(implementation.clone()))
        .with(BothStub::new(implementation));
    assert_eq!(object.interfaces().len(), 4);

    assert_eq!(
        FixedProxy::INTERFACE_ID,
        InterfaceId::from_u128(0x6f9619ff_8b86_d011_b42d_00c04fc964ff)
    );
    assert_eq!(
        BothProxy::INTERFACE_ID,
        InterfaceId::from_u128(0x0123456789abcdef0123456789abcdef)
    );
    assert_eq!(BlobStoreProxy::METHODS.len(), 6);
    let names: Vec<_> = BlobStoreProxy::METHODS.iter().map(|m| m.name).collect();
    assert_eq!(names, ["ping", "len", "put", "get", "concat", "nested"]);
    for (ordinal, method) in BlobStoreProxy::METHODS.iter().enumerate() {
        assert_eq!(usize::from(method.ordinal), ordinal);
    }
    assert_eq!(
        BlobStoreProxy::METHODS[2].signature,
        "put(String,Bytes)->Result<u32,StoreError>"
    );
    assert!(BlobStoreProxy::INTERFACE_NAME.ends_with("::BlobStore"));
}
