// Only a parameter spelled `Bytes` is a bulk payload; nested, it would have to be encoded
// inline, and `bytes::Bytes` is not serde here.
#[lanner::interface]
pub trait Store {
    async fn put_all(&self, blobs: Vec<lanner::Bytes>) -> Result<(), lanner::Error>;
}

fn main() {}
