//! Schema 3: a tree for node Leases (`kube-node-lease`), renewed by kubelets.

use crate::{trees, MigrationError};

pub(crate) fn run(db: &sled::Db) -> Result<(), MigrationError> {
    db.open_tree(trees::LEASES)?;
    Ok(())
}
