//! The processes that own objects (drivers and workers), as each announced itself when it
//! started serving them: the state API asks each for the objects it holds references to.

use oxray_proto::v1;
use oxray_rpc::{connect_objects_lazy, Token};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Processes remembered at most (the oldest announced are forgotten first).
pub const MAX_PROCESSES: usize = 10_000;
/// Objects asked of one process at most.
const PER_PROCESS: u32 = 100_000;
/// How long connecting to a process may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

struct Known {
    info: v1::ProcessInfo,
    /// Announcement order: smaller is older.
    order: u64,
}

pub struct Processes {
    table: Mutex<(HashMap<String, Known>, u64)>,
    token: Token,
}

/// A reference held in a process, as a row of Ray's state API (`ObjectState`).
pub fn object_row(process: &v1::ProcessInfo, entry: &v1::ObjectEntry) -> Value {
    // The owner knows how its object's task went; a borrower does not (Ray's NIL).
    let (task_status, attempt_number) = match (entry.owned, entry.ready) {
        (true, true) => ("FINISHED", 1),
        (true, false) => ("SCHEDULED", 1),
        (false, _) => ("NIL", 0),
    };
    json!({
        "object_id": entry.object_id,
        "object_size": entry.size,
        "task_status": task_status,
        "attempt_number": attempt_number,
        "reference_type": if entry.reference_type.is_empty() { "LOCAL_REFERENCE" } else { &entry.reference_type },
        "call_site": "disabled",
        "type": process.kind,
        "pid": process.pid,
        "ip": process.ip,
    })
}

impl Processes {
    pub fn new(token: Token) -> Self {
        Self { table: Mutex::default(), token }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<String, Known>, u64)> {
        self.table.lock().expect("processes lock")
    }

    pub fn announce(&self, info: v1::ProcessInfo) {
        let mut table = self.lock();
        let (known, next) = &mut *table;
        *next += 1;
        known.insert(info.address.clone(), Known { info, order: *next });
        if known.len() > MAX_PROCESSES {
            let oldest = known.iter().min_by_key(|(_, k)| k.order).map(|(a, _)| a.clone());
            known.remove(&oldest.expect("not empty"));
        }
    }

    fn forget(&self, address: &str) {
        self.lock().0.remove(address);
    }

    /// Every object reference of every live process, and what could not be listed. A
    /// process whose address refuses connections has ended: it is forgotten. One that is
    /// slow to answer is named in the warning and asked again next time.
    pub async fn object_rows(&self, timeout: Duration) -> (Vec<Value>, String) {
        let processes: Vec<v1::ProcessInfo> = self.lock().0.values().map(|k| k.info.clone()).collect();
        let asks = processes.iter().map(|p| async move {
            let gone = |e: String| (true, e);
            let mut client = connect_objects_lazy(&p.address, &self.token, CONNECT_TIMEOUT.min(timeout))
                .map_err(|e| gone(e.to_string()))?;
            let request = v1::ListObjectsRequest { limit: PER_PROCESS };
            match tokio::time::timeout(timeout, client.list_objects(request)).await {
                Ok(Ok(reply)) => Ok(reply.into_inner()),
                Ok(Err(status)) => Err((status.code() == tonic::Code::Unavailable, status.message().to_string())),
                Err(_) => Err((false, format!("no answer within {timeout:?}"))),
            }
        });
        let replies = futures_util::future::join_all(asks).await;
        let (mut rows, mut truncated, mut slow) = (Vec::new(), 0u64, Vec::new());
        for (process, reply) in processes.iter().zip(replies) {
            match reply {
                Ok(reply) => {
                    truncated += reply.total.saturating_sub(reply.objects.len() as u64);
                    rows.extend(reply.objects.iter().map(|o| object_row(process, o)));
                }
                Err((true, e)) => {
                    tracing::debug!(address = %process.address, pid = process.pid, "process forgotten: {e}");
                    self.forget(&process.address);
                }
                Err((false, e)) => slow.push(format!("pid {} at {} ({e})", process.pid, process.ip)),
            }
        }
        let mut warnings = Vec::new();
        if truncated > 0 {
            warnings
                .push(format!("{truncated} object references are not shown: a process lists at most {PER_PROCESS}"));
        }
        if !slow.is_empty() {
            warnings.push(format!("the objects of these processes are missing: {}", slow.join(", ")));
        }
        (rows, warnings.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(address: &str) -> v1::ProcessInfo {
        v1::ProcessInfo {
            address: address.into(),
            pid: 7,
            ip: "10.0.0.1".into(),
            kind: "DRIVER".into(),
            ..Default::default()
        }
    }

    #[test]
    fn rows_say_who_holds_what_as_ray_does() {
        let owned = v1::ObjectEntry {
            object_id: "o".into(),
            size: 10,
            owned: true,
            ready: true,
            refs: 1,
            spilled: false,
            reference_type: "CAPTURED_IN_OBJECT".into(),
        };
        let row = object_row(&info("a:1"), &owned);
        assert_eq!(
            (row["task_status"].clone(), row["type"].clone(), row["pid"].clone()),
            (json!("FINISHED"), json!("DRIVER"), json!(7))
        );
        assert_eq!(row["reference_type"], "CAPTURED_IN_OBJECT");
        let older = v1::ObjectEntry { reference_type: String::new(), ..owned.clone() };
        assert_eq!(object_row(&info("a:1"), &older)["reference_type"], "LOCAL_REFERENCE", "a process that says none");
        let borrowed = v1::ObjectEntry { owned: false, ready: false, size: -1, ..owned };
        let row = object_row(&info("a:1"), &borrowed);
        assert_eq!(
            (row["task_status"].clone(), row["attempt_number"].clone(), row["object_size"].clone()),
            (json!("NIL"), json!(0), json!(-1))
        );
    }

    #[test]
    fn the_oldest_process_is_forgotten_past_the_bound() {
        let processes = Processes::new(Token::parse("t".repeat(32).as_str()).unwrap());
        for i in 0..=MAX_PROCESSES {
            processes.announce(info(&format!("h:{}", i + 1)));
        }
        let table = processes.lock();
        assert_eq!(table.0.len(), MAX_PROCESSES);
        assert!(!table.0.contains_key("h:1") && table.0.contains_key("h:2"));
    }
}
