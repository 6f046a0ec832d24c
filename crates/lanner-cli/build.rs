//! Writes the scale benchmark's interface, `Wide`: [`METHODS`] methods that do nothing
//! (`m000`, `m001`, …), the implementation of each by `ScaleObject` (it returns the
//! object's index), and `call_wide`, which calls a method by its ordinal with a `match`.
//! `src/services.rs` includes the result.

use std::fmt::Write as _;

/// How many methods `Wide` has: the most `lanner bench scale --methods` can ask for.
const METHODS: usize = 200;

fn main() {
    let names: Vec<String> = (0..METHODS).map(|i| format!("m{i:03}")).collect();
    let mut code = String::new();
    code.push_str(
        "/// The scale benchmark's interface: many methods that do nothing.\n\
         #[lanner::interface(name = \"lanner.bench.Wide\")]\n\
         pub trait Wide {\n",
    );
    for name in &names {
        writeln!(code, "    /// Does nothing; returns the object's index.").unwrap();
        writeln!(
            code,
            "    async fn {name}(&self) -> Result<u32, lanner::Error>;"
        )
        .unwrap();
    }
    code.push_str("}\n\nimpl Wide for ScaleObject {\n");
    for name in &names {
        writeln!(
            code,
            "    async fn {name}(&self) -> Result<u32, lanner::Error> {{ Ok(self.index) }}"
        )
        .unwrap();
    }
    code.push_str(
        "}\n\n\
         /// Calls the method of `proxy` whose ordinal is `method`.\n\
         pub async fn call_wide(proxy: &WideProxy, method: usize) -> Result<u32, lanner::Error> {\n\
         \x20   match method {\n",
    );
    for (ordinal, name) in names.iter().enumerate() {
        writeln!(code, "        {ordinal} => proxy.{name}().await,").unwrap();
    }
    writeln!(
        code,
        "        _ => Err(lanner::Error::new(\n\
         \x20           lanner::ErrorKind::InvalidArgument,\n\
         \x20           format!(\"Wide has {METHODS} methods: there is no method {{method}}\"),\n\
         \x20       )),\n\
         \x20   }}\n\
         }}"
    )
    .unwrap();
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    std::fs::write(out.join("wide.rs"), code).expect("writing wide.rs");
    println!("cargo::rerun-if-changed=build.rs");
}
