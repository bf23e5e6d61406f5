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

/// Taken before a write is sent: the versions already answered then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Floor(Option<u64>);

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
        Floor(*self.lock())
    }

    /// A write sent at `before` was answered at `version`; returns whether
    /// this shows the API server started its versions over.
    pub(crate) fn written(&self, before: Floor, version: Option<&str>) -> bool {
        let Some(version) = version.and_then(|v| v.parse::<u64>().ok()) else {
            return false;
        };
        let mut floor = self.lock();
        let restarted = started_over(before, version);
        *floor = if restarted {
            Some(version)
        } else {
            Some(floor.map_or(version, |f| f.max(version)))
        };
        drop(floor);
        if restarted {
            self.restarts.send_modify(|n| *n += 1);
        }
        restarted
    }

    /// Changes whenever a restart is noticed.
    pub(crate) fn restarts(&self) -> watch::Receiver<u64> {
        self.restarts.subscribe()
    }
}

/// Whether a write sent when `before` had been answered, and answered at
/// `version`, shows the versions started over. Equal is not lower: the
/// same version can be answered twice (a write that changed nothing).
fn started_over(before: Floor, version: u64) -> bool {
    before.0.is_some_and(|floor| version < floor)
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
        assert_eq!(versions.floor(), Floor(Some(9)));
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
        assert_eq!(versions.floor(), Floor(Some(12)));
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
        assert_eq!(versions.floor(), Floor(Some(4)));
        assert!(!versions.written(versions.floor(), Some("5")));
        assert!(!restarts.has_changed().unwrap());
    }

    #[test]
    fn versions_that_are_not_numbers_are_ignored() {
        let versions = ServerVersions::default();
        versions.written(versions.floor(), Some("300"));
        assert!(!versions.written(versions.floor(), Some("abc")));
        assert!(!versions.written(versions.floor(), None));
        assert_eq!(versions.floor(), Floor(Some(300)));
    }
}
