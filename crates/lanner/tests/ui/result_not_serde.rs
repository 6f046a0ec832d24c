pub struct Opaque;

#[lanner::interface]
pub trait Source {
    async fn get(&self) -> Result<Opaque, lanner::Error>;
}

fn main() {}
