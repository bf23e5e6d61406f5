//! Schema 1: the trees every store has.

use crate::{trees, MigrationError};

pub(crate) fn run(db: &sled::Db) -> Result<(), MigrationError> {
    for tree in [trees::NODES, trees::EVENTS, trees::OUTBOX, trees::META] {
        db.open_tree(tree)?;
    }
    Ok(())
}
