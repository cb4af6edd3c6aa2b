//! Test helpers other crates' tests use too (feature `test-helpers`). The local servers that
//! answer as a platform documents (so the production code path runs unchanged against
//! loopback) live in their platform's folder: `sources::telegram::fake`,
//! `sources::slack::fake_socket`, on [`loopback`]'s server.

pub mod loopback;

/// Waits (without blocking the actix thread) until `done` holds, or panics after 10 s.
pub async fn wait_for(what: &str, done: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
