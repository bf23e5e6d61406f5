//! Leader election through a Lease, as kube-controller-manager does it
//! (`--leader-elect` and its `--leader-elect-*` flags): two controllers for
//! the same site never write to the API server at once, and a standby takes
//! over within the lease duration of the leader's last renewal.
//!
//! Expiry is judged on *this* process's clock, from when the lease record
//! was last seen to change, never by comparing the holder's `renewTime` with
//! our clock (the holder's clock may be off).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Failed tries are logged as warnings at most this often.
const WARN_PERIOD: Duration = Duration::from_secs(10);

/// The election's Lease and timing.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub namespace: String,
    pub name: String,
    /// Who we are in `holderIdentity`: host name and controller instance.
    pub identity: String,
    /// How long a leader's last renewal holds off the others.
    pub lease_duration: Duration,
    /// A leader that has not renewed for this long steps down.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl LeaderConfig {
    pub fn new(identity: String) -> LeaderConfig {
        LeaderConfig {
            namespace: "kube-system".into(),
            name: "nodekeeper".into(),
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// The durations must nest as kube-controller-manager requires.
    pub fn validate(&self) -> Result<(), LeaderConfigError> {
        if self.lease_duration <= self.renew_deadline {
            return Err(LeaderConfigError::LeaseNotLongerThanRenewDeadline {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
            });
        }
        if self.renew_deadline <= self.retry_period {
            return Err(LeaderConfigError::RenewDeadlineNotLongerThanRetry {
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
        Ok(())
    }
}

/// Why a leader-election configuration is refused: its durations do not nest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaderConfigError {
    #[error(
        "--leader-elect-lease-duration must be longer than --leader-elect-renew-deadline \
         ({lease_duration:?} is not longer than {renew_deadline:?})"
    )]
    LeaseNotLongerThanRenewDeadline {
        lease_duration: Duration,
        renew_deadline: Duration,
    },
    #[error(
        "--leader-elect-renew-deadline must be longer than --leader-elect-retry-period \
         ({renew_deadline:?} is not longer than {retry_period:?})"
    )]
    RenewDeadlineNotLongerThanRetry {
        renew_deadline: Duration,
        retry_period: Duration,
    },
}

