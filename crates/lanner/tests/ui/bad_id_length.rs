#[lanner::interface(id = "6f9619ff-8b86-d011-b42d")]
pub trait Calculator {
    async fn add(&self, a: u64, b: u64) -> Result<u64, lanner::Error>;
}

fn main() {}
