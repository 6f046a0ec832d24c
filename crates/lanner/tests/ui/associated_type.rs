#[lanner::interface]
pub trait Store {
    type Key;

    async fn get(&self, key: u64) -> Result<u64, lanner::Error>;
}

fn main() {}
