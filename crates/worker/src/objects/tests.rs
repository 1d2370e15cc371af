use super::*;
use std::time::Duration;
use tokio::time::Instant;

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
        t.fulfil(&filler, b"v".to_vec(), Outcome::Value, Vec::new());
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
async fn get_answers_the_first_error_without_waiting_for_the_rest() {
    let table = Arc::new(ObjectTable::default());
    let slow = table.pending();
    let failed = table.pending();
    let t = table.clone();
    let failing = failed.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        t.fulfil(&failing, b"boom".to_vec(), Outcome::TaskError, Vec::new());
    });
    let got = table.get(&[slow.clone(), failed], Some(Instant::now() + Duration::from_secs(10))).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].data.as_slice(), got[0].outcome), (&b"boom"[..], Outcome::TaskError));
    table.fulfil(&slow, b"v".to_vec(), Outcome::Value, Vec::new());
    assert_eq!(table.get(&[slow], None).await.unwrap()[0].data.as_slice(), b"v");
}

/// Sets `ids[i]` to `outcomes[n]` in the order given, a few milliseconds apart.
fn fulfil_in_turn(table: &Arc<ObjectTable>, ids: &[String], order: Vec<(usize, Outcome)>) {
    let (t, ids) = (table.clone(), ids.to_vec());
    tokio::spawn(async move {
        for (i, outcome) in order {
            tokio::time::sleep(Duration::from_millis(5)).await;
            t.fulfil(&ids[i], vec![i as u8], outcome, Vec::new());
        }
    });
}

#[tokio::test]
async fn get_of_many_finds_values_in_any_order_and_an_error_behind_a_missing_one() {
    let table = Arc::new(ObjectTable::default());
    let deadline = Some(Instant::now() + Duration::from_secs(10));
    let ids: Vec<String> = (0..4).map(|_| table.pending()).collect();
    fulfil_in_turn(&table, &ids, [3, 1, 2, 0].map(|i| (i, Outcome::Value)).to_vec());
    let got = table.get(&ids, deadline).await.unwrap();
    assert_eq!(got.iter().map(|r| r.data[0]).collect::<Vec<_>>(), [0, 1, 2, 3]);
    // After a change that left the first missing, an error further on is still answered.
    let ids: Vec<String> = (0..3).map(|_| table.pending()).collect();
    fulfil_in_turn(&table, &ids, vec![(1, Outcome::Value), (2, Outcome::TaskError)]);
    let got = table.get(&ids, deadline).await.unwrap();
    assert_eq!((got.len(), got[0].data[0], got[0].outcome), (1, 2, Outcome::TaskError));
}

#[tokio::test]
async fn wait_for_all_answers_at_its_deadline_which_are_ready() {
    let table = Arc::new(ObjectTable::default());
    let ids: Vec<String> = (0..3).map(|_| table.pending()).collect();
    fulfil_in_turn(&table, &ids, vec![(2, Outcome::Value), (1, Outcome::Value)]);
    let ready = table.wait(&ids, 3, Some(Instant::now() + Duration::from_millis(300))).await.unwrap();
    assert_eq!(ready, [false, true, true], "those behind a missing one are looked at too");
}

#[tokio::test]
async fn a_value_given_twice_keeps_the_first() {
    let table = Arc::new(ObjectTable::default());
    let id = table.pending();
    table.fulfil(&id, CANCELLED_FOR_TEST.to_vec(), Outcome::SystemError, Vec::new());
    table.fulfil(&id, b"late".to_vec(), Outcome::Value, Vec::new());
    let got = table.get(std::slice::from_ref(&id), None).await.unwrap();
    assert_eq!((got[0].data.as_slice(), got[0].outcome), (CANCELLED_FOR_TEST, Outcome::SystemError));
}

const CANCELLED_FOR_TEST: &[u8] = b"cancelled";

#[tokio::test]
async fn on_free_runs_when_the_last_reference_goes() {
    let table = Arc::new(ObjectTable::default());
    let id = table.put(b"v".to_vec(), &[]);
    table.add_ref(&id);
    table.add_ref(&id);
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = ran.clone();
    table.on_free(
        &id,
        Box::new(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }),
    );
    table.release(&id);
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 0, "one reference is left");
    table.release(&id);
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 1);
    let counter = ran.clone();
    table.on_free(
        "gone",
        Box::new(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }),
    );
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 2, "an object not here runs it at once");
}

