//! The head's durable state in an embedded, crash-safe database (redb: copy-on-write
//! B-trees, every commit fsynced), so a head killed at any instant restarts with it intact.

use oxray_types::NodeInfo;
use redb::{Database, ReadableTable, TableDefinition};
use std::path::{Path, PathBuf};

const NODES: TableDefinition<&str, &[u8]> = TableDefinition::new("nodes");

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the head's database at {path}: {reason}")]
    Open { path: PathBuf, reason: String },
    #[error("the head's database failed: {0}")]
    Db(String),
    #[error("a record in the head's database is unreadable: {0}")]
    Corrupt(#[from] serde_json::Error),
}

fn db_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Db(e.to_string())
}

pub struct NodeStore {
    db: Database,
}

impl NodeStore {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let open_err = |reason: String| StoreError::Open {
            path: path.to_path_buf(),
            reason,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| open_err(e.to_string()))?;
        }
        let db = Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => open_err(
                "another head is using it (stop that head or choose another --storage)".into(),
            ),
            other => open_err(other.to_string()),
        })?;
        // Create the table up front so readers never see it missing.
        let tx = db.begin_write().map_err(db_err)?;
        tx.open_table(NODES).map_err(db_err)?;
        tx.commit().map_err(db_err)?;
        Ok(Self { db })
    }

    pub fn put(&self, node: &NodeInfo) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(node)?;
        let tx = self.db.begin_write().map_err(db_err)?;
        {
            let mut table = tx.open_table(NODES).map_err(db_err)?;
            table
                .insert(node.node_id.hex().as_str(), bytes.as_slice())
                .map_err(db_err)?;
        }
        tx.commit().map_err(db_err)
    }

    /// Writes several records in one transaction.
    pub fn put_all<'a>(
        &self,
        nodes: impl IntoIterator<Item = &'a NodeInfo>,
    ) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(db_err)?;
        {
            let mut table = tx.open_table(NODES).map_err(db_err)?;
            for node in nodes {
                let bytes = serde_json::to_vec(node)?;
                table
                    .insert(node.node_id.hex().as_str(), bytes.as_slice())
                    .map_err(db_err)?;
            }
        }
        tx.commit().map_err(db_err)
    }

    pub fn load_all(&self) -> Result<Vec<NodeInfo>, StoreError> {
        let tx = self.db.begin_read().map_err(db_err)?;
        let table = tx.open_table(NODES).map_err(db_err)?;
        let mut nodes = Vec::new();
        for entry in table.iter().map_err(db_err)? {
            let (_, value) = entry.map_err(db_err)?;
            nodes.push(serde_json::from_slice(value.value())?);
        }
        Ok(nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::tests::sample_node;

    #[test]
    fn survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("head.redb");
        let a = sample_node("a");
        let mut b = sample_node("b");
        {
            let store = NodeStore::open(&path).unwrap();
            store.put(&a).unwrap();
            store.put(&b).unwrap();
            b.mark_dead("gone", 5);
            store.put_all([&b]).unwrap();
        }
        let store = NodeStore::open(&path).unwrap();
        let mut loaded = store.load_all().unwrap();
        loaded.sort_by(|x, y| x.node_name.cmp(&y.node_name));
        assert_eq!(loaded, vec![a, b]);
    }

    #[test]
    fn refuses_a_second_opener() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("head.redb");
        let _first = NodeStore::open(&path).unwrap();
        let err = NodeStore::open(&path).err().unwrap();
        assert!(err.to_string().contains("another head"), "{err}");
    }
}
