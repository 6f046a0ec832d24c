#[lanner::interface]
pub trait Log {
    #[oneway(fast)]
    async fn record(&self, line: String) -> Result<(), lanner::Error>;
}

fn main() {}