#[tokio::test]
async fn wait_returns_once_enough_are_ready() {
    let table = Arc::new(ObjectTable::default());
    let a = table.put(b"a".to_vec(), &[]);
    let b = table.pending();
    assert_eq!(table.wait(&[a.clone(), b.clone()], 1, None).await.unwrap(), vec![true, false]);
    let soon = Some(Instant::now() + Duration::from_millis(30));
    assert_eq!(table.wait(&[a.clone(), b.clone()], 2, soon).await.unwrap(), vec![true, false]);
    let c = table.put(b"c".to_vec(), &[]);
    let first_ready = table.wait(&[b.clone(), a.clone(), c.clone()], 1, None).await.unwrap();
    assert_eq!(first_ready, vec![false, true, false], "the first ready in order, and no more than asked");
    assert_eq!(table.wait(&[b, c, a], 2, None).await.unwrap(), vec![false, true, true]);
}

#[tokio::test]
async fn objects_inside_others_live_as_long_as_their_container() {
    let table = Arc::new(ObjectTable::default());
    let inner = table.put(b"inner".to_vec(), &[]);
    table.add_ref(&inner);
    let outer = table.put(b"outer".to_vec(), std::slice::from_ref(&inner));
    table.add_ref(&outer);
    table.release(&inner);
    assert!(table.get(std::slice::from_ref(&inner), None).await.is_ok(), "the container holds it");
    table.release(&outer);
    assert!(table.is_empty(), "both go with the container");
}

#[tokio::test]
async fn entries_say_how_each_object_is_held_in_ray_s_precedence() {
    let table = Arc::new(ObjectTable::default());
    let type_of = |id: &str| {
        let (entries, _) = table.entries(usize::MAX, &HashSet::new());
        entries.into_iter().find(|e| e.object_id == id).map(|e| e.reference_type)
    };
    let arg = table.put(b"arg".to_vec(), &[]);
    table.add_ref(&arg);
    assert_eq!(type_of(&arg).as_deref(), Some("LOCAL_REFERENCE"));
    table.add_use(&arg, Use::PendingTask);
    assert_eq!(type_of(&arg).as_deref(), Some("USED_BY_PENDING_TASK"), "before the Python reference");
    table.release_use(&arg, Use::PendingTask);
    let outer = table.put(b"outer".to_vec(), std::slice::from_ref(&arg));
    table.add_ref(&outer);
    assert_eq!(type_of(&arg).as_deref(), Some("LOCAL_REFERENCE"));
    table.release(&arg);
    assert_eq!(type_of(&arg).as_deref(), Some("CAPTURED_IN_OBJECT"), "only its container holds it");
    table.add_use(&outer, Use::Remote);
    table.release(&outer);
    assert_eq!(type_of(&outer).as_deref(), Some("UNKNOWN_STATUS"), "only another process holds it");
    let type_pinned = |id: &str| {
        let (entries, _) = table.entries(usize::MAX, &HashSet::from([id.to_string()]));
        entries.into_iter().find(|e| e.object_id == id).map(|e| e.reference_type)
    };
    assert_eq!(type_pinned(&outer).as_deref(), Some("PINNED_IN_MEMORY"), "its file mapped to read");
    table.mark_actor_handle(&outer);
    assert_eq!(type_pinned(&outer).as_deref(), Some("ACTOR_HANDLE"), "before a pin");
    table.release_use(&outer, Use::Remote);
    assert!(table.is_empty());
}

/// Owners that answer from a map and record the changes they are sent.
#[derive(Default)]
struct FakeOwners {
    values: Mutex<HashMap<String, Vec<u8>>>,
    fetches: Mutex<u32>,
    changes: Mutex<Vec<(String, String, i32)>>,
}

impl Owners for FakeOwners {
    fn fetch(&self, id: String, _owner: String) -> Pin<Box<dyn Future<Output = Ready> + Send>> {
        *self.fetches.lock().unwrap() += 1;
        let value = self.values.lock().unwrap().get(&id).cloned();
        Box::pin(async move {
            match value {
                Some(data) => Ready { data: Arc::new(data), outcome: Outcome::Value },
                None => Ready::lost(format!("{id} was freed")),
            }
        })
    }

