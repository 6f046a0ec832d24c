#[lanner::interface(version = "2")]
pub trait Calculator {
    async fn add(&self, a: u64, b: u64) -> Result<u64, lanner::Error>;
}

fn main() {}
