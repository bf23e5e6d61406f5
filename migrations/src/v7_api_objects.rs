//! Schema 7: a tree for API objects kept on their own rather than with a
//! node (bootstrap-token Secrets, CSRs). The step itself only creates the
//! tree; the number also marks what schema 6 cannot read: the history entry
//! `CertificateIssued` and Leases with owner references, so a release of
//! schema 6 refuses such a store ("written by a newer nodekeeper") rather
//! than failing on a record it does not know.

use crate::{trees, MigrationError};

pub(crate) fn run(db: &sled::Db) -> Result<(), MigrationError> {
    db.open_tree(trees::API_OBJECTS)?;
    Ok(())
}
