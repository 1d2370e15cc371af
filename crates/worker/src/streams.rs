//! Streaming generators on the caller's side (`num_returns="streaming"`): the values a task
//! yields arrive as items before its reply; each becomes an object this process owns, and
//! the `ObjectRefGenerator` takes them in order. A retried task sends its items again from
//! the first: those already here are not taken twice.

use std::sync::Mutex;
use tokio::sync::watch;

#[derive(Default)]
pub(crate) struct Yielded {
    state: Mutex<State>,
    changed: watch::Sender<u64>,
}

#[derive(Default)]
struct State {
    /// The objects of the items, by index; each holds one reference for the generator
    /// until it takes the item.
    items: Vec<String>,
    taken: usize,
}

impl Yielded {
    /// Records the `index`-th item; `false` when it is here already (the task ran again).
    pub(crate) fn push(&self, index: usize, id: String) -> bool {
        let mut state = self.state.lock().expect("yielded lock");
        if index != state.items.len() {
            return false;
        }
        state.items.push(id);
        drop(state);
        self.changed.send_modify(|v| *v += 1);
        true
    }

    /// The `index`-th item, if here: its reference passes to the taker.
    pub(crate) fn take(&self, index: usize) -> Option<String> {
        let mut state = self.state.lock().expect("yielded lock");
        let id = state.items.get(index).cloned()?;
        state.taken = state.taken.max(index + 1);
        Some(id)
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The items never taken: their references are the generator's to drop.
    pub(crate) fn untaken(&self) -> Vec<String> {
        let state = self.state.lock().expect("yielded lock");
        state.items[state.taken..].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_in_order_once_and_untaken_ones_are_known() {
        let y = Yielded::default();
        assert!(y.take(0).is_none());
        assert!(y.push(0, "a".into()));
        assert!(!y.push(0, "a-again".into()), "a retried task's first item again");
        assert!(!y.push(2, "c".into()), "never out of order");
        assert!(y.push(1, "b".into()));
        assert_eq!(y.take(0).as_deref(), Some("a"));
        assert_eq!(y.untaken(), vec!["b".to_string()]);
        assert_eq!(y.take(1).as_deref(), Some("b"));
        assert!(y.untaken().is_empty());
    }
}
