#[lanner::interface]
pub trait Greeter {
    async fn greet(&self, name: Option<&str>) -> Result<String, lanner::Error>;
}

fn main() {}
