//! The head's durable state in an embedded, crash-safe database (redb: copy-on-write
//! B-trees, every commit fsynced), so a head killed at any instant restarts with it intact.
//! Records are JSON values keyed by id, one table per kind.

use oxray_api_types::Event;
use oxray_types::{JobRecord, NodeId, NodeInfo};
use redb::{Database, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

type Table = TableDefinition<'static, &'static str, &'static [u8]>;
const NODES: Table = TableDefinition::new("nodes");
const JOBS: Table = TableDefinition::new("jobs");
const EVENTS: TableDefinition<'static, u64, &'static [u8]> = TableDefinition::new("events");
/// Named actors, as protobuf bytes keyed by "namespace/name".
const ACTORS: Table = TableDefinition::new("actors");
/// Live placement groups, as protobuf bytes keyed by id.
const GROUPS: Table = TableDefinition::new("placement_groups");
/// Serve applications with their replicas, as the controller's JSON keyed by name.
const SERVE_APPS: Table = TableDefinition::new("serve_applications");
/// Serve's last declarative config (what `PUT /api/serve/applications/` sent).
const SERVE_CONFIG: Table = TableDefinition::new("serve_config");
/// Drivers with their job ids, as JSON keyed by job number.
const DRIVERS: TableDefinition<'static, u32, &'static [u8]> = TableDefinition::new("drivers");
const DECLARATIVE: &str = "declarative";

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

pub struct Store {
    db: Database,
}

/// Runs a database write on a blocking thread: a commit syncs the disk, which must not
/// hold up an async thread. Callers order their writes themselves (ADR 0031).
pub async fn off_thread<T: Send + 'static>(
    store: &Arc<Store>,
    write: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || write(&store)).await.map_err(|e| StoreError::Db(e.to_string()))?
}