    fn update(&self, owner: String, changes: Vec<(String, i32)>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut log = self.changes.lock().unwrap();
        log.extend(changes.into_iter().map(|(id, d)| (owner.clone(), id, d)));
        Box::pin(async {})
    }
}

fn with_owners() -> (Arc<ObjectTable>, Arc<FakeOwners>) {
    let table = Arc::new(ObjectTable::default());
    let owners = Arc::new(FakeOwners::default());
    table.set_owners(owners.clone());
    (table, owners)
}

#[tokio::test]
async fn borrowed_objects_are_fetched_once_and_announced_once() {
    let (table, owners) = with_owners();
    owners.values.lock().unwrap().insert("x".into(), b"remote".to_vec());
    assert!(table.borrow("x", "owner:1"));
    assert!(!table.borrow("x", "owner:1"), "a second reference is local");
    table.announce().await;
    let ids = ["x".to_string()];
    assert_eq!(table.get(&ids, None).await.unwrap()[0].data.as_slice(), b"remote");
    assert_eq!(table.get(&ids, None).await.unwrap()[0].data.as_slice(), b"remote");
    assert_eq!(*owners.fetches.lock().unwrap(), 1, "the value is kept while borrowed");
    table.release("x");
    table.release("x");
    tokio::task::yield_now().await;
    let log = owners.changes.lock().unwrap().clone();
    assert_eq!(log, [("owner:1".into(), "x".into(), 1), ("owner:1".into(), "x".into(), -1)]);
}

#[tokio::test]
async fn a_borrow_dropped_before_it_was_announced_costs_the_owner_nothing() {
    let (table, owners) = with_owners();
    table.borrow("y", "owner:2");
    table.release("y");
    table.announce().await;
    tokio::task::yield_now().await;
    assert!(owners.changes.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_freed_remote_object_is_lost_not_awaited_forever() {
    let (table, _owners) = with_owners();
    table.borrow("gone", "owner:3");
    let got = table.get(&["gone".to_string()], None).await.unwrap();
    assert_eq!(got[0].outcome, Outcome::Lost);
}

#[tokio::test]
async fn remote_holds_are_given_back_when_the_container_goes() {
    let (table, owners) = with_owners();
    let result = table.pending();
    table.add_ref(&result);
    let hold = Hold::Remote { id: "z".into(), owner: "owner:4".into() };
    table.fulfil(&result, b"[ref]".to_vec(), Outcome::Value, vec![hold]);
    table.release(&result);
    tokio::task::yield_now().await;
    assert_eq!(owners.changes.lock().unwrap().clone(), [("owner:4".into(), "z".into(), -1)]);
}

#[tokio::test]
async fn refs_read_from_a_result_ride_on_the_hold_the_task_took() {
    let (table, owners) = with_owners();
    let result = table.pending();
    table.add_ref(&result);
    let hold = table.adopt("w".into(), "owner:5".into(), Some("me:1"));
    assert_eq!(hold, Hold::Local("w".into()));
    table.fulfil(&result, b"[ref]".to_vec(), Outcome::Value, vec![hold]);
    assert!(!table.borrow("w", "owner:5"), "the result's hold already counts at the owner");
    table.release("w");
    table.announce().await;
    tokio::task::yield_now().await;
    assert!(owners.changes.lock().unwrap().is_empty());
    table.release(&result);
    tokio::task::yield_now().await;
    assert_eq!(owners.changes.lock().unwrap().clone(), [("owner:5".into(), "w".into(), -1)]);
}

#[tokio::test]
async fn a_result_holding_refs_owned_here_or_borrowed_already_counts_them_as_before() {
    let (table, _owners) = with_owners();
    let own = table.put(b"mine".to_vec(), &[]);
    assert_eq!(table.adopt(own.clone(), "me:1".into(), Some("me:1")), Hold::Local(own));
    table.borrow("b", "owner:6");
    let again = table.adopt("b".into(), "owner:6".into(), Some("me:1"));
    assert_eq!(again, Hold::Remote { id: "b".into(), owner: "owner:6".into() });
}
