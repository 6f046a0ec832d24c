#[lanner::interface]
pub trait Geometry {
    async fn area(&self, (width, height): (u32, u32)) -> Result<u64, lanner::Error>;
}

fn main() {}
