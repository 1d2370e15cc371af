//! The cluster's recent events (nodes joining and dying, jobs ending), kept in the database
//! so the dashboard shows them after a head restart too. They are written by a thread of
//! their own, in the order they happened: recording one never waits for the disk.

use crate::store::Store;
use oxray_api_types::Event;
use oxray_types::now_ms;
use std::collections::VecDeque;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

/// How many events are kept.
const KEEP: usize = 1000;

/// An event to write, and the oldest one it pushes out.
type Write = (Event, Option<u64>);

pub struct Events {
    recent: Mutex<VecDeque<Event>>,
    /// Ends, once every event sent is written, when the sender is dropped (see `Drop`).
    writer: Option<(mpsc::Sender<Write>, JoinHandle<()>)>,
}

fn write_events(store: Arc<Store>, writes: mpsc::Receiver<Write>) {
    for (event, dropped) in writes {
        // Losing an event to a database error must not stop the action it describes.
        if let Err(e) = store.put_event(&event, dropped) {
            tracing::error!("cannot record an event: {e}");
        }
    }
}

impl Events {
    pub fn open(store: Arc<Store>) -> Result<Self, crate::StoreError> {
        let mut loaded = store.load_events()?;
        loaded.sort_by_key(|e| e.seq);
        let recent = loaded.into_iter().rev().take(KEEP).rev().collect();
        let (send, writes) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("oxray-events".into())
            .spawn(move || write_events(store, writes))
            .map_err(|e| crate::StoreError::Db(format!("cannot start the event writer: {e}")))?;
        Ok(Self { recent: Mutex::new(recent), writer: Some((send, thread)) })
    }

    pub fn record(&self, severity: &str, kind: &str, message: String) {
        let mut recent = self.recent.lock().expect("events lock");
        let seq = recent.back().map_or(1, |e| e.seq + 1);
        let event = Event { seq, time_ms: now_ms(), severity: severity.into(), kind: kind.into(), message };
        let dropped = if recent.len() >= KEEP { recent.pop_front().map(|e| e.seq) } else { None };
        if let Some((writes, _)) = &self.writer {
            let _ = writes.send((event.clone(), dropped));
        }
        recent.push_back(event);
    }

    /// The newest `limit` events, newest first.
    pub fn latest(&self, limit: usize) -> Vec<Event> {
        self.recent.lock().expect("events lock").iter().rev().take(limit).cloned().collect()
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        if let Some((writes, thread)) = self.writer.take() {
            drop(writes);
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let events = Events::open(Arc::new(Store::open(&path).unwrap())).unwrap();
            for i in 0..KEEP + 5 {
                events.record("INFO", "node_joined", format!("event {i}"));
            }
            assert_eq!(events.latest(2)[0].message, format!("event {}", KEEP + 4));
        }
        let events = Events::open(Arc::new(Store::open(&path).unwrap())).unwrap();
        let all = events.latest(usize::MAX);
        assert_eq!(all.len(), KEEP);
        assert_eq!(all.last().unwrap().message, "event 5");
        events.record("WARNING", "node_dead", "later".into());
        assert_eq!(events.latest(1)[0].seq, KEEP as u64 + 6);
    }
}
