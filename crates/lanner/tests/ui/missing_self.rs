#[lanner::interface]
pub trait Factory {
    async fn create(size: u32) -> Result<u64, lanner::Error>;
}

fn main() {}
