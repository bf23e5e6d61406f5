//! systemd's service notifications (`sd_notify`): `READY=1` once the
//! controller has decided every node once, `WATCHDOG=1` while its passes keep
//! finishing, `STOPPING=1` at shutdown, and a one-line `STATUS=`. Does nothing
//! outside systemd (no `NOTIFY_SOCKET`).

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::model::ConditionStatus;
use crate::readiness::{Checks, Health, Verdict};
use crate::view::View;

/// The `/readyz` checks the controller's passes keep (see
/// [`crate::controller::Controller::report_readiness`]): `READY=1` waits until
/// every one of them has finished once, and `WATCHDOG=1` is sent only while
/// they all keep finishing.
pub const PASS_CHECKS: [&str; 2] = ["probe-sweep", "monitor-pass"];

/// How often the passes are looked at (more often under a short watchdog).
const LOOK_EVERY: Duration = Duration::from_millis(200);
/// How often the status line is worked out again.
const STATUS_EVERY: Duration = Duration::from_secs(1);

/// Where notifications go, if anywhere.
#[derive(Debug, Default)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// The notifier systemd asked for through `NOTIFY_SOCKET` (and
    /// `WATCHDOG_USEC`, when `WATCHDOG_PID` is unset or this process).
    pub fn from_env() -> Notifier {
        let socket = std::env::var_os("NOTIFY_SOCKET");
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|usec| usec.parse::<u64>().ok())
            .filter(|usec| *usec > 0)
            .filter(|_| {
                std::env::var("WATCHDOG_PID")
                    .map_or(true, |pid| pid.parse() == Ok(std::process::id()))
            })
            .map(Duration::from_micros);
        let mut notifier = match socket {
            Some(path) => Notifier::to(&path.to_string_lossy()),
            None => Notifier::default(),
        };
        notifier.watchdog = watchdog;
        notifier
    }

    /// A notifier sending to `path` (`@name` for an abstract socket).
    pub fn to(path: &str) -> Notifier {
        let address = match path.strip_prefix('@') {
            Some(name) => abstract_address(name.as_bytes()),
            None => SocketAddr::from_pathname(path),
        };
        let target = match (UnixDatagram::unbound(), address) {
            (Ok(socket), Ok(address)) => {
                // A full socket buffer must never block the caller.
                let _ = socket.set_nonblocking(true);
                Some((socket, address))
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!("NOTIFY_SOCKET {path:?} cannot be used: {e}; systemd will not hear from nodekeeper");
                None
            }
        };
        Notifier {
            target,
            watchdog: None,
        }
    }

    /// Whether anyone listens.
    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// How often to send `WATCHDOG=1`: half of `WatchdogSec=`, as systemd advises.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog.map(|d| d / 2)
    }

    /// The service is up and has decided every node once.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// The controller is still deciding.
    pub fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }

    /// A one-line status for `systemctl status`.
    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={}", one_line(status)));
    }

    /// The service is stopping.
    pub fn stopping(&self) {
        self.send("STOPPING=1");
    }

    fn send(&self, message: &str) {
        let Some((socket, address)) = &self.target else {
            return;
        };
        if let Err(e) = socket.send_to_addr(message.as_bytes(), address) {
            tracing::debug!("sd_notify {message:?} failed: {e}");
        }
    }
}

/// Whether the controller's passes keep finishing: `Err` with the reason
/// when one of them has not finished yet or is late.
pub fn passes(ready: &Checks) -> Verdict {
    let results = ready.results_of(&PASS_CHECKS);
    if results.is_empty() {
        return Err("the controller reports no passes".into());
    }
    results.into_iter().try_for_each(|r| r.verdict)
}

/// The status line: how many nodes, how many Ready.
pub fn node_counts(view: &View) -> String {
    let (nodes, ready) = view.with_nodes(|nodes| {
        nodes.fold((0usize, 0usize), |(n, r), node| {
            (
                n + 1,
                r + usize::from(node.ready() == ConditionStatus::True),
            )
        })
    });
    let plural = if nodes == 1 { "" } else { "s" };
    format!("{nodes} node{plural}, {ready} Ready")
}

