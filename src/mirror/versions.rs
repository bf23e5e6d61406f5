//! Noticing an API server that started its resourceVersions over (restored
//! from an empty backup, or a new cluster at the same address).
//!
//! A write is committed at a resourceVersion above every version committed
//! before it, so a write sent after another's answer came back is answered
//! with a higher version. One answered lower means the versions started over:
//! the list the watch would resume from describes a server that is gone, and
//! a watch from its version may well be accepted by the new one and never
//! say what the new one lacks. The watcher lists again instead.
//!
//! Only writes are compared: reads may be served from a cache a little
//! behind, writes never are. Versions are opaque strings to Kubernetes;
//! ones that are not numbers are ignored.

use std::sync::Mutex;

use tokio::sync::watch;

/// The highest resourceVersion a write was answered with, and how many
/// restarts were noticed.
pub(crate) struct ServerVersions {
    floor: Mutex<Option<u64>>,
    restarts: watch::Sender<u64>,
}

/// Taken before a write is sent: the highest version answered then, and
/// the restarts noticed then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Floor {
    version: Option<u64>,
    restarts: u64,
}

impl Default for ServerVersions {
    fn default() -> Self {
        ServerVersions {
            floor: Mutex::new(None),
            restarts: watch::Sender::new(0),
        }
    }
}

impl ServerVersions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<u64>> {
        self.floor.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The floor a write about to be sent must stay above.
    pub(crate) fn floor(&self) -> Floor {
        let floor = self.lock();
        Floor {
            version: *floor,
            restarts: *self.restarts.borrow(),
        }
    }

    /// A write sent at `before` was answered at `version`; returns whether
    /// this shows the API server started its versions over.
    pub(crate) fn written(&self, before: Floor, version: Option<&str>) -> bool {
        let Some(version) = version.and_then(|v| v.parse::<u64>().ok()) else {
            return false;
        };
        let mut floor = self.lock();
        if before.restarts != *self.restarts.borrow() {
            // Sent before the last restart was noticed: answered by either
            // server, it says nothing about the one there now.
            return false;
        }
        let restarted = started_over(before, version);
        *floor = if restarted {
            Some(version)
        } else {
            Some(floor.map_or(version, |f| f.max(version)))
        };
        if restarted {
            // Under the lock: a floor taken meanwhile sees both or neither.
            self.restarts.send_modify(|n| *n += 1);
        }
        restarted
    }

    /// Changes whenever a restart is noticed.
    pub(crate) fn restarts(&self) -> watch::Receiver<u64> {
        self.restarts.subscribe()
    }
}

/// Whether a write sent at `before` and answered at `version` shows the
/// versions started over. Equal is not lower: the same version can be
/// answered twice (a write that changed nothing).
fn started_over(before: Floor, version: u64) -> bool {
    before.version.is_some_and(|floor| version < floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_that_go_up_are_no_restart() {
        let versions = ServerVersions::default();
        let restarts = versions.restarts();
        assert!(!versions.written(versions.floor(), Some("5")));
        assert!(!versions.written(versions.floor(), Some("9")));
        assert!(!versions.written(versions.floor(), Some("9")), "no change");
        assert_eq!(versions.floor().version, Some(9));
        assert!(!restarts.has_changed().unwrap());
    }

    #[test]
    fn answers_overtaking_each_other_are_no_restart() {
        let versions = ServerVersions::default();
        versions.written(versions.floor(), Some("10"));
        // Two writes in flight at once, answered 12 and 11, in that order.
        let first = versions.floor();
        let second = versions.floor();
        assert!(!versions.written(first, Some("12")));
        assert!(!versions.written(second, Some("11")));
        assert_eq!(versions.floor().version, Some(12));
    }

    #[test]
    fn a_write_answered_below_an_earlier_answer_is_a_restart() {
        let versions = ServerVersions::default();
        let mut restarts = versions.restarts();
        versions.written(versions.floor(), Some("300"));
        assert!(versions.written(versions.floor(), Some("4")));
        assert!(restarts.has_changed().unwrap());
        assert_eq!(*restarts.borrow_and_update(), 1);
        // The new server's versions are the floor now.
        assert_eq!(versions.floor().version, Some(4));
        assert!(!versions.written(versions.floor(), Some("5")));
        assert!(!restarts.has_changed().unwrap());
    }

    #[test]
    fn writes_in_flight_across_a_restart_count_it_once() {
        let versions = ServerVersions::default();
        let restarts = versions.restarts();
        versions.written(versions.floor(), Some("300"));
        let in_flight: Vec<Floor> = (0..4).map(|_| versions.floor()).collect();
        let noticed: Vec<bool> = in_flight
            .into_iter()
            .zip(["1", "2", "3", "4"])
            .map(|(before, answer)| versions.written(before, Some(answer)))
            .collect();
        assert_eq!(noticed, [true, false, false, false]);
        assert_eq!(*restarts.borrow(), 1);
        // Nor does an answer of the old server arriving late raise the floor.
        let late = Floor {
            version: Some(300),
            restarts: 0,
        };
        assert!(!versions.written(late, Some("301")));
        assert_eq!(versions.floor().version, Some(1));
        // A second restart later is noticed again.
        assert!(!versions.written(versions.floor(), Some("50")));
        assert!(versions.written(versions.floor(), Some("1")));
        assert_eq!(*restarts.borrow(), 2);
    }

    #[test]
    fn versions_that_are_not_numbers_are_ignored() {
        let versions = ServerVersions::default();
        versions.written(versions.floor(), Some("300"));
        assert!(!versions.written(versions.floor(), Some("abc")));
        assert!(!versions.written(versions.floor(), None));
        assert_eq!(versions.floor().version, Some(300));
    }
}
