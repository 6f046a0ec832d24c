#[lanner::interface]
pub trait Store {
    const CAPACITY: usize;

    async fn get(&self, key: u64) -> Result<u64, lanner::Error>;
}

fn main() {}
