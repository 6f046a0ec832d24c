#[lanner::interface]
pub trait Greeter {
    async fn greet(&self, name: &str) -> Result<String, lanner::Error>;
}

fn main() {}
