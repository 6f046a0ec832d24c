#[derive(Debug)]
pub enum CalcError {
    Overflow,
    Remote(lanner::Error),
}

impl From<lanner::Error> for CalcError {
    fn from(error: lanner::Error) -> Self {
        CalcError::Remote(error)
    }
}

#[lanner::interface]
pub trait Calculator {
    async fn add(&self, a: u64, b: u64) -> Result<u64, CalcError>;
}

fn main() {}
