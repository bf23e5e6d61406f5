//! nodekeeper
