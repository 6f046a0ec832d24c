#[lanner::interface]
pub trait Clock {
    async fn now(&self) -> Result<u64, lanner::Error>
    where
        Self: Sized;
}

fn main() {}
