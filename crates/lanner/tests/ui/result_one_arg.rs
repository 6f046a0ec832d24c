pub type Result<T> = std::result::Result<T, lanner::Error>;

#[lanner::interface]
pub trait Calculator {
    async fn add(&self, a: u64, b: u64) -> Result<u64>;
}

fn main() {}
