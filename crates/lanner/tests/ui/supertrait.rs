pub trait Named {}

#[lanner::interface]
pub trait Calculator: Named {
    async fn add(&self, a: u64, b: u64) -> Result<u64, lanner::Error>;
}

fn main() {}
