#[lanner::interface]
pub trait Probe {
    async fn measure(&self, value: u32, #[cfg(debug_assertions)] trace: bool) -> Result<u32, lanner::Error>;
}

fn main() {}
