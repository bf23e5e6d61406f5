//! A byte rate that bulk answers (lists of nodes) share. Lists are cheap to
//! make (see `node_json`), so a reader listing back to back is held back
//! only by how fast bytes go out; on a small machine, readers that take
//! every byte the API can send also take the CPU that kubelets' heartbeats
//! and small requests need, in the API and in the readers themselves. Each
//! chunk of a list takes the next slot of one shared line, so lists that
//! run at once go out in turns, chunk by chunk (docs/decisions/list-rate.md).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How far behind now the line may be: what an idle API sends at once.
const BURST: Duration = Duration::from_millis(50);

/// The shared line of list bytes.
#[derive(Debug)]
pub struct Pacer {
    /// Seconds a byte takes; `None` sends everything at once.
    per_byte: Option<f64>,
    /// When the line is free again.
    free_at: Mutex<Option<Instant>>,
}

impl Pacer {
    /// A line of `bytes_per_second` (0: no limit).
    pub fn new(bytes_per_second: u64) -> Pacer {
        Pacer {
            per_byte: (bytes_per_second > 0).then(|| 1.0 / bytes_per_second as f64),
            free_at: Mutex::new(None),
        }
    }

    /// Takes the next slot for `bytes`: `None` to send them now, or the
    /// instant to send them at.
    pub fn slot(&self, bytes: usize) -> Option<Instant> {
        let per_byte = self.per_byte?;
        let now = Instant::now();
        let mut free_at = self.free_at.lock().unwrap_or_else(|p| p.into_inner());
        let earliest = now.checked_sub(BURST).unwrap_or(now);
        let start = free_at.map_or(earliest, |at| at.max(earliest));
        *free_at = Some(start + Duration::from_secs_f64(bytes as f64 * per_byte));
        (start > now).then_some(start)
    }
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer::new(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn chunks_take_turns_at_the_rate_after_a_burst() {
        // 1 MB/s: a 10 kB chunk takes 10 ms of the line.
        let pacer = Pacer::new(1_000_000);
        let chunk = 10_000;
        // An idle line sends BURST's worth at once (and the chunk due now).
        let now = Instant::now();
        let mut at_once = 0;
        let first_wait = loop {
            match pacer.slot(chunk) {
                None => at_once += 1,
                Some(at) => break at - now,
            }
        };
        assert_eq!(at_once, 6, "50 ms of a line of 10 ms chunks, and now");
        assert_eq!(first_wait, Duration::from_millis(10));
        // Then a slot every 10 ms, whoever asks.
        let slots: Vec<Duration> = (0..3).map(|_| pacer.slot(chunk).unwrap() - now).collect();
        assert_eq!(slots, [20, 30, 40].map(Duration::from_millis));
        // Idle again for a while: a burst again.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(pacer.slot(chunk), None);
    }

    #[test]
    fn no_rate_sends_everything_at_once() {
        let pacer = Pacer::default();
        for _ in 0..1000 {
            assert_eq!(pacer.slot(1 << 20), None);
        }
    }
}
