//! Leader election through a Lease, as kube-controller-manager does it
//! (`--leader-elect` and its `--leader-elect-*` flags): two controllers for
//! the same site never write to the API server at once, and a standby takes
//! over within the lease duration of the leader's last renewal.
//!
//! Expiry is judged on *this* process's clock, from when the lease record
//! was last seen to change, never by comparing the holder's `renewTime` with
//! our clock (the holder's clock may be off).

use std::time::Duration;

use ::kube::api::{Api, PostParams};
use ::kube::Client;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
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
    pub fn validate(&self) -> Result<(), String> {
        if self.lease_duration <= self.renew_deadline {
            return Err(
                "--leader-elect-lease-duration must be longer than --leader-elect-renew-deadline"
                    .into(),
            );
        }
        if self.renew_deadline <= self.retry_period {
            return Err(
                "--leader-elect-renew-deadline must be longer than --leader-elect-retry-period"
                    .into(),
            );
        }
        Ok(())
    }
}

/// What we last saw of the lease, and when (on our clock).
struct Observed {
    holder: Option<String>,
    renew: Option<MicroTime>,
    at: Instant,
}

/// Campaigns until `shutdown`, sending `true` while leading. Gives the lease
/// up on shutdown so a standby takes over at once.
pub async fn run(
    client: Client,
    config: LeaderConfig,
    leading: watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut observed: Option<Observed> = None;
    let mut last_renewal: Option<Instant> = None;
    let mut last_warned: Option<Instant> = None;
    loop {
        let result = tokio::time::timeout(
            config.renew_deadline,
            try_acquire_or_renew(&api, &config, &mut observed),
        )
        .await
        .unwrap_or_else(|_| Err("no answer from the API server".into()));
        let now = Instant::now();
        match result {
            Ok(true) => {
                if !*leading.borrow() {
                    tracing::info!(identity = %config.identity, lease = %format!("{}/{}", config.namespace, config.name), "became the leader");
                }
                last_renewal = Some(now);
                leading.send_if_modified(|l| !std::mem::replace(l, true));
            }
            Ok(false) => {
                last_renewal = None;
                leading.send_if_modified(|l| std::mem::replace(l, false));
            }
            Err(e) => {
                let expired = last_renewal.is_none_or(|t| now - t >= config.renew_deadline);
                if *leading.borrow() && expired {
                    tracing::error!("lost the leader lease: {e}");
                    leading.send_replace(false);
                } else if last_warned.is_none_or(|t| now - t >= WARN_PERIOD) {
                    // An outage fails every try; say so now and then, not every retry period.
                    tracing::warn!("leader election: {e}");
                    last_warned = Some(now);
                } else {
                    tracing::debug!("leader election: {e}");
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
        if let Err(e) = release(&api, &config).await {
            tracing::warn!(
                "could not give up the leader lease: {e}; the standby takes over when it expires"
            );
        }
    }
}

async fn try_acquire_or_renew(
    api: &Api<Lease>,
    config: &LeaderConfig,
    observed: &mut Option<Observed>,
) -> Result<bool, String> {
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
    let current = api.get_opt(&config.name).await.map_err(|e| e.to_string())?;
    let Some(current) = current else {
        return match api.create(&pp, &mine(None, Some(0), None)).await {
            Ok(_) => Ok(true),
            Err(::kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e.to_string()),
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
            return Ok(false);
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
        Ok(_) => Ok(true),
        // Someone else wrote it first.
        Err(::kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// Gives the lease up: no holder, so a standby acquires it on its next try.
async fn release(api: &Api<Lease>, config: &LeaderConfig) -> Result<(), String> {
    let mut current = api
        .get_opt(&config.name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the lease is gone")?;
    let spec = current.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(MicroTime(crate::model::Micros::now().timestamp()));
    api.replace(&config.name, &PostParams::default(), &current)
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}
