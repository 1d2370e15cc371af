//! The directory of named actors, kept in the database so names survive a head restart.

use crate::store::{off_thread, Store, StoreError};
use oxray_proto::v1;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ActorError {
    #[error("an actor named {0:?} already exists in namespace {1:?}")]
    Exists(String, String),
    #[error("no actor named {0:?} in namespace {1:?}")]
    Missing(String, String),
    #[error("{0}")]
    Store(String),
}

impl From<StoreError> for ActorError {
    fn from(e: StoreError) -> Self {
        ActorError::Store(e.to_string())
    }
}

fn key(name: &str, namespace: &str) -> String {
    format!("{namespace}/{name}")
}

/// Written, then shown (ADR 0031): `writer` orders the writes.
pub struct Actors {
    named: Mutex<HashMap<String, v1::NamedActor>>,
    writer: tokio::sync::Mutex<()>,
    store: Arc<Store>,
}

impl Actors {
    pub fn open(store: Arc<Store>) -> Result<Self, StoreError> {
        let named = store.load_actors()?.into_iter().map(|a| (key(&a.name, &a.namespace), a)).collect();
        Ok(Self { named: Mutex::new(named), writer: tokio::sync::Mutex::new(()), store })
    }

    pub async fn register(&self, actor: v1::NamedActor) -> Result<(), ActorError> {
        let _writing = self.writer.lock().await;
        let k = key(&actor.name, &actor.namespace);
        if self.named.lock().expect("actors lock").contains_key(&k) {
            return Err(ActorError::Exists(actor.name, actor.namespace));
        }
        let (written, wk) = (actor.clone(), k.clone());
        off_thread(&self.store, move |store| store.put_actor(&wk, &written)).await?;
        self.named.lock().expect("actors lock").insert(k, actor);
        Ok(())
    }

    pub fn get(&self, name: &str, namespace: &str) -> Result<v1::NamedActor, ActorError> {
        let named = self.named.lock().expect("actors lock");
        named.get(&key(name, namespace)).cloned().ok_or_else(|| ActorError::Missing(name.into(), namespace.into()))
    }

    /// The named actors of `namespace` (of every one when `None`), by namespace and name.
    pub fn list(&self, namespace: Option<&str>) -> Vec<v1::NamedActor> {
        let named = self.named.lock().expect("actors lock");
        let mut found: Vec<v1::NamedActor> =
            named.values().filter(|a| namespace.is_none_or(|ns| a.namespace == ns)).cloned().collect();
        found.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        found
    }

    pub async fn remove(&self, name: &str, namespace: &str) -> Result<(), ActorError> {
        let _writing = self.writer.lock().await;
        let k = key(name, namespace);
        let wk = k.clone();
        off_thread(&self.store, move |store| store.delete_actor(&wk)).await?;
        self.named.lock().expect("actors lock").remove(&k);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_are_unique_per_namespace_and_durable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let actor = |name: &str, ns: &str| v1::NamedActor {
            name: name.into(),
            namespace: ns.into(),
            actor_id: "a".into(),
            ..Default::default()
        };
        {
            let actors = Actors::open(Arc::new(Store::open(&path).unwrap())).unwrap();
            actors.register(actor("counter", "ml")).await.unwrap();
            actors.register(actor("counter", "other")).await.unwrap();
            let names = |ns| actors.list(ns).into_iter().map(|a| a.namespace).collect::<Vec<_>>();
            assert_eq!(names(Some("ml")), vec!["ml"]);
            assert_eq!(names(None), vec!["ml", "other"]);
            let taken = actors.register(actor("counter", "ml")).await;
            assert_eq!(taken, Err(ActorError::Exists("counter".into(), "ml".into())));
            actors.register(actor("gone", "ml")).await.unwrap();
            actors.remove("gone", "ml").await.unwrap();
        }
        let actors = Actors::open(Arc::new(Store::open(&path).unwrap())).unwrap();
        assert_eq!(actors.get("counter", "ml").unwrap().actor_id, "a");
        assert!(matches!(actors.get("gone", "ml"), Err(ActorError::Missing(..))));
    }
}
