#[lanner::interface]
trait Admin {
    async fn status(&self) -> Result<u32, lanner::Error>;
    #[cfg(feature = "wipe")]
    async fn wipe(&self) -> Result<(), lanner::Error>;
}

fn main() {}
