#[lanner::interface]
pub trait Store {
    async fn put<T: serde::Serialize>(&self, value: T) -> Result<(), lanner::Error>;
}

fn main() {}