/// Keeps systemd informed until `stop`: `READY=1` once every pass of the
/// controller has finished once, `WATCHDOG=1` every half `WatchdogSec=`
/// only while the passes keep finishing (a stalled controller goes quiet and
/// systemd restarts it), and `STATUS=` with `status` when it changes.
pub async fn keep_informed(
    notifier: Arc<Notifier>,
    health: Arc<Health>,
    status: impl Fn() -> String + Send + 'static,
    stop: CancellationToken,
) {
    let ping_every = notifier.watchdog_interval();
    let look_every = ping_every
        .map_or(LOOK_EVERY, |every| (every / 4).min(LOOK_EVERY))
        .max(Duration::from_millis(1));
    let mut ticks = tokio::time::interval(look_every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut state = State::Starting;
    let mut last_ping: Option<Instant> = None;
    // What STATUS= said last, and when.
    let mut said: Option<(Instant, String)> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let now = Instant::now();
        let verdict = passes(&health.ready);
        if verdict.is_ok() {
            if let Some(every) = ping_every {
                if last_ping.is_none_or(|at| now.saturating_duration_since(at) >= every) {
                    notifier.watchdog();
                    last_ping = Some(now);
                }
            }
        }
        let was = state;
        state = match (&verdict, was) {
            (Ok(()), _) => State::Deciding,
            (Err(_), State::Starting) => State::Starting,
            (Err(_), _) => State::Stalled,
        };
        let due = said
            .as_ref()
            .is_none_or(|(at, _)| now.saturating_duration_since(*at) >= STATUS_EVERY);
        if state == was && !due {
            continue;
        }
        let line = match &verdict {
            Ok(()) => status(),
            Err(reason) if state == State::Stalled => format!("stalled: {reason}"),
            Err(reason) => format!("starting: {reason}"),
        };
        match (was, state) {
            (State::Starting, State::Deciding) => notifier.ready(&line),
            _ if said.as_ref().is_some_and(|(_, last)| *last == line) => {}
            _ => notifier.status(&line),
        }
        match (was, state) {
            (State::Deciding, State::Stalled) => {
                tracing::warn!("{line}; systemd's watchdog is no longer fed")
            }
            (State::Stalled, State::Deciding) => {
                tracing::info!(
                    "the controller's passes finish again; systemd's watchdog is fed again"
                )
            }
            _ => {}
        }
        said = Some((now, line));
    }
}

/// Where the controller stands, as systemd is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No pass of every kind has finished yet: not ready.
    Starting,
    /// Every kind of pass finished within its time: ready, watchdog fed.
    Deciding,
    /// A pass is late: no watchdog pings.
    Stalled,
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

#[cfg(target_os = "linux")]
fn abstract_address(name: &[u8]) -> std::io::Result<SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    SocketAddr::from_abstract_name(name)
}

