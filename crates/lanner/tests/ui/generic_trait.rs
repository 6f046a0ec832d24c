#[lanner::interface]
pub trait Store<T> {
    async fn get(&self, key: u64) -> Result<T, lanner::Error>;
}

fn main() {}
