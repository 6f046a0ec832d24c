#[lanner::interface]
pub unsafe trait Calculator {
    async fn add(&self, a: u64, b: u64) -> Result<u64, lanner::Error>;
}

fn main() {}
