#[lanner::interface]
pub trait Counter {
    async fn increment(&mut self) -> Result<u64, lanner::Error>;
}

fn main() {}