/// Why one try to acquire, renew or give up the lease failed.
#[derive(Debug, thiserror::Error)]
enum ElectionError {
    /// The try was cut off at the renew deadline.
    #[error(
        "no answer from the API server within the renew deadline (--leader-elect-renew-deadline)"
    )]
    NoAnswer,
    #[error("cannot read the lease: {0}")]
    Read(#[source] kube::Error),
    #[error("cannot write the lease: {0}")]
    Write(#[source] kube::Error),
    /// Deleted while we held it: there is nothing to give up.
    #[error("the lease is gone")]
    LeaseGone,
}

/// What we last saw of the lease, and when (on our clock).
struct Observed {
    holder: Option<String>,
    renew: Option<MicroTime>,
    at: Instant,
}

/// What one try to acquire or renew the lease came to.
enum Tried {
    /// We hold the lease, written just now.
    Holding,
    /// Another holder's lease, not expired: stand by.
    HeldByOther,
    /// Someone wrote the lease between our read and our write: nothing is
    /// known until the next try reads it again.
    Conflict,
}

/// Campaigns until `shutdown`, sending `true` while leading. Gives the lease
/// up on shutdown so a standby takes over at once.
///
/// A leader steps down when it has not renewed for the renew deadline: each
/// try is cut off at that deadline, so an API server that stops answering
/// cannot keep a leader past it (the others take over a lease duration
/// after its last renewal, which is longer).
pub async fn run(
    client: Client,
    config: LeaderConfig,
    leading: watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut observed: Option<Observed> = None;
    // When the last successful renewal was sent.
    let mut last_renewal: Option<Instant> = None;
    let mut last_warned: Option<Instant> = None;
    loop {
        let started = Instant::now();
        // A leader's try ends with its renew deadline, whatever the API server does.
        let deadline = match last_renewal {
            Some(t) if *leading.borrow() => t + config.renew_deadline,
            _ => started + config.renew_deadline,
        };
        let result =
            tokio::time::timeout_at(deadline, try_acquire_or_renew(&api, &config, &mut observed))
                .await
                .unwrap_or(Err(ElectionError::NoAnswer));
        let now = Instant::now();
        match result {
            Ok(Tried::Holding) => {
                if !*leading.borrow() {
                    tracing::info!(identity = %config.identity, lease = %format!("{}/{}", config.namespace, config.name), "became the leader");
                }
                last_renewal = Some(started);
                leading.send_if_modified(|l| !std::mem::replace(l, true));
            }
            Ok(Tried::HeldByOther) => {
                if *leading.borrow() {
                    tracing::warn!(
                        "the leader lease is held by another: writes to the API server stop"
                    );
                }
                last_renewal = None;
                leading.send_if_modified(|l| std::mem::replace(l, false));
            }
            Ok(Tried::Conflict) => {
                tracing::debug!("leader election: the lease was written by another meanwhile");
                step_down_past_deadline(
                    &leading,
                    last_renewal,
                    now,
                    &config,
                    "the lease changed under us",
                );
            }
            Err(e) => {
                if !step_down_past_deadline(&leading, last_renewal, now, &config, &e.to_string()) {
                    if last_warned.is_none_or(|t| now - t >= WARN_PERIOD) {
                        // An outage fails every try; say so now and then, not every retry period.
                        tracing::warn!("leader election: {e}");
                        last_warned = Some(now);
                    } else {
                        tracing::debug!("leader election: {e}");
                    }
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(config.retry_period) => {}
        }
    }
    if *leading.borrow() {
        leading.send_replace(false);
        let released = tokio::time::timeout(config.renew_deadline, release(&api, &config))
            .await
            .unwrap_or(Err(ElectionError::NoAnswer));
        if let Err(e) = released {
            tracing::warn!(
                "could not give up the leader lease: {e}; the standby takes over when it expires"
            );
        }
    }
}

/// A leader whose last renewal is a renew deadline old steps down; says
/// whether it did.
fn step_down_past_deadline(
    leading: &watch::Sender<bool>,
    last_renewal: Option<Instant>,
    now: Instant,
    config: &LeaderConfig,
    why: &str,
) -> bool {
    let expired = last_renewal.is_none_or(|t| now - t >= config.renew_deadline);
    if *leading.borrow() && expired {
        tracing::error!("lost the leader lease: {why}");
        leading.send_replace(false);
        return true;
    }
    false
}

async fn try_acquire_or_renew(
    api: &Api<Lease>,
    config: &LeaderConfig,
    observed: &mut Option<Observed>,
) -> Result<Tried, ElectionError> {
    let now = MicroTime(crate::model::Micros::now().timestamp());
    let mine = |acquire: Option<MicroTime>, transitions: Option<i32>, rv: Option<String>| Lease {
        metadata: ObjectMeta {
            name: Some(config.name.clone()),
            namespace: Some(config.namespace.clone()),
            resource_version: rv,
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(config.identity.clone()),
            lease_duration_seconds: Some(config.lease_duration.as_secs().max(1) as i32),
            acquire_time: acquire.or(Some(now.clone())),
            renew_time: Some(now.clone()),
            lease_transitions: transitions,
            ..LeaseSpec::default()
        }),
    };
    let pp = PostParams::default();
    let current = api
        .get_opt(&config.name)
        .await
        .map_err(ElectionError::Read)?;
    let Some(current) = current else {
        return match api.create(&pp, &mine(None, Some(0), None)).await {
            Ok(_) => Ok(Tried::Holding),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Tried::Conflict),
            Err(e) => Err(ElectionError::Write(e)),
        };
    };
    let spec = current.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let changed = observed
        .as_ref()
        .is_none_or(|o| o.holder != holder || o.renew != spec.renew_time);
    if changed {
        *observed = Some(Observed {
            holder: holder.clone(),
            renew: spec.renew_time.clone(),
            at: Instant::now(),
        });
    }
    let held_by_me = holder.as_deref() == Some(config.identity.as_str());
    if let (Some(_), false) = (&holder, held_by_me) {
        let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(1) as u64);
        let seen = observed.as_ref().map_or_else(Instant::now, |o| o.at);
        if seen.elapsed() < duration {
            return Ok(Tried::HeldByOther);
        }
        tracing::warn!(previous = ?holder, "the leader lease expired; taking over");
    }
    let (acquire, transitions) = if held_by_me {
        (spec.acquire_time, spec.lease_transitions)
    } else {
        (None, Some(spec.lease_transitions.unwrap_or(0) + 1))
    };
    match api
        .replace(
            &config.name,
            &pp,
            &mine(acquire, transitions, current.metadata.resource_version),
        )
        .await
    {
        Ok(_) => Ok(Tried::Holding),
        // Someone else wrote it first.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Tried::Conflict),
        Err(e) => Err(ElectionError::Write(e)),
    }
}

