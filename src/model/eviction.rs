//! What eviction does to a node that stays down (`--eviction-mode`), as the
//! flag, the `EvictionStarted` event and the outbox all name it. Evictions
//! are decided and recorded by the controller (`crate::controller::eviction`)
//! and a node's pods deleted by the mirror (`crate::mirror`, its `eviction`
//! module).

use std::fmt;

use serde::{Deserialize, Serialize};

/// What eviction does (`--eviction-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum EvictionMode {
    /// NoExecute taints (`not-ready` / `unreachable`), NoSchedule at once.
    Taint,
    /// Delete the node's pods (the ancestor's behaviour; needs a mirror).
    DeletePods,
    /// Record nothing, do nothing.
    None,
}

impl EvictionMode {
    /// The flag's spelling, which events and exports carry too.
    pub fn as_str(self) -> &'static str {
        match self {
            EvictionMode::Taint => "taint",
            EvictionMode::DeletePods => "delete-pods",
            EvictionMode::None => "none",
        }
    }
}

impl fmt::Display for EvictionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An eviction mode spelled as none of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown eviction mode {0:?}: expected taint, delete-pods or none")]
pub struct UnknownEvictionMode(pub String);

impl std::str::FromStr for EvictionMode {
    type Err = UnknownEvictionMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let modes = <EvictionMode as clap::ValueEnum>::value_variants();
        let mode = modes.iter().find(|m| m.as_str() == s).copied();
        mode.ok_or_else(|| UnknownEvictionMode(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_reads_back() {
        for mode in [
            EvictionMode::Taint,
            EvictionMode::DeletePods,
            EvictionMode::None,
        ] {
            assert_eq!(mode.as_str().parse(), Ok(mode));
            assert_eq!(mode.to_string(), mode.as_str());
            // The flag, the event's JSON and the stored string agree.
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.as_str()));
            assert_eq!(serde_json::from_str::<EvictionMode>(&json).unwrap(), mode);
            let flag = <EvictionMode as clap::ValueEnum>::to_possible_value(&mode).unwrap();
            assert_eq!(flag.get_name(), mode.as_str());
        }
        assert_eq!(
            "delete_pods".parse::<EvictionMode>(),
            Err(UnknownEvictionMode("delete_pods".into()))
        );
    }
}
