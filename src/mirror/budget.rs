//! The client-side request budget (`--kube-api-qps`, `--kube-api-burst`)
//! with priorities: the crate's one [`TokenBucket`], shared by every request
//! the mirror makes, with the waiters queued by priority.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

// The mirror's retries follow the crate's one backoff (re-exported with the budget).
use crate::token_bucket::TokenBucket;

/// What a request is for; when tokens are short the lowest value goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Lease renewals of Ready nodes: what tells the cluster they are alive.
    Lease,
    /// Condition and taint changes, pod evictions.
    Change,
    /// Creations, and the backlog after an outage or a restart.
    Backlog,
    /// Lists (and the watch) of the API server's nodes.
    List,
}

/// After this many tokens in a row went to Lease renewals while other work
/// waited, the next goes to the other work: a budget too small for the
/// Leases still moves the backlog, slowly, instead of starving it.
const LEASE_RUN: u32 = 9;

/// A token bucket: `burst` requests at once, refilled at `qps` per second.
/// Every request the mirror makes takes a token first, so a drained backlog
/// never bursts beyond the budget, whatever the number of workers. When
/// requests wait, the next token goes to the one of highest [`Priority`]
/// (oldest first among equals). A `429` from the API server pauses the whole
/// budget for its `Retry-After`.
pub struct Budget {
    state: Mutex<State>,
}

struct State {
    bucket: TokenBucket,
    /// Who waits, in the order tokens go to them; each wakes on its Notify.
    waiting: BTreeMap<(Priority, u64), Arc<Notify>>,
    next_ticket: u64,
    /// Tokens given to Lease renewals in a row while others waited.
    lease_run: u32,
}

impl State {
    /// Whose turn it is: the first waiter, unless Lease renewals have had
    /// their run and something else waits.
    fn turn(&self) -> Option<(Priority, u64)> {
        let first = *self.waiting.keys().next()?;
        if first.0 == Priority::Lease && self.lease_run >= LEASE_RUN {
            if let Some(other) = self.waiting.keys().find(|k| k.0 != Priority::Lease) {
                return Some(*other);
            }
        }
        Some(first)
    }

    fn wake_turn(&self) {
        if let Some(key) = self.turn() {
            self.waiting[&key].notify_one();
        }
    }
}

/// Removes a waiter that gives up (its task aborted) and hands its turn on.
struct Ticket<'a> {
    budget: &'a Budget,
    key: Option<(Priority, u64)>,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut b = self.budget.lock();
            b.waiting.remove(&key);
            b.wake_turn();
        }
    }
}

