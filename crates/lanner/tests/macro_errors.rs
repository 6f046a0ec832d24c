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

    // trybuild reports a build that could not run at all (a full disk, a killed
    // compiler) as every compile-fail case "succeeding", and keeps cargo's own error to
    // itself; say how much room the build had, so such a failure names its cause.
    let outcome = std::panic::catch_unwind(|| {
        let cases = trybuild::TestCases::new();
        for path in &files {
            if is_pass_case(path) {
                cases.pass(path);
            } else {
                cases.compile_fail(path);
            }
        }
    });
    if let Err(panic) = outcome {
        eprintln!("{}", free_space_report());
        std::panic::resume_unwind(panic);
    }
}

/// `df` of the directory trybuild builds in, for a failure's message.
fn free_space_report() -> String {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    match std::process::Command::new("df")
        .arg("-h")
        .arg(&target)
        .output()
    {
        Ok(output) => format!(
            "free space where trybuild builds ({}):\n{}",
            target.display(),
            String::from_utf8_lossy(&output.stdout)
        ),
        Err(error) => format!("could not run df on {}: {error}", target.display()),
    }
}

fn is_pass_case(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with("pass_"))
}
