#[lanner::interface]
pub trait Store
where
    Self: Sized,
{
    async fn get(&self, key: u64) -> Result<u64, lanner::Error>;
}

fn main() {}
