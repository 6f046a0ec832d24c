#[lanner::interface]
pub trait Calculator {
    async fn add(&self, a: u64, b: u64) -> u64;
}

fn main() {}
