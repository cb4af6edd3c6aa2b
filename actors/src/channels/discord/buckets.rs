//! Discord's rate limits as its answers describe them. Each answer names the bucket its route
//! counts against (`X-RateLimit-Bucket`), how many requests are left in it
//! (`X-RateLimit-Remaining`) and when it refills (`X-RateLimit-Reset-After`). A bucket is per
//! major parameter: creating messages in two channels counts against two windows of one bucket.
//! A send that would find its window empty is not made: the row is throttled until the reset,
//! so relayq never spends one of the invalid requests Discord bans bots for.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::header::HeaderMap;

/// How many windows are kept before the ones already refilled are dropped.
const KEPT_WINDOWS: usize = 10_000;

/// What relayq learned of Discord's buckets, shared by the channel's clones.
#[derive(Debug, Default)]
pub struct Buckets(Mutex<Learned>);

#[derive(Debug, Default)]
struct Learned {
    /// Route (`POST /channels/{id}/messages`) → the bucket Discord says it counts against.
    bucket_of: HashMap<&'static str, String>,
    /// (bucket, major parameter) → its window.
    windows: HashMap<(String, String), Window>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    remaining: u64,
    resets: Instant,
}

impl Buckets {
    /// Takes one request from the window of `route` for `major` (a channel id): `Err` with the
    /// wait when the window is empty. Nothing known yet: the request may go.
    pub fn take(&self, route: &'static str, major: &str, now: Instant) -> Result<(), Duration> {
        let mut learned = self.0.lock().expect("buckets lock");
        let Some(bucket) = learned.bucket_of.get(route).cloned() else {
            return Ok(());
        };
        let Some(window) = learned.windows.get_mut(&(bucket, major.to_string())) else {
            return Ok(());
        };
        if window.resets <= now {
            return Ok(());
        }
        match window.remaining {
            0 => Err(window.resets - now),
            _ => {
                window.remaining -= 1;
                Ok(())
            }
        }
    }

    /// Learns from an answer's `X-RateLimit-*` headers (an answer without them teaches nothing).
    pub fn learn(&self, route: &'static str, major: &str, headers: &HeaderMap, now: Instant) {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let (Some(bucket), Some(remaining), Some(reset_after)) = (
            text("x-ratelimit-bucket"),
            text("x-ratelimit-remaining").and_then(|v| v.parse::<u64>().ok()),
            text("x-ratelimit-reset-after")
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 0.0),
        ) else {
            return;
        };
        let resets = now + Duration::from_secs_f64(reset_after.min(3600.0));
        let mut learned = self.0.lock().expect("buckets lock");
        learned.bucket_of.insert(route, bucket.to_string());
        if learned.windows.len() >= KEPT_WINDOWS {
            learned.windows.retain(|_, w| w.resets > now);
        }
        learned.windows.insert(
            (bucket.to_string(), major.to_string()),
            Window { remaining, resets },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTE: &str = "POST /channels/{id}/messages";

    fn headers(bucket: &str, remaining: &str, reset_after: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("X-RateLimit-Bucket", bucket.parse().unwrap());
        h.insert("X-RateLimit-Remaining", remaining.parse().unwrap());
        h.insert("X-RateLimit-Reset-After", reset_after.parse().unwrap());
        h
    }

    #[test]
    fn an_empty_window_holds_its_channel_until_the_reset_and_no_other() {
        let (buckets, now) = (Buckets::default(), Instant::now());
        assert_eq!(buckets.take(ROUTE, "111", now), Ok(()), "nothing known yet");
        buckets.learn(ROUTE, "111", &headers("abc", "1", "2.5"), now);
        assert_eq!(buckets.take(ROUTE, "111", now), Ok(()), "one left");
        assert_eq!(
            buckets.take(ROUTE, "111", now),
            Err(Duration::from_millis(2500)),
            "the one left was taken"
        );
        assert_eq!(buckets.take(ROUTE, "222", now), Ok(()), "another channel's window");
        let later = now + Duration::from_millis(2600);
        assert_eq!(buckets.take(ROUTE, "111", later), Ok(()), "refilled");
    }

    #[test]
    fn an_answer_saying_none_are_left_holds_the_next_send() {
        let (buckets, now) = (Buckets::default(), Instant::now());
        buckets.learn(ROUTE, "111", &headers("abc", "0", "1.337"), now);
        assert_eq!(
            buckets.take(ROUTE, "111", now + Duration::from_millis(337)),
            Err(Duration::from_secs(1))
        );
        buckets.learn(ROUTE, "111", &HeaderMap::new(), now);
        assert!(buckets.take(ROUTE, "111", now).is_err(), "no headers, no change");
    }
}
