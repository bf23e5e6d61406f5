//! Schema 6: a tree for the objects a node's kubelet keeps through the API
//! besides its Node and Lease (its CSINode), each kept with its node.

use crate::{trees, MigrationError};

pub(crate) fn run(db: &sled::Db) -> Result<(), MigrationError> {
    db.open_tree(trees::NODE_OBJECTS)?;
    Ok(())
}