#[cfg(not(target_os = "linux"))]
fn abstract_address(_: &[u8]) -> std::io::Result<SocketAddr> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "abstract sockets exist only on Linux",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(socket: &UnixDatagram) -> String {
        let mut buf = [0u8; 512];
        let n = socket.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn messages_reach_the_socket_systemd_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let systemd = UnixDatagram::bind(&path).unwrap();
        let notifier = Notifier::to(path.to_str().unwrap());
        assert!(notifier.is_enabled());
        notifier.ready("12 nodes\nready");
        assert_eq!(received(&systemd), "READY=1\nSTATUS=12 nodes ready");
        notifier.watchdog();
        assert_eq!(received(&systemd), "WATCHDOG=1");
        notifier.stopping();
        assert_eq!(received(&systemd), "STOPPING=1");
    }

    #[test]
    fn abstract_sockets_work_too() {
        let name = format!("nodekeeper-notify-test-{}", std::process::id());
        let systemd = UnixDatagram::bind_addr(&abstract_address(name.as_bytes()).unwrap()).unwrap();
        Notifier::to(&format!("@{name}")).status("starting");
        assert_eq!(received(&systemd), "STATUS=starting");
    }

    /// Everything the socket holds now.
    fn drain(socket: &UnixDatagram) -> Vec<String> {
        let mut messages = Vec::new();
        let mut buf = [0u8; 512];
        while let Ok(n) = socket.recv(&mut buf) {
            messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        messages
    }

    fn pings(messages: &[String]) -> usize {
        messages.iter().filter(|m| *m == "WATCHDOG=1").count()
    }

    #[tokio::test(start_paused = true)]
    async fn ready_after_every_pass_and_the_watchdog_only_while_they_finish() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let systemd = UnixDatagram::bind(&path).unwrap();
        systemd.set_nonblocking(true).unwrap();
        let notifier = Arc::new(Notifier {
            watchdog: Some(Duration::from_secs(2)),
            ..Notifier::to(path.to_str().unwrap())
        });
        assert_eq!(notifier.watchdog_interval(), Some(Duration::from_secs(1)));
        let health = Health::new();
        let sweep =
            health
                .ready
                .register_recurring("probe-sweep", "probe sweep", Duration::from_secs(5));
        let monitor =
            health
                .ready
                .register_recurring("monitor-pass", "monitor pass", Duration::from_secs(5));
        let stop = CancellationToken::new();
        let task = tokio::spawn(keep_informed(
            notifier,
            health.clone(),
            || "3 nodes, 2 Ready".to_string(),
            stop.clone(),
        ));

        // Nothing has finished: not ready, no pings.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let said = drain(&systemd);
        assert_eq!(said, ["STATUS=starting: no probe sweep has finished yet"]);
        // One kind of pass is not enough: the sweep decides Ready.
        monitor.done();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let said = drain(&systemd);
        assert!(said.iter().all(|m| !m.starts_with("READY")), "{said:?}");
        assert_eq!(pings(&said), 0, "{said:?}");

        sweep.done();
        monitor.done();
        tokio::time::sleep(Duration::from_millis(250)).await;
        let said = drain(&systemd);
        assert_eq!(said, ["WATCHDOG=1", "READY=1\nSTATUS=3 nodes, 2 Ready"]);

        // Passes keep finishing: a ping every second.
        for _ in 0..4 {
            sweep.done();
            monitor.done();
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let said = drain(&systemd);
        assert!((3..=5).contains(&pings(&said)), "{said:?}");
        assert!(
            said.iter().all(|m| !m.starts_with("READY")),
            "READY once: {said:?}"
        );

        // The sweep stalls: pings stop once it is late, and the status says why.
        for _ in 0..10 {
            monitor.done();
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let said = drain(&systemd);
        let stalled_at = said
            .iter()
            .position(|m| m.starts_with("STATUS=stalled: the last probe sweep finished"))
            .unwrap_or_else(|| panic!("no stalled status: {said:?}"));
        assert_eq!(pings(&said[stalled_at..]), 0, "{said:?}");
        // Fed until the sweep is 5 s late, at most once a second.
        assert!(pings(&said[..stalled_at]) <= 5, "{said:?}");
        for _ in 0..5 {
            monitor.done();
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert_eq!(pings(&drain(&systemd)), 0);

        // It finishes again: pings again, and the status is the node count.
        sweep.done();
        monitor.done();
        tokio::time::sleep(Duration::from_millis(250)).await;
        let said = drain(&systemd);
        assert_eq!(said, ["WATCHDOG=1", "STATUS=3 nodes, 2 Ready"]);

        stop.cancel();
        task.await.unwrap();
    }

    #[test]
    fn passes_need_every_pass_check_and_ignore_the_others() {
        let checks = Checks::default();
        assert_eq!(
            passes(&checks),
            Err("the controller reports no passes".into())
        );
        checks.register("store").fail("disk full");
        let monitor =
            checks.register_recurring("monitor-pass", "monitor pass", Duration::from_secs(5));
        assert_eq!(
            passes(&checks),
            Err("no monitor pass has finished yet".into())
        );
        monitor.done();
        // The store's trouble is /readyz's business, not the watchdog's.
        assert_eq!(passes(&checks), Ok(()));
    }

    #[test]
    fn without_systemd_nothing_is_sent_and_nothing_fails() {
        let notifier = Notifier::default();
        assert!(!notifier.is_enabled());
        notifier.ready("x");
        notifier.watchdog();
        assert_eq!(notifier.watchdog_interval(), None);
        // A socket nobody listens on: a send error is swallowed.
        Notifier::to("/nonexistent/notify").ready("x");
    }
}
