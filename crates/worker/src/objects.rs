//! Objects this process owns: task results and `put` values, held in memory until freed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::time::Instant;

/// How an object came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Value = 0,
    /// The task raised: the data is the serialized exception.
    TaskError = 1,
    /// The system failed the task (no worker, worker died): the data is a message.
    SystemError = 2,
    /// The actor the call went to is gone: the data is a message.
    ActorDied = 3,
}

#[derive(Debug, Clone)]
pub struct Ready {
    pub data: Arc<Vec<u8>>,
    pub outcome: Outcome,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GetError {
    #[error("timed out waiting for object {0}")]
    Timeout(String),
    #[error("object {0} is unknown here (freed, or owned by another process)")]
    Unknown(String),
}

/// An object and how many references this process holds to it.
#[derive(Default)]
struct Slot {
    value: Option<Ready>,
    refs: u32,
}

/// Objects live while references to them do: the Python `ObjectRef`s of this process and
/// the tasks waiting for them as arguments.
#[derive(Default)]
pub struct ObjectTable {
    slots: Mutex<HashMap<String, Slot>>,
    changed: watch::Sender<u64>,
}

pub fn new_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system has no random source");
    hex::encode(bytes)
}

impl ObjectTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().expect("object table lock")
    }

    /// A new object whose value comes later.
    pub fn pending(&self) -> String {
        let id = new_id();
        self.lock().insert(id.clone(), Slot::default());
        id
    }

    pub fn fulfil(&self, id: &str, data: Vec<u8>, outcome: Outcome) {
        if let Some(slot) = self.lock().get_mut(id) {
            slot.value = Some(Ready { data: Arc::new(data), outcome });
        }
        self.changed.send_modify(|v| *v += 1);
    }

    pub fn put(&self, data: Vec<u8>) -> String {
        let id = new_id();
        let slot = Slot { value: Some(Ready { data: Arc::new(data), outcome: Outcome::Value }), refs: 0 };
        self.lock().insert(id.clone(), slot);
        id
    }

    pub fn add_ref(&self, id: &str) {
        if let Some(slot) = self.lock().get_mut(id) {
            slot.refs += 1;
        }
    }

    /// Drops one reference; the object goes with the last.
    pub fn release(&self, id: &str) {
        let mut slots = self.lock();
        if let Some(slot) = slots.get_mut(id) {
            slot.refs = slot.refs.saturating_sub(1);
            if slot.refs == 0 {
                slots.remove(id);
            }
        }
    }

    fn peek(&self, id: &str) -> Result<Option<Ready>, GetError> {
        self.lock().get(id).map(|s| s.value.clone()).ok_or_else(|| GetError::Unknown(id.to_string()))
    }

    /// Waits for every object, up to `deadline`.
    pub async fn get(&self, ids: &[String], deadline: Option<Instant>) -> Result<Vec<Ready>, GetError> {
        let mut rx = self.changed.subscribe();
        loop {
            let mut out = Vec::with_capacity(ids.len());
            let mut missing = None;
            for id in ids {
                match self.peek(id)? {
                    Some(ready) => out.push(ready),
                    None => {
                        missing = Some(id);
                        break;
                    }
                }
            }
            let Some(missing) = missing else { return Ok(out) };
            match deadline {
                Some(d) => {
                    if tokio::time::timeout_at(d, rx.changed()).await.is_err() {
                        return Err(GetError::Timeout(missing.clone()));
                    }
                }
                None => {
                    let _ = rx.changed().await;
                }
            }
        }
    }

    /// Which objects are ready once `num_returns` of them are, or at `deadline`.
    pub async fn wait(
        &self,
        ids: &[String],
        num_returns: usize,
        deadline: Option<Instant>,
    ) -> Result<Vec<bool>, GetError> {
        let mut rx = self.changed.subscribe();
        loop {
            let ready: Vec<bool> = ids.iter().map(|id| self.peek(id).map(|r| r.is_some())).collect::<Result<_, _>>()?;
            if ready.iter().filter(|r| **r).count() >= num_returns {
                return Ok(ready);
            }
            match deadline {
                Some(d) => {
                    if tokio::time::timeout_at(d, rx.changed()).await.is_err() {
                        return Ok(ready);
                    }
                }
                None => {
                    let _ = rx.changed().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn get_waits_for_values_and_times_out() {
        let table = Arc::new(ObjectTable::default());
        let id = table.pending();
        let soon = Some(Instant::now() + Duration::from_millis(50));
        assert_eq!(table.get(std::slice::from_ref(&id), soon).await.unwrap_err(), GetError::Timeout(id.clone()));
        let t = table.clone();
        let filler = id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            t.fulfil(&filler, b"v".to_vec(), Outcome::Value);
        });
        let got = table.get(std::slice::from_ref(&id), None).await.unwrap();
        assert_eq!(got[0].data.as_slice(), b"v");
        table.add_ref(&id);
        table.add_ref(&id);
        table.release(&id);
        assert!(table.get(std::slice::from_ref(&id), None).await.is_ok(), "one reference is left");
        table.release(&id);
        assert!(matches!(table.get(&[id], None).await, Err(GetError::Unknown(_))));
    }

    #[tokio::test]
    async fn wait_returns_once_enough_are_ready() {
        let table = ObjectTable::default();
        let a = table.put(b"a".to_vec());
        let b = table.pending();
        assert_eq!(table.wait(&[a.clone(), b.clone()], 1, None).await.unwrap(), vec![true, false]);
        let soon = Some(Instant::now() + Duration::from_millis(30));
        assert_eq!(table.wait(&[a, b], 2, soon).await.unwrap(), vec![true, false]);
    }
}
