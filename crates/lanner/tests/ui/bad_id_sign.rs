// `u128::from_str_radix` alone would accept a leading `+`.
#[lanner::interface(id = "+0123456789abcdef0123456789abcde")]
pub trait Calculator {
    async fn add(&self, a: u64, b: u64) -> Result<u64, lanner::Error>;
}

fn main() {}
