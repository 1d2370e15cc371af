//! Waiting for objects: `get` and `wait` over the table, and `peek` at one.

use super::{GetError, ObjectTable, Outcome, Ready};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::time::Instant;

impl ObjectTable {
    /// The value if ready; starts fetching a borrowed object that is not here yet.
    fn peek(self: &Arc<Self>, id: &str) -> Result<Option<Ready>, GetError> {
        let fetch = {
            let mut inner = self.lock();
            let slot = inner.slots.get_mut(id).ok_or_else(|| GetError::Unknown(id.to_string()))?;
            if let Some(value) = &slot.value {
                return Ok(Some(value.clone()));
            }
            match (&slot.owner, slot.fetching) {
                (Some(owner), false) => {
                    slot.fetching = true;
                    owner.clone()
                }
                _ => return Ok(None),
            }
        };
        if let Some(owners) = self.owners.get() {
            let (this, id) = (self.clone(), id.to_string());
            let fetched = owners.fetch(id.clone(), fetch);
            tokio::spawn(async move {
                let ready = fetched.await;
                if let Some(slot) = this.lock().slots.get_mut(&id) {
                    this.count_failure(&ready);
                    slot.value = Some(ready);
                }
                this.changed.send_modify(|v| *v += 1);
            });
        }
        Ok(None)
    }

    /// Waits for every object, up to `deadline`; as soon as one holds an error (in any
    /// position), answers that one alone, as Ray's `get` raises the first error at once.
    pub async fn get(self: &Arc<Self>, ids: &[String], deadline: Option<Instant>) -> Result<Vec<Ready>, GetError> {
        let mut values: Vec<Option<Ready>> = vec![None; ids.len()];
        if let Some(failed) = self.settle(ids, &mut values, ids.len(), deadline, true).await? {
            return Ok(vec![values[failed].take().expect("settled")]);
        }
        values.into_iter().zip(ids).map(|(v, id)| v.ok_or_else(|| GetError::Timeout(id.clone()))).collect()
    }

    /// Which objects are ready once `num_returns` of them are, or at `deadline`.
    pub async fn wait(
        self: &Arc<Self>,
        ids: &[String],
        num_returns: usize,
        deadline: Option<Instant>,
    ) -> Result<Vec<bool>, GetError> {
        let mut values: Vec<Option<Ready>> = vec![None; ids.len()];
        // Only `get` reports a timeout: `wait` answers with what is ready by then.
        match self.settle(ids, &mut values, num_returns, deadline, false).await {
            Ok(_) | Err(GetError::Timeout(_)) => Ok(values.iter().map(Option::is_some).collect()),
            Err(e) => Err(e),
        }
    }

    /// The positions of the first `enough` objects that are ready now, if that many are
    /// (fetching borrowed ones looked at that are not here yet); inside the runtime.
    pub fn ready_now<S: AsRef<str>>(
        self: &Arc<Self>,
        ids: impl Iterator<Item = S>,
        enough: usize,
    ) -> Result<Option<Vec<usize>>, GetError> {
        let mut ready = Vec::with_capacity(enough);
        for (at, id) in ids.enumerate() {
            if ready.len() >= enough {
                break;
            }
            if self.peek(id.as_ref())?.is_some() {
                ready.push(at);
            }
        }
        Ok((ready.len() >= enough).then_some(ready))
    }

    /// Fills `values` until `enough` are there (or `deadline` passes: a timeout naming the
    /// first missing), the first ones in order when more are ready. Missing objects are
    /// asked for as they are looked at; after a change only those still missing are looked
    /// at again. With `stop_on_error`, stops at the first value found that holds an error
    /// and answers its position.
    ///
    /// A `get` (every object needed, errors answered) looks, after a change, at the missing
    /// ones in order only up to the first still missing (all were looked at, and fetched, on
    /// the first pass): a get of a thousand results is not a thousand passes over the list.
    /// Only a new error, which must be answered wherever it is, makes it look at them all
    /// again. A `wait` looks at them all: at its deadline it answers which are ready.
    async fn settle(
        self: &Arc<Self>,
        ids: &[String],
        values: &mut [Option<Ready>],
        enough: usize,
        deadline: Option<Instant>,
        stop_on_error: bool,
    ) -> Result<Option<usize>, GetError> {
        let mut rx = self.changed.subscribe();
        let mut missing: Vec<usize> = (0..ids.len()).collect();
        let mut failures = self.failures.load(Ordering::SeqCst);
        let mut look_at_all = true;
        loop {
            let mut found = ids.len() - missing.len();
            let mut still = Vec::new();
            let mut unseen = missing.into_iter();
            // `wait` for one of a thousand refs mostly finds the first ready: the rest of
            // the list need not be looked at.
            for at in unseen.by_ref() {
                if found >= enough {
                    still.push(at);
                    break;
                }
                match self.peek(&ids[at])? {
                    Some(ready) => {
                        let failed = stop_on_error && ready.outcome != Outcome::Value;
                        values[at] = Some(ready);
                        if failed {
                            return Ok(Some(at));
                        }
                        found += 1;
                    }
                    None if look_at_all => still.push(at),
                    None => {
                        still.push(at);
                        break;
                    }
                }
            }
            still.extend(unseen);
            missing = still;
            let Some(first) = missing.first() else { return Ok(None) };
            if found >= enough {
                return Ok(None);
            }
            match deadline {
                Some(d) => {
                    if tokio::time::timeout_at(d, rx.changed()).await.is_err() {
                        return Err(GetError::Timeout(ids[*first].clone()));
                    }
                }
                None => {
                    let _ = rx.changed().await;
                }
            }
            let now = self.failures.load(Ordering::SeqCst);
            look_at_all = !stop_on_error || enough < ids.len() || now != failures;
            failures = now;
        }
    }
}
