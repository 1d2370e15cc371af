//! Ray's reference types, as the state API shows how each object is held here.

use super::Slot;

/// Ray's reference type of an object here, by Ray's precedence: an actor's handle, else
/// mapped by a value read without a copy, else an argument of a pending task, else a Python
/// reference, else inside another object, else none of those (only other processes hold it).
pub(super) fn reference_type(slot: &Slot, captured: u32, pinned: bool, actor_handle: bool) -> &'static str {
    let local = slot.refs.saturating_sub(slot.pending_tasks + slot.remote + captured);
    if actor_handle {
        "ACTOR_HANDLE"
    } else if pinned {
        "PINNED_IN_MEMORY"
    } else if slot.pending_tasks > 0 {
        "USED_BY_PENDING_TASK"
    } else if local > 0 {
        "LOCAL_REFERENCE"
    } else if captured > 0 {
        "CAPTURED_IN_OBJECT"
    } else {
        "UNKNOWN_STATUS"
    }
}
