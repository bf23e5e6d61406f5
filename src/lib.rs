//! nodekeeper: a standalone node controller for edge and bare-metal sites.
//!
//! Data flows one way: sources → controller → store → (server, mirror).
#![forbid(unsafe_code)]

pub mod duration;
pub mod history;
pub mod kube;
pub mod model;
pub mod output;
pub mod probe;
pub mod source;
pub mod store;
