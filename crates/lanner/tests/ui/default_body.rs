#[lanner::interface]
pub trait Calculator {
    async fn add(&self, a: u64, b: u64) -> Result<u64, lanner::Error> {
        Ok(a + b)
    }
}

fn main() {}
