#[lanner::interface]
pub trait Counter {
    async fn consume(self) -> Result<u64, lanner::Error>;
}

fn main() {}
