#[lanner::interface]
pub trait Logger {
    async fn log(&self, line: String);
}

fn main() {}
