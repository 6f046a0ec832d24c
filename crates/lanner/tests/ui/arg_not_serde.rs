pub struct Opaque;

#[lanner::interface]
pub trait Sink {
    async fn put(&self, value: Opaque) -> Result<(), lanner::Error>;
}

fn main() {}