impl Store {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let open_err = |reason: String| StoreError::Open { path: path.to_path_buf(), reason };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| open_err(e.to_string()))?;
        }
        let db = Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => {
                open_err("another head is using it (stop that head or choose another --storage)".into())
            }
            other => open_err(other.to_string()),
        })?;
        // Create the tables up front so readers never see one missing.
        let tx = db.begin_write().map_err(db_err)?;
        tx.open_table(NODES).map_err(db_err)?;
        tx.open_table(JOBS).map_err(db_err)?;
        tx.open_table(EVENTS).map_err(db_err)?;
        tx.open_table(ACTORS).map_err(db_err)?;
        tx.open_table(GROUPS).map_err(db_err)?;
        tx.open_table(SERVE_APPS).map_err(db_err)?;
        tx.open_table(SERVE_CONFIG).map_err(db_err)?;
        tx.open_table(DRIVERS).map_err(db_err)?;
        tx.commit().map_err(db_err)?;
        Ok(Self { db })
    }

    /// Writes every `(key, value)` in one transaction.
    fn put_many<'a, T: Serialize + 'a>(
        &self,
        table: Table,
        records: impl IntoIterator<Item = (String, &'a T)>,
    ) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(db_err)?;
        {
            let mut t = tx.open_table(table).map_err(db_err)?;
            for (key, value) in records {
                let bytes = serde_json::to_vec(value)?;
                t.insert(key.as_str(), bytes.as_slice()).map_err(db_err)?;
            }
        }
        tx.commit().map_err(db_err)
    }

    fn load<K: redb::Key + 'static, T: DeserializeOwned>(
        &self,
        table: TableDefinition<'static, K, &'static [u8]>,
    ) -> Result<Vec<T>, StoreError> {
        let tx = self.db.begin_read().map_err(db_err)?;
        let t = tx.open_table(table).map_err(db_err)?;
        let mut out = Vec::new();
        for entry in t.iter().map_err(db_err)? {
            let (_, value) = entry.map_err(db_err)?;
            out.push(serde_json::from_slice(value.value())?);
        }
        Ok(out)
    }

    pub fn put_node(&self, node: &NodeInfo) -> Result<(), StoreError> {
        self.put_nodes([node])
    }

    pub fn put_nodes<'a>(&self, nodes: impl IntoIterator<Item = &'a NodeInfo>) -> Result<(), StoreError> {
        self.put_many(NODES, nodes.into_iter().map(|n| (n.node_id.hex(), n)))
    }

    pub fn delete_nodes(&self, ids: &[NodeId]) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(db_err)?;
        {
            let mut table = tx.open_table(NODES).map_err(db_err)?;
            for id in ids {
                table.remove(id.hex().as_str()).map_err(db_err)?;
            }
        }
        tx.commit().map_err(db_err)
    }

    pub fn load_nodes(&self) -> Result<Vec<NodeInfo>, StoreError> {
        self.load(NODES)
    }

    pub fn put_job(&self, job: &JobRecord) -> Result<(), StoreError> {
        self.put_jobs([job])
    }

    pub fn put_jobs<'a>(&self, jobs: impl IntoIterator<Item = &'a JobRecord>) -> Result<(), StoreError> {
        self.put_many(JOBS, jobs.into_iter().map(|j| (j.submission_id.clone(), j)))
    }

    pub fn delete_job(&self, id: &str) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(db_err)?;
        tx.open_table(JOBS).map_err(db_err)?.remove(id).map_err(db_err)?;
        tx.commit().map_err(db_err)
    }

    pub fn load_jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        self.load(JOBS)
    }

    /// Adds an event and drops the one that fell out of the kept window, in one transaction.
    pub fn put_event(&self, event: &Event, dropped: Option<u64>) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(event)?;
        let tx = self.db.begin_write().map_err(db_err)?;
        {
            let mut table = tx.open_table(EVENTS).map_err(db_err)?;
            table.insert(event.seq, bytes.as_slice()).map_err(db_err)?;
            if let Some(seq) = dropped {
                table.remove(seq).map_err(db_err)?;
            }
        }
        tx.commit().map_err(db_err)
    }

    pub fn load_events(&self) -> Result<Vec<Event>, StoreError> {
        self.load(EVENTS)
    }

    /// Writes a driver's record and forgets those in `gone`, in one transaction.
    pub fn put_driver(&self, job: u32, driver: &impl Serialize, gone: &[u32]) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(driver)?;
        let tx = self.db.begin_write().map_err(db_err)?;
        {
            let mut table = tx.open_table(DRIVERS).map_err(db_err)?;
            table.insert(job, bytes.as_slice()).map_err(db_err)?;
            for job in gone {
                table.remove(*job).map_err(db_err)?;
            }
        }
        tx.commit().map_err(db_err)
    }

    pub fn load_drivers<T: DeserializeOwned>(&self) -> Result<Vec<T>, StoreError> {
        self.load(DRIVERS)
    }

    pub fn put_actor(&self, key: &str, actor: &oxray_proto::v1::NamedActor) -> Result<(), StoreError> {
        use prost::Message;
        let bytes = actor.encode_to_vec();
        let tx = self.db.begin_write().map_err(db_err)?;
        tx.open_table(ACTORS).map_err(db_err)?.insert(key, bytes.as_slice()).map_err(db_err)?;
        tx.commit().map_err(db_err)
    }

    pub fn delete_actor(&self, key: &str) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(db_err)?;
        tx.open_table(ACTORS).map_err(db_err)?.remove(key).map_err(db_err)?;
        tx.commit().map_err(db_err)
    }

    /// Records placement groups (`Some`) and their removal (`None`) in one transaction.
    pub fn put_groups(&self, groups: &[(String, Option<oxray_proto::v1::PlacementGroup>)]) -> Result<(), StoreError> {
        use prost::Message;
        let tx = self.db.begin_write().map_err(db_err)?;
        {
            let mut table = tx.open_table(GROUPS).map_err(db_err)?;
            for (id, group) in groups {
                match group {
                    Some(g) => table.insert(id.as_str(), g.encode_to_vec().as_slice()).map(drop),
                    None => table.remove(id.as_str()).map(drop),
                }
                .map_err(db_err)?;
            }
        }
        tx.commit().map_err(db_err)
    }

    pub fn load_groups(&self) -> Result<Vec<oxray_proto::v1::PlacementGroup>, StoreError> {
        use prost::Message;
        let tx = self.db.begin_read().map_err(db_err)?;
        let table = tx.open_table(GROUPS).map_err(db_err)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(db_err)? {
            let (_, value) = entry.map_err(db_err)?;
            let group =
                oxray_proto::v1::PlacementGroup::decode(value.value()).map_err(|e| StoreError::Db(e.to_string()))?;
            out.push(group);
        }
        Ok(out)
    }

    pub fn put_serve_app(&self, name: &str, record: &[u8]) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(db_err)?;
        tx.open_table(SERVE_APPS).map_err(db_err)?.insert(name, record).map_err(db_err)?;
        tx.commit().map_err(db_err)
    }

    pub fn delete_serve_app(&self, name: &str) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(db_err)?;
        tx.open_table(SERVE_APPS).map_err(db_err)?.remove(name).map_err(db_err)?;
        tx.commit().map_err(db_err)
    }

    pub fn load_serve_apps(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let tx = self.db.begin_read().map_err(db_err)?;
        let table = tx.open_table(SERVE_APPS).map_err(db_err)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(db_err)? {
            let (key, value) = entry.map_err(db_err)?;
            out.push((key.value().to_string(), value.value().to_vec()));
        }
        Ok(out)
    }

    pub fn put_serve_config(&self, record: Option<&[u8]>) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(db_err)?;
        {
            let mut table = tx.open_table(SERVE_CONFIG).map_err(db_err)?;
            match record {
                Some(record) => table.insert(DECLARATIVE, record).map(|_| ()),
                None => table.remove(DECLARATIVE).map(|_| ()),
            }
            .map_err(db_err)?;
        }
        tx.commit().map_err(db_err)
    }

    pub fn serve_config(&self) -> Result<Option<Vec<u8>>, StoreError> {
        let tx = self.db.begin_read().map_err(db_err)?;
        let table = tx.open_table(SERVE_CONFIG).map_err(db_err)?;
        Ok(table.get(DECLARATIVE).map_err(db_err)?.map(|v| v.value().to_vec()))
    }

    pub fn load_actors(&self) -> Result<Vec<oxray_proto::v1::NamedActor>, StoreError> {
        use prost::Message;
        let tx = self.db.begin_read().map_err(db_err)?;
        let table = tx.open_table(ACTORS).map_err(db_err)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(db_err)? {
            let (_, value) = entry.map_err(db_err)?;
            out.push(oxray_proto::v1::NamedActor::decode(value.value()).map_err(|e| StoreError::Db(e.to_string()))?);
        }
        Ok(out)
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
        let job = crate::jobs::tests::sample_job("j1");
        {
            let store = Store::open(&path).unwrap();
            store.put_node(&a).unwrap();
            store.put_node(&b).unwrap();
            b.mark_dead("gone", 5);
            store.put_nodes([&b]).unwrap();
            store.put_job(&job).unwrap();
            store.put_job(&crate::jobs::tests::sample_job("j2")).unwrap();
            store.delete_job("j2").unwrap();
        }
        let store = Store::open(&path).unwrap();
        let mut loaded = store.load_nodes().unwrap();
        loaded.sort_by(|x, y| x.node_name.cmp(&y.node_name));
        assert_eq!(loaded, vec![a, b]);
        assert_eq!(store.load_jobs().unwrap(), vec![job]);
    }

    #[test]
    fn refuses_a_second_opener() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("head.redb");
        let _first = Store::open(&path).unwrap();
        let err = Store::open(&path).err().unwrap();
        assert!(err.to_string().contains("another head"), "{err}");
    }
}
