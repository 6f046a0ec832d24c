#[lanner::interface]
pub trait Names {
    async fn first(&self) -> Result<&'static str, lanner::Error>;
}

fn main() {}
