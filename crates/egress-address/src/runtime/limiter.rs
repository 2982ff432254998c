//! One token bucket over every shard's retries, on top of each shard's own exponential backoff
//! (as controller-runtime pairs its per-item limiter with an overall bucket): however many shards
//! fail at once, retries reach the planes at a bounded rate.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

struct Bucket {
    tokens: f64,
    last: Instant,
}

/// The bucket. `reserve` never blocks: it says how long the caller's retry must wait.
pub struct RetryBucket {
    qps: f64,
    burst: f64,
    bucket: Mutex<Bucket>,
}

impl RetryBucket {
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: qps.max(f64::MIN_POSITIVE),
            burst,
            bucket: Mutex::new(Bucket {
                tokens: burst,
                last: Instant::now(),
            }),
        }
    }

    /// Takes a token, and returns how long from now the retry may go: zero while the burst
    /// lasts, then one `1/qps` step after the previous reservation.
    pub fn reserve(&self) -> Duration {
        let mut b = crate::sync::lock(&self.bucket);
        let now = Instant::now();
        let refill = now.duration_since(b.last).as_secs_f64() * self.qps;
        b.tokens = (b.tokens + refill).min(self.burst);
        b.last = now;
        b.tokens -= 1.0;
        if b.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-b.tokens / self.qps)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_and_the_rest_at_the_rate() {
        let b = RetryBucket::new(10.0, 3);
        for _ in 0..3 {
            assert_eq!(b.reserve(), Duration::ZERO);
        }
        assert_eq!(b.reserve(), Duration::from_millis(100));
        assert_eq!(b.reserve(), Duration::from_millis(200));
        // 1,000 retries at once are spread over 100 s, not sent in a storm.
        let last = (0..1000).map(|_| b.reserve()).last().unwrap();
        assert!(last >= Duration::from_secs(100), "{last:?}");
        tokio::time::advance(Duration::from_secs(200)).await;
        assert_eq!(b.reserve(), Duration::ZERO, "refilled");
    }
}
