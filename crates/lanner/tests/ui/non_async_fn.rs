#[lanner::interface]
pub trait Calculator {
    fn add(&self, a: u64, b: u64) -> Result<u64, lanner::Error>;
}

fn main() {}
