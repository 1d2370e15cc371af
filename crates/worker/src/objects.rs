//! The objects one process knows: those it owns (task results and `put` values, held in
//! memory until freed) and those it borrows (references to objects other processes own,
//! fetched from the owner on first use).

use oxray_object_store::{NodeStore, StoredFile};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::watch;

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
    /// The object is gone (freed): the data is a message.
    Lost = 4,
    /// The process that owned the object ended: the data is a message.
    OwnerDied = 5,
    /// The task's worker was ended to free its node's memory: the data is a message.
    OutOfMemory = 6,
    /// The task was cancelled before it gave a value: the data is a message.
    Cancelled = 7,
    /// The task's runtime_env could not be prepared: the data is a message.
    RuntimeEnvSetup = 8,
}

impl Outcome {
    pub fn from_code(code: u32) -> Self {
        match code {
            0 => Self::Value,
            1 => Self::TaskError,
            2 => Self::SystemError,
            3 => Self::ActorDied,
            5 => Self::OwnerDied,
            6 => Self::OutOfMemory,
            7 => Self::Cancelled,
            8 => Self::RuntimeEnvSetup,
            _ => Self::Lost,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Ready {
    pub data: Arc<Vec<u8>>,
    pub outcome: Outcome,
}

impl Ready {
    pub fn lost(message: String) -> Self {
        Self { data: Arc::new(message.into_bytes()), outcome: Outcome::Lost }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GetError {
    #[error("timed out waiting for object {0}")]
    Timeout(String),
    #[error("object {0} is unknown here (it was freed)")]
    Unknown(String),
}

/// A reference an object keeps on another while it lives: the ObjectRefs inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// A reference counted in this process's table.
    Local(String),
    /// A reference counted at the owner, taken on this process's behalf.
    Remote { id: String, owner: String },
}

/// What a reference is for, so that the state API can say how an object is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// A Python `ObjectRef` of this process.
    Local,
    /// An argument of a task this process submitted (or a ref inside one), until the task
    /// ends.
    PendingTask,
    /// Another process's, as it reported it.
    Remote,
}

/// How a process reaches the owners of the objects it borrows.
pub trait Owners: Send + Sync + 'static {
    /// The object's value from its owner; `Ready::lost` when the owner cannot give it.
    fn fetch(&self, id: String, owner: String) -> Pin<Box<dyn Future<Output = Ready> + Send>>;
    /// Reference changes for an owner, delivered in the order they are made; the future
    /// ends once the owner has them.
    /// The changes are queued when this is called, whether or not the future is awaited.
    fn update(&self, owner: String, changes: Vec<(String, i32)>) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

#[derive(Default)]
struct Slot {
    value: Option<Ready>,
    /// Every reference: Python's, pending tasks', other objects' and other processes'.
    refs: u32,
    /// Of `refs`, those the tasks this process submitted hold until they end.
    pending_tasks: u32,
    /// Of `refs`, those other processes reported (this process owns the object).
    remote: u32,
    /// Set for a borrowed object: the owner's object server.
    owner: Option<String>,
    fetching: bool,
    holds: Vec<Hold>,
    /// The value's file in the node's store, removed with the object.
    file: Option<StoredFile>,
}

#[derive(Default)]
struct Inner {
    slots: HashMap<String, Slot>,
    /// Borrowed objects whose owner has not yet been told, by owner.
    unannounced: HashMap<String, Vec<String>>,
    /// What to do when these objects go (an actor's creation object: its last handle).
    on_free: HashMap<String, Box<dyn FnOnce() + Send>>,
    /// Actors' creation objects, which their handles hold (marked as a handle is read, which
    /// may be before its reference is taken).
    actor_handles: HashSet<String>,
}

/// Objects live while references to them do: the Python `ObjectRef`s of this process, the
/// tasks waiting for them as arguments, the objects that contain them, and (for objects this
/// process owns) the references other processes reported.
#[derive(Default)]
pub struct ObjectTable {
    inner: Mutex<Inner>,
    changed: watch::Sender<u64>,
    /// How many values that hold an error were set: a `get` waiting on many objects looks
    /// past the first missing one only when this moved (see `settle`).
    failures: AtomicU64,
    owners: OnceLock<Arc<dyn Owners>>,
    store: OnceLock<Arc<NodeStore>>,
}

pub fn new_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system has no random source");
    hex::encode(bytes)
}

impl ObjectTable {
    /// Connects the table to the other processes' object servers (once).
    pub fn set_owners(&self, owners: Arc<dyn Owners>) {
        let _ = self.owners.set(owners);
    }

    /// The node's object store, where large values this process puts live (once).
    pub fn set_store(&self, store: Arc<NodeStore>) {
        let _ = self.store.set(store);
    }

    pub fn store(&self) -> Option<&Arc<NodeStore>> {
        self.store.get()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("object table lock")
    }

    /// A new object whose value comes later.
    pub fn pending(&self) -> String {
        let id = new_id();
        self.lock().slots.insert(id.clone(), Slot::default());
        id
    }

    /// Sets a pending object's value, and the references the value holds.
    pub fn fulfil(&self, id: &str, data: Vec<u8>, outcome: Outcome, holds: Vec<Hold>) {
        self.settle_value(id, Ready { data: Arc::new(data), outcome }, holds, None);
    }

    /// Sets a pending object's value, written by its task into `file` of this node's store:
    /// the file is this process's now, and goes with the object.
    pub fn fulfil_stored(&self, id: &str, data: Vec<u8>, file: StoredFile) {
        self.settle_value(id, Ready { data: Arc::new(data), outcome: Outcome::Value }, Vec::new(), Some(file));
    }

    /// Gives a pending object its value; what it would hold goes at once if the object
    /// was freed meanwhile, or already has a value (a task cancelled while it ran is
    /// cancelled for good, whatever its worker answers later).
    fn settle_value(&self, id: &str, value: Ready, holds: Vec<Hold>, file: Option<StoredFile>) {
        let orphaned = {
            let mut inner = self.lock();
            match inner.slots.get_mut(id) {
                Some(slot) if slot.value.is_some() => Some((holds, file)),
                Some(slot) => {
                    self.count_failure(&value);
                    slot.value = Some(value);
                    slot.holds = holds;
                    slot.file = file;
                    None
                }
                None => Some((holds, file)),
            }
        };
        if let Some((holds, file)) = orphaned {
            self.drop_holds(holds);
            if let (Some(file), Some(store)) = (file, self.store.get()) {
                store.delete(&file);
            }
        }
        self.changed.send_modify(|v| *v += 1);
    }

    fn count_failure(&self, value: &Ready) {
        if value.outcome != Outcome::Value {
            self.failures.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Stores a value; `contained` are the ObjectRefs inside it, kept alive while it lives.
    pub fn put(&self, data: Vec<u8>, contained: &[String]) -> String {
        self.put_with_id(new_id(), data, contained, None)
    }

    /// Stores a value written to `file` in the node's store as object `id`; `data` is what
    /// readers get (where the file is).
    pub fn put_stored(&self, id: String, data: Vec<u8>, file: StoredFile, contained: &[String]) -> String {
        self.put_with_id(id, data, contained, Some(file))
    }

    /// The file of an object this process stored, if any.
    pub fn stored_file(&self, id: &str) -> Option<StoredFile> {
        self.lock().slots.get(id).and_then(|s| s.file.clone())
    }

    fn put_with_id(&self, id: String, data: Vec<u8>, contained: &[String], file: Option<StoredFile>) -> String {
        let mut inner = self.lock();
        let mut holds = Vec::with_capacity(contained.len());
        for c in contained {
            if let Some(slot) = inner.slots.get_mut(c) {
                slot.refs += 1;
                holds.push(Hold::Local(c.clone()));
            }
        }
        let value = Some(Ready { data: Arc::new(data), outcome: Outcome::Value });
        inner.slots.insert(id.clone(), Slot { value, holds, file, ..Default::default() });
        id
    }

    /// An actor's handles hold this object (its creation's): the state API says so.
    pub fn mark_actor_handle(&self, id: &str) {
        self.lock().actor_handles.insert(id.to_string());
    }

    /// The objects referenced here, at most `limit`, for the state API; and how many there
    /// are. `pinned`: the ids whose files this process has mapped to read.
    pub fn entries(&self, limit: usize, pinned: &HashSet<String>) -> (Vec<oxray_proto::v1::ObjectEntry>, usize) {
        let inner = self.lock();
        let mut captured: HashMap<&str, u32> = HashMap::new();
        for hold in inner.slots.values().flat_map(|s| &s.holds) {
            if let Hold::Local(id) = hold {
                *captured.entry(id.as_str()).or_default() += 1;
            }
        }
        let entries = inner
            .slots
            .iter()
            .take(limit)
            .map(|(id, slot)| {
                let size = match (&slot.file, &slot.value) {
                    (Some(file), _) => file.size as i64,
                    (None, Some(ready)) => ready.data.len() as i64,
                    (None, None) => -1,
                };
                oxray_proto::v1::ObjectEntry {
                    object_id: id.clone(),
                    size,
                    owned: slot.owner.is_none(),
                    ready: slot.value.is_some(),
                    refs: slot.refs,
                    spilled: slot.file.as_ref().is_some_and(|f| !f.in_memory),
                    reference_type: reference_type(
                        slot,
                        captured.get(id.as_str()).copied().unwrap_or(0),
                        pinned.contains(id),
                        inner.actor_handles.contains(id),
                    )
                    .into(),
                }
            })
            .collect();
        (entries, inner.slots.len())
    }

    /// Runs `then` once the object goes (at once if it is not here).
    pub fn on_free(&self, id: &str, then: Box<dyn FnOnce() + Send>) {
        let mut inner = self.lock();
        if !inner.slots.contains_key(id) {
            drop(inner);
            return then();
        }
        inner.on_free.insert(id.to_string(), then);
    }

    pub fn add_ref(&self, id: &str) {
        self.add_use(id, Use::Local);
    }

    /// A reference taken for `use_` (`release_use` gives it back).
    pub fn add_use(&self, id: &str, use_: Use) {
        if let Some(slot) = self.lock().slots.get_mut(id) {
            slot.refs += 1;
            match use_ {
                Use::Local => {}
                Use::PendingTask => slot.pending_tasks += 1,
                Use::Remote => slot.remote += 1,
            }
        }
    }

    pub fn release_use(&self, id: &str, use_: Use) {
        if let Some(slot) = self.lock().slots.get_mut(id) {
            match use_ {
                Use::Local => {}
                Use::PendingTask => slot.pending_tasks = slot.pending_tasks.saturating_sub(1),
                Use::Remote => slot.remote = slot.remote.saturating_sub(1),
            }
        }
        self.release(id);
    }

    /// A reference to an object `owner` owns. Returns whether it is the first here: the
    /// owner learns of it with the next `announce`.
    pub fn borrow(&self, id: &str, owner: &str) -> bool {
        let mut inner = self.lock();
        if let Some(slot) = inner.slots.get_mut(id) {
            slot.refs += 1;
            return false;
        }
        inner.slots.insert(id.to_string(), Slot { refs: 1, owner: Some(owner.to_string()), ..Default::default() });
        inner.unannounced.entry(owner.to_string()).or_default().push(id.to_string());
        true
    }

    /// Tells the owners of newly borrowed objects, and waits until they know.
    pub async fn announce(&self) {
        let pending = std::mem::take(&mut self.lock().unannounced);
        let Some(owners) = self.owners.get() else { return };
        for (owner, ids) in pending {
            owners.update(owner, ids.into_iter().map(|id| (id, 1)).collect()).await;
        }
    }

    /// Whether `id` is borrowed here, and from whom.
    pub fn owner_of(&self, id: &str) -> Option<String> {
        self.lock().slots.get(id).and_then(|s| s.owner.clone())
    }

    /// Drops one reference; the object goes with the last, and with it its holds.
    pub fn release(&self, id: &str) {
        // Most releases leave other references: no allocation for those.
        match self.lock().slots.get_mut(id) {
            None => return,
            Some(slot) if slot.refs > 1 => {
                slot.refs -= 1;
                return;
            }
            Some(_) => {}
        }
        self.drop_holds(vec![Hold::Local(id.to_string())]);
    }

    /// The hold a task's result keeps on a reference inside it, which the task took at the
    /// owner on this process's behalf. It becomes this process's own reference when there
    /// is none yet, so refs read from the value cost their owner nothing more; otherwise it
    /// stays counted at the owner. `this_process` is this process's object server address.
    pub fn adopt(&self, id: String, owner: String, this_process: Option<&str>) -> Hold {
        if this_process == Some(owner.as_str()) {
            // The task's reference was added to this table already, as another process's:
            // the result holds it now.
            if let Some(slot) = self.lock().slots.get_mut(&id) {
                slot.remote = slot.remote.saturating_sub(1);
            }
            return Hold::Local(id);
        }
        let mut inner = self.lock();
        if inner.slots.contains_key(&id) {
            return Hold::Remote { id, owner };
        }
        inner.slots.insert(id.clone(), Slot { refs: 1, owner: Some(owner), ..Default::default() });
        Hold::Local(id)
    }

    fn drop_holds(&self, mut holds: Vec<Hold>) {
        let mut remote: HashMap<String, Vec<(String, i32)>> = HashMap::new();
        let mut files = Vec::new();
        let mut freed = Vec::new();
        {
            let mut inner = self.lock();
            while let Some(hold) = holds.pop() {
                let id = match hold {
                    Hold::Remote { id, owner } => {
                        remote.entry(owner).or_default().push((id, -1));
                        continue;
                    }
                    Hold::Local(id) => id,
                };
                let Some(slot) = inner.slots.get_mut(&id) else { continue };
                slot.refs = slot.refs.saturating_sub(1);
                if slot.refs > 0 {
                    continue;
                }
                let slot = inner.slots.remove(&id).expect("present");
                inner.actor_handles.remove(&id);
                if !inner.on_free.is_empty() {
                    freed.extend(inner.on_free.remove(&id));
                }
                holds.extend(slot.holds);
                files.extend(slot.file);
                if let Some(owner) = slot.owner {
                    let waiting = inner.unannounced.get_mut(&owner);
                    let unannounced = waiting.and_then(|w| w.iter().position(|x| *x == id).map(|at| w.swap_remove(at)));
                    if unannounced.is_none() {
                        remote.entry(owner).or_default().push((id, -1));
                    }
                }
            }
        }
        for then in freed {
            then();
        }
        if let Some(store) = self.store.get() {
            for file in &files {
                store.delete(file);
            }
        }
        if remote.is_empty() {
            return;
        }
        let Some(owners) = self.owners.get() else { return };
        for (owner, changes) in remote {
            // Sent in order; the dropper does not wait for the owner's answer.
            drop(owners.update(owner, changes));
        }
    }

    /// How many objects the table holds (owned and borrowed).
    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

mod kinds;
pub mod pinned;
mod waits;

use kinds::reference_type;

#[cfg(test)]
mod tests;