impl Budget {
    pub fn new(qps: f64, burst: u32) -> Budget {
        Budget {
            state: Mutex::new(State {
                bucket: TokenBucket::new(qps, burst, Instant::now()),
                waiting: BTreeMap::new(),
                next_ticket: 0,
                lease_run: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The rate and burst now.
    pub fn rate(&self) -> (f64, u32) {
        let b = self.lock();
        (b.bucket.rate(), b.bucket.burst())
    }

    /// Changes the rate (the budget sized from the node count).
    pub fn set_rate(&self, qps: f64, burst: u32) {
        let mut b = self.lock();
        b.bucket.set_rate(qps, burst, Instant::now());
        b.wake_turn();
    }

    /// Hands out no token for `wait` (the API server's `Retry-After`), and
    /// starts again from an empty bucket, so the end of the pause is not a
    /// burst.
    pub fn pause_for(&self, wait: Duration) {
        let mut b = self.lock();
        let now = Instant::now();
        b.bucket.hold_until(now + wait, now);
        b.wake_turn();
    }

    /// Until when tokens are held back by a 429, if they are.
    pub fn paused_until(&self) -> Option<Instant> {
        self.lock().bucket.held_until(Instant::now())
    }

    /// Waits for a token, behind every waiter of higher priority.
    pub async fn acquire(&self, priority: Priority) {
        let notify = Arc::new(Notify::new());
        let key = {
            let mut b = self.lock();
            let key = (priority, b.next_ticket);
            b.next_ticket += 1;
            b.waiting.insert(key, notify.clone());
            key
        };
        let mut ticket = Ticket {
            budget: self,
            key: Some(key),
        };
        // Each round either takes the token or waits: for the token to refill
        // when it is this waiter's turn, else for its turn to come (the
        // waiter before it takes a token or leaves) or, at rate 0, for a new
        // rate. Bounded by the waiters ahead of it and the tokens they take.
        loop {
            let wait = {
                let mut b = self.lock();
                if b.turn() == Some(key) {
                    match b.bucket.try_acquire(Instant::now()) {
                        Ok(()) => {
                            b.waiting.remove(&key);
                            ticket.key = None;
                            let others_wait = b.waiting.keys().any(|k| k.0 != Priority::Lease);
                            b.lease_run = match priority {
                                Priority::Lease if others_wait => b.lease_run + 1,
                                _ => 0,
                            };
                            b.wake_turn();
                            return;
                        }
                        Err(wait) => wait,
                    }
                } else {
                    None
                }
            };
            match wait {
                Some(wait) => {
                    tokio::select! {
                        _ = tokio::time::sleep(wait.max(Duration::from_millis(1))) => {}
                        _ = notify.notified() => {}
                    }
                }
                None => notify.notified().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_budget_allows_the_burst_then_the_rate() {
        let budget = Budget::new(20.0, 30);
        let start = Instant::now();
        for _ in 0..30 {
            budget.acquire(Priority::Change).await;
        }
        assert_eq!(Instant::now(), start, "the burst is free");
        for _ in 0..100 {
            budget.acquire(Priority::Change).await;
        }
        let took = Instant::now() - start;
        // 100 more at 20/s: five seconds, give or take a token's rounding.
        assert!(
            took >= Duration::from_millis(4950) && took <= Duration::from_millis(5100),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_takers_share_one_budget() {
        let budget = Arc::new(Budget::new(10.0, 1));
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let budget = budget.clone();
            tasks.spawn(async move {
                for _ in 0..5 {
                    budget.acquire(Priority::Change).await;
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        let took = Instant::now() - start;
        // 20 requests, one free, 19 at 10/s.
        assert!(took >= Duration::from_millis(1850), "{took:?}");
        assert!(took <= Duration::from_millis(2100), "{took:?}");
    }

    /// Starts one waiter per priority (in the given order, each a little
    /// after the last) on an empty bucket; returns the order tokens went in.
    async fn grant_order(budget: Arc<Budget>, who: &[(Priority, &'static str)]) -> Vec<String> {
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = tokio::task::JoinSet::new();
        for (priority, name) in who.iter().copied() {
            let (budget, order) = (budget.clone(), order.clone());
            tasks.spawn(async move {
                budget.acquire(priority).await;
                order.lock().unwrap().push(name.to_string());
            });
            tokio::task::yield_now().await;
        }
        while tasks.join_next().await.is_some() {}
        let order = order.lock().unwrap().clone();
        order
    }

    #[tokio::test(start_paused = true)]
    async fn scarce_tokens_go_to_leases_then_changes_then_backlog_then_lists() {
        let budget = Arc::new(Budget::new(10.0, 1));
        budget.acquire(Priority::Change).await; // empty now
        let order = grant_order(
            budget,
            &[
                (Priority::List, "list"),
                (Priority::Backlog, "create-1"),
                (Priority::Change, "taint"),
                (Priority::Backlog, "create-2"),
                (Priority::Lease, "lease"),
            ],
        )
        .await;
        assert_eq!(order, ["lease", "taint", "create-1", "create-2", "list"]);
    }

    #[tokio::test(start_paused = true)]
    async fn leases_short_of_budget_still_leave_the_backlog_a_share() {
        let budget = Arc::new(Budget::new(100.0, 1));
        budget.acquire(Priority::Change).await;
        let mut who = vec![(Priority::Backlog, "create")];
        who.extend(std::iter::repeat_n((Priority::Lease, "lease"), 30));
        let order = grant_order(budget, &who).await;
        let at = order.iter().position(|n| n == "create").unwrap();
        assert_eq!(at, LEASE_RUN as usize, "{order:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_passes_its_turn_on() {
        let budget = Arc::new(Budget::new(1.0, 1));
        budget.acquire(Priority::Change).await;
        let first = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.acquire(Priority::Lease).await })
        };
        tokio::task::yield_now().await;
        let start = Instant::now();
        let second = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.acquire(Priority::Backlog).await })
        };
        tokio::task::yield_now().await;
        first.abort();
        second.await.unwrap();
        assert!(Instant::now() - start <= Duration::from_millis(1001));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_holds_every_token_back_and_ends_without_a_burst() {
        let budget = Budget::new(10.0, 10);
        let start = Instant::now();
        budget.pause_for(Duration::from_secs(3));
        assert!(budget.paused_until().is_some());
        budget.acquire(Priority::Lease).await;
        let first = Instant::now() - start;
        assert!(
            first >= Duration::from_secs(3) && first <= Duration::from_millis(3101),
            "{first:?}"
        );
        for _ in 0..9 {
            budget.acquire(Priority::Lease).await;
        }
        // No burst after the pause: the bucket refills at the rate.
        let all = Instant::now() - start;
        assert!(all >= Duration::from_millis(3900), "{all:?}");
        assert_eq!(budget.paused_until(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_can_change_while_requests_wait() {
        let budget = Arc::new(Budget::new(1.0, 1));
        budget.acquire(Priority::Change).await;
        let start = Instant::now();
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move {
                for _ in 0..10 {
                    budget.acquire(Priority::Change).await;
                }
            })
        };
        tokio::task::yield_now().await;
        budget.set_rate(100.0, 1);
        assert_eq!(budget.rate(), (100.0, 1));
        waiter.await.unwrap();
        assert!(Instant::now() - start <= Duration::from_millis(1200));
    }

    #[tokio::test(start_paused = true)]
    async fn at_rate_zero_a_waiter_waits_for_a_new_rate_without_spinning() {
        use std::future::Future;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let budget = Arc::new(Budget::new(0.0, 1));
        budget.acquire(Priority::Change).await; // the one token of the start
        let polls = Arc::new(AtomicUsize::new(0));
        let waiter = {
            let (budget, polls) = (budget.clone(), polls.clone());
            tokio::spawn(async move {
                let mut acquire = std::pin::pin!(budget.acquire(Priority::Change));
                std::future::poll_fn(|cx| {
                    polls.fetch_add(1, Ordering::Relaxed);
                    acquire.as_mut().poll(cx)
                })
                .await
            })
        };
        // Paused time moves on by itself to the next timer whenever the
        // runtime is idle: a waiter that slept and looked again would be
        // polled at every one of its wake-ups in these ten seconds.
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!waiter.is_finished(), "no token at rate 0");
        let polls_while_waiting = polls.load(Ordering::Relaxed);
        assert!(
            polls_while_waiting <= 2,
            "polled {polls_while_waiting} times"
        );
        let woken = Instant::now();
        budget.set_rate(10.0, 1);
        waiter.await.unwrap();
        let took = Instant::now() - woken;
        assert!(took <= Duration::from_millis(101), "{took:?}");
    }
}
