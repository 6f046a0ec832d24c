pub struct Opaque;

#[lanner::interface]
pub trait Sink {
    async fn put(&self, key: String, blob: lanner::Bytes, value: Opaque) -> Result<(), lanner::Error>;
}

fn main() {}
