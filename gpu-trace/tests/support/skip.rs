//! The one rule for a test that cannot run here: it says why on stderr
//! ("skipping NAME: why", which vm-test reads), or, where the suite
//! requires every test to run (GPU_TRACE_REQUIRE_KERNEL_TESTS=1, set in
//! CI), it fails.

/// Says that `test` skips, or panics where that is not allowed.
pub fn cannot_run(test: &str, why: &str) {
    if std::env::var("GPU_TRACE_REQUIRE_KERNEL_TESTS").is_ok_and(|v| v == "1") {
        panic!("{test} cannot run but is required here: {why}");
    }
    eprintln!("skipping {test}: {why}");
}