/// Gives the lease up: no holder, so a standby acquires it on its next try.
async fn release(api: &Api<Lease>, config: &LeaderConfig) -> Result<(), ElectionError> {
    let mut current = api
        .get_opt(&config.name)
        .await
        .map_err(ElectionError::Read)?
        .ok_or(ElectionError::LeaseGone)?;
    let spec = current.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(MicroTime(crate::model::Micros::now().timestamp()));
    api.replace(&config.name, &PostParams::default(), &current)
        .await
        .map_err(ElectionError::Write)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mirror::ApiServer;
    use nodekeeper_sim::apiserver::{FakeApiServer, Fault, ObjectKey};
    use serde_json::{json, Value};
    use tokio::task::JoinHandle;

    const LEASE: Duration = Duration::from_secs(15);
    const DEADLINE: Duration = Duration::from_secs(10);
    const RETRY: Duration = Duration::from_secs(2);

    /// One campaigning controller.
    struct Candidate {
        leading: watch::Receiver<bool>,
        stop: CancellationToken,
        task: JoinHandle<()>,
    }

    impl Candidate {
        async fn start(server: &FakeApiServer, identity: &str) -> Candidate {
            crate::install_crypto_provider();
            let connection = ApiServer::Master(server.url())
                .connect(DEADLINE)
                .await
                .expect("a client for the in-process API server");
            let config = LeaderConfig {
                lease_duration: LEASE,
                renew_deadline: DEADLINE,
                retry_period: RETRY,
                ..LeaderConfig::new(identity.into())
            };
            let (sender, leading) = watch::channel(false);
            let stop = CancellationToken::new();
            let task = tokio::spawn(run(connection.client, config, sender, stop.clone()));
            Candidate {
                leading,
                stop,
                task,
            }
        }

        /// Waits (on paused time) until leading is `want`; when it became so.
        async fn until(&mut self, want: bool, within: Duration) -> Instant {
            tokio::time::timeout(within, self.leading.wait_for(|l| *l == want))
                .await
                .unwrap_or_else(|_| panic!("leading did not become {want} within {within:?}"))
                .expect("the elector keeps its channel");
            Instant::now()
        }

        /// Whether leading stayed as it was for `period`.
        async fn steady_for(&mut self, period: Duration) -> bool {
            self.leading.borrow_and_update();
            tokio::time::sleep(period).await;
            !self.leading.has_changed().expect("the elector runs")
        }

        fn is_leading(&self) -> bool {
            *self.leading.borrow()
        }

        async fn stop(self) {
            self.stop.cancel();
            self.task.await.expect("the elector ends cleanly");
        }
    }

    fn spec(server: &FakeApiServer) -> Value {
        server
            .lease("kube-system", "nodekeeper")
            .expect("the lease exists")["spec"]
            .clone()
    }

    /// Another controller's renewal, the `n`th.
    fn renewed_by(server: &FakeApiServer, holder: &str, n: u32) {
        server.put_lease(json!({
            "metadata": {"name": "nodekeeper", "namespace": "kube-system"},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": LEASE.as_secs(),
                "renewTime": format!("2026-01-01T00:{:02}:{:02}.000000Z", n / 60, n % 60),
                "leaseTransitions": 3,
            }
        }));
    }

    #[test]
    fn durations_that_do_not_nest_are_told_apart() {
        let config = |lease, renew, retry| LeaderConfig {
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
            ..LeaderConfig::new("a".into())
        };
        assert_eq!(config(15, 10, 2).validate(), Ok(()));
        let e = config(10, 10, 2).validate().unwrap_err();
        assert!(
            matches!(e, LeaderConfigError::LeaseNotLongerThanRenewDeadline { .. }),
            "{e:?}"
        );
        assert!(e.to_string().starts_with(
            "--leader-elect-lease-duration must be longer than --leader-elect-renew-deadline (10s"
        ));
        let e = config(15, 2, 2).validate().unwrap_err();
        assert!(
            matches!(e, LeaderConfigError::RenewDeadlineNotLongerThanRetry { .. }),
            "{e:?}"
        );
    }

    /// The lease API of a client for `server`.
    async fn lease_api(server: &FakeApiServer) -> Api<Lease> {
        crate::install_crypto_provider();
        let connection = ApiServer::Master(server.url())
            .connect(DEADLINE)
            .await
            .expect("a client for the in-process API server");
        Api::namespaced(connection.client, "kube-system")
    }

    #[tokio::test(start_paused = true)]
    async fn tries_fail_with_what_went_wrong() {
        let server = FakeApiServer::start().await;
        let api = lease_api(&server).await;
        let config = LeaderConfig::new("me".into());
        let e = release(&api, &config).await.unwrap_err();
        assert!(matches!(e, ElectionError::LeaseGone), "{e:?}");
        let mut observed = None;
        assert!(matches!(
            try_acquire_or_renew(&api, &config, &mut observed).await,
            Ok(Tried::Holding)
        ));
        server.set_fault(Fault::Status(403));
        let e = try_acquire_or_renew(&api, &config, &mut observed)
            .await
            .err()
            .expect("a refused read fails the try");
        assert!(matches!(e, ElectionError::Read(_)), "{e:?}");
        let e = release(&api, &config).await.unwrap_err();
        assert!(matches!(e, ElectionError::Read(_)), "{e:?}");
        server.set_fault(Fault::None);
        server.conflict_next(ObjectKey::lease("kube-system", "nodekeeper"), 1);
        assert!(matches!(
            try_acquire_or_renew(&api, &config, &mut observed).await,
            Ok(Tried::Conflict)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_lease_is_acquired_and_kept_renewed() {
        let server = FakeApiServer::start().await;
        let mut a = Candidate::start(&server, "a").await;
        a.until(true, RETRY).await;
        assert_eq!(spec(&server)["holderIdentity"], "a");
        assert_eq!(spec(&server)["leaseTransitions"], 0);
        assert_eq!(spec(&server)["leaseDurationSeconds"], LEASE.as_secs());
        let version = server.resource_version();
        assert!(a.steady_for(LEASE * 4).await, "leads throughout");
        // Renewed every retry period, at least.
        assert!(server.resource_version() >= version + 25, "renewed");
        a.stop().await;
        assert_eq!(spec(&server)["holderIdentity"], Value::Null, "given up");
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_lease_is_taken_only_once_it_expired() {
        let server = FakeApiServer::start().await;
        renewed_by(&server, "other", 0);
        let mut a = Candidate::start(&server, "a").await;
        // The other holder renews every 5 s for a minute: a stands by.
        for n in 1..=12 {
            assert!(a.steady_for(Duration::from_secs(5)).await);
            assert!(!a.is_leading());
            renewed_by(&server, "other", n);
        }
        // It stops: a takes over one lease duration after it saw the last
        // renewal, which it sees within a retry period.
        let last = Instant::now();
        let took = a.until(true, LEASE + RETRY * 2).await - last;
        assert!(took >= LEASE && took <= LEASE + RETRY * 2, "{took:?}");
        assert_eq!(spec(&server)["holderIdentity"], "a");
        assert_eq!(spec(&server)["leaseTransitions"], 4);
        a.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_leader_steps_down_when_another_holder_took_the_lease() {
        let server = FakeApiServer::start().await;
        let mut a = Candidate::start(&server, "a").await;
        a.until(true, RETRY).await;
        // Another controller judged a's lease expired and took it.
        let taken = Instant::now();
        renewed_by(&server, "b", 1);
        let gone = a.until(false, RETRY * 2).await - taken;
        assert!(gone <= RETRY, "stepped down at its next try: {gone:?}");
        // b is not seen renewing, but a waits out b's lease before it takes it back.
        assert!(a.steady_for(LEASE - RETRY * 2).await);
        assert!(!a.is_leading());
        a.until(true, RETRY * 3).await;
        a.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_takes_over_at_once_from_a_leader_that_gave_the_lease_up() {
        let server = FakeApiServer::start().await;
        let mut a = Candidate::start(&server, "a").await;
        a.until(true, RETRY).await;
        let mut b = Candidate::start(&server, "b").await;
        assert!(b.steady_for(LEASE * 2).await, "a keeps it renewed");
        assert!(!b.is_leading());
        let stopped = Instant::now();
        a.stop().await;
        let took = b.until(true, RETRY * 2).await - stopped;
        assert!(took <= RETRY, "{took:?}");
        assert_eq!(spec(&server)["leaseTransitions"], 1);
        b.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_failing_past_the_deadline_step_down_in_time() {
        let server = FakeApiServer::start().await;
        let mut a = Candidate::start(&server, "a").await;
        // Renewed when it became the leader: the deadline runs from here.
        let renewed = a.until(true, RETRY).await;
        server.set_fault(Fault::Status(500));
        let down = a.until(false, DEADLINE * 2).await - renewed;
        assert!(down > DEADLINE - RETRY && down <= DEADLINE, "{down:?}");

        // An API server that stops answering does not keep a leader past it.
        server.set_fault(Fault::None);
        let renewed = a.until(true, RETRY * 2).await;
        server.set_fault(Fault::Slow(Duration::from_secs(3600)));
        let down = a.until(false, DEADLINE * 2).await - renewed;
        assert!(down > DEADLINE - RETRY && down <= DEADLINE, "{down:?}");
        server.set_fault(Fault::None);
        a.until(true, RETRY * 2).await;
        a.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_conflicting_write_is_not_taken_for_a_lost_lease() {
        let server = FakeApiServer::start().await;
        let mut a = Candidate::start(&server, "a").await;
        a.until(true, RETRY).await;
        server.conflict_next(ObjectKey::lease("kube-system", "nodekeeper"), 2);
        assert!(a.steady_for(LEASE).await, "still leading, no flap");
        assert!(a.is_leading());
        a.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_api_server_going_away_and_coming_back() {
        let server = FakeApiServer::start().await;
        let mut a = Candidate::start(&server, "a").await;
        a.until(true, RETRY).await;
        // Away for less than the deadline: still the leader, no flap.
        server.set_fault(Fault::Down);
        server.settled().await;
        assert!(a.steady_for(DEADLINE / 2).await);
        server.set_fault(Fault::None);
        server.settled().await;
        assert!(a.steady_for(LEASE).await);
        assert!(a.is_leading());

        // Away for longer: it steps down, and leads again once it is back.
        server.set_fault(Fault::Down);
        server.settled().await;
        a.until(false, DEADLINE + RETRY).await;
        assert!(a.steady_for(LEASE * 2).await, "nothing to lead meanwhile");
        server.set_fault(Fault::None);
        server.settled().await;
        a.until(true, RETRY * 2).await;
        assert_eq!(spec(&server)["holderIdentity"], "a");

        // Back empty, its versions started over: the lease is created again.
        server.restart_empty().await;
        assert!(a.steady_for(LEASE).await, "leads throughout");
        assert_eq!(spec(&server)["holderIdentity"], "a");
        a.stop().await;
    }
}
