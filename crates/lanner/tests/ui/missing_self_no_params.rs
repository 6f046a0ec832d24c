#[lanner::interface]
pub trait Clock {
    async fn now() -> Result<u64, lanner::Error>;
}

fn main() {}
