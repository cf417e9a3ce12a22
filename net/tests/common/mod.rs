//! Shared by the integration tests.

/// Runs `test` on a fresh glommio executor and waits for it; a panic inside fails the test.
pub fn run<F: std::future::Future<Output = ()> + 'static>(
    test: impl FnOnce() -> F + Send + 'static,
) {
    let executor = glommio::LocalExecutorBuilder::default()
        .spawn(move || async move { test().await })
        .expect("starting a glommio executor");
    executor.join().expect("the test's executor panicked");
}
