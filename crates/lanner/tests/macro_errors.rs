//! Compile-time diagnostics of `#[lanner::interface]`: every rejected shape of trait has a
//! case in `tests/ui/` whose expected compiler output sits next to it (`.stderr`), and the
//! `pass_*` cases show what the macro accepts (they are compiled and run). Regenerate the
//! expected output with `TRYBUILD=overwrite cargo test -p lanner --test macro_errors` and
//! read the diff.

use std::path::PathBuf;

#[test]
fn interface_macro_diagnostics() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/ui exists")
        .map(|entry| entry.expect("readable tests/ui entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .collect();
    files.sort();
    let passing = files.iter().filter(|path| is_pass_case(path)).count();
    assert!(passing >= 1, "no pass_*.rs case in {}", dir.display());
    assert!(
        files.len() - passing >= 20,
        "expected at least 20 compile-fail cases in {}, found {}",
        dir.display(),
        files.len() - passing
    );

    let cases = trybuild::TestCases::new();
    for path in &files {
        if is_pass_case(path) {
            cases.pass(path);
        } else {
            cases.compile_fail(path);
        }
    }
}

fn is_pass_case(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with("pass_"))
}
