#[lanner::interface]
pub trait Log {
    async fn record(&self, line: impl Into<String> + Send) -> Result<(), lanner::Error>;
}

fn main() {}
