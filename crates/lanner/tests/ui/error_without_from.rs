#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum CalcError {
    Overflow,
}

#[lanner::interface]
pub trait Calculator {
    async fn add(&self, a: u64, b: u64) -> Result<u64, CalcError>;
}

fn main() {}
