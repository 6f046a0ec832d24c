#[lanner::interface]
pub trait Log {
    #[oneway]
    async fn record(&self, line: String) -> Result<u64, lanner::Error>;
}

fn main() {}
