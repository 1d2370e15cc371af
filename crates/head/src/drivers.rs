//! The drivers that connected to the cluster, each with the job id the head gave it (Ray's
//! JobID: "01000000", "02000000", ...). A driver holds a stream to the head open while it
//! lives: its job is RUNNING until the last of its streams ends, then SUCCEEDED, as Ray shows
//! a driver that disconnected (never FAILED: the head cannot tell how a process ended). A
//! driver run by a job submission shares the submission's job id, and its row is the
//! submission's own.

use crate::store::{off_thread, Store, StoreError};
use oxray_api_types::{DriverInfo, JobDetails};
use oxray_proto::v1;
use oxray_types::{now_ms, JobId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Drivers remembered at most: the oldest that ended are forgotten first.
const MAX_DRIVERS: usize = 10_000;
/// After a head restart, how long a driver that was running has to register again before
/// its job is taken as ended (drivers retry every second).
pub const REREGISTER_GRACE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriverRecord {
    pub job: u32,
    #[serde(default)]
    pub submission_id: Option<String>,
    pub pid: u32,
    pub node_id: String,
    pub ip: String,
    pub entrypoint: String,
    pub start_time: u64,
    pub end_time: Option<u64>,
}

impl DriverRecord {
    /// The row of Ray's `ray list jobs` for a driver not run by a submission.
    pub fn details(&self) -> JobDetails {
        let job_id = JobId(self.job).hex();
        JobDetails {
            kind: "DRIVER",
            job_id: Some(job_id.clone()),
            submission_id: None,
            driver_info: Some(DriverInfo { id: job_id, node_ip_address: self.ip.clone(), pid: self.pid.to_string() }),
            status: if self.end_time.is_some() { "SUCCEEDED" } else { "RUNNING" },
            entrypoint: self.entrypoint.clone(),
            message: None,
            error_type: None,
            start_time: Some(self.start_time),
            end_time: self.end_time,
            metadata: Some(BTreeMap::new()),
            runtime_env: Some(serde_json::Map::new()),
            driver_agent_http_address: None,
            driver_node_id: Some(self.node_id.clone()).filter(|n| !n.is_empty()),
            driver_exit_code: None,
        }
    }
}

#[derive(Default)]
struct Table {
    records: BTreeMap<u32, DriverRecord>,
    /// Streams open per job: a submission's several drivers share one job.
    open: HashMap<u32, usize>,
    by_submission: HashMap<String, u32>,
}

impl Table {
    fn from_records(records: Vec<DriverRecord>) -> Self {
        let mut table = Table::default();
        for record in records {
            if let Some(id) = &record.submission_id {
                table.by_submission.insert(id.clone(), record.job);
            }
            table.records.insert(record.job, record);
        }
        table
    }
}

/// What a registration does to the table: a pure decision, applied by `Drivers`.
#[derive(Debug, PartialEq)]
enum Registration {
    /// The driver had this job already (it registers again after a head restart), or it
    /// runs in a submission that has one.
    Rejoin(u32),
    New(u32),
}

fn decide(table: &Table, info: &v1::DriverInfo) -> Registration {
    if let Some(job) = JobId::parse(&info.job_id).filter(|j| table.records.contains_key(&j.0)) {
        return Registration::Rejoin(job.0);
    }
    if let Some(&job) = table.by_submission.get(&info.submission_id) {
        return Registration::Rejoin(job);
    }
    // Ids are never reused: the newest record holds the largest, even after pruning.
    Registration::New(table.records.keys().next_back().map_or(1, |last| last + 1))
}

/// The oldest ended records past `MAX_DRIVERS`.
fn pruned(table: &Table) -> Vec<u32> {
    let over = table.records.len().saturating_sub(MAX_DRIVERS);
    table.records.values().filter(|r| r.end_time.is_some()).take(over).map(|r| r.job).collect()
}

/// One open stream of a driver's job. Dropping it ends the stream's part in the job, however
/// the stream ended (the driver went away, or the head's handler was dropped mid-way).
pub struct Claim {
    drivers: Arc<Drivers>,
    job: JobId,
    kept: bool,
}

impl Claim {
    /// The head is stopping: the job stays RUNNING for its driver to claim at the next head.
    pub fn keep_open(mut self) {
        self.kept = true;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        let (drivers, job) = (self.drivers.clone(), self.job);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { drivers.disconnected(job).await });
        }
    }
}

pub struct Drivers {
    table: Mutex<Table>,
    store: Arc<Store>,
    /// Writes land in the order they are decided.
    writer: tokio::sync::Mutex<()>,
}

impl Drivers {
    pub fn open(store: Arc<Store>) -> Result<Self, StoreError> {
        let table = Table::from_records(store.load_drivers::<DriverRecord>()?);
        Ok(Self { table: Mutex::new(table), store, writer: tokio::sync::Mutex::new(()) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().expect("drivers lock")
    }

    /// A driver connected: its job, new or kept, and its claim on it, held while its stream
    /// is open.
    pub async fn register(self: &Arc<Self>, info: v1::DriverInfo) -> Result<(JobId, Claim), StoreError> {
        let _writing = self.writer.lock().await;
        let (record, gone) = {
            let mut table = self.lock();
            let job = match decide(&table, &info) {
                Registration::Rejoin(job) => {
                    let record = table.records.get_mut(&job).expect("decided from the table");
                    record.end_time = None;
                    job
                }
                Registration::New(job) => {
                    let submission_id = Some(info.submission_id.clone()).filter(|s| !s.is_empty());
                    if let Some(id) = &submission_id {
                        table.by_submission.insert(id.clone(), job);
                    }
                    let record = DriverRecord {
                        job,
                        submission_id,
                        pid: info.pid,
                        node_id: info.node_id,
                        ip: info.ip,
                        entrypoint: info.entrypoint,
                        start_time: now_ms(),
                        end_time: None,
                    };
                    table.records.insert(job, record);
                    job
                }
            };
            *table.open.entry(job).or_default() += 1;
            let gone = pruned(&table);
            for job in &gone {
                if let Some(DriverRecord { submission_id: Some(id), .. }) = table.records.remove(job) {
                    table.by_submission.remove(&id);
                }
            }
            (table.records[&job].clone(), gone)
        };
        let job = JobId(record.job);
        // Made before the write: a failed write, or a handler dropped while it waits, gives
        // the stream's part back.
        let claim = Claim { drivers: self.clone(), job, kept: false };
        off_thread(&self.store, move |store| store.put_driver(record.job, &record, &gone)).await?;
        Ok((job, claim))
    }

    /// One of the job's streams ended: the job ends with its last.
    pub async fn disconnected(&self, job: JobId) {
        let _writing = self.writer.lock().await;
        let ended = {
            let mut table = self.lock();
            let open = table.open.entry(job.0).or_default();
            *open = open.saturating_sub(1);
            if *open > 0 {
                return;
            }
            table.open.remove(&job.0);
            table.records.get_mut(&job.0).map(|record| {
                record.end_time = Some(now_ms());
                record.clone()
            })
        };
        if let Some(record) = ended {
            tracing::info!(job = %job.hex(), pid = record.pid, "driver disconnected");
            if let Err(e) = off_thread(&self.store, move |store| store.put_driver(record.job, &record, &[])).await {
                tracing::warn!("cannot record the end of job {}: {e}", job.hex());
            }
        }
    }

    /// Ends the jobs of drivers that were running before the head restarted and did not
    /// register again within `grace`.
    pub async fn end_unclaimed(&self, grace: Duration) {
        let running: Vec<u32> = self.lock().records.values().filter(|r| r.end_time.is_none()).map(|r| r.job).collect();
        tokio::time::sleep(grace).await;
        for job in running {
            let unclaimed = {
                let mut table = self.lock();
                let running = table.records.get(&job).is_some_and(|r| r.end_time.is_none());
                // As if its stream had just ended.
                running && !table.open.contains_key(&job) && table.open.insert(job, 1).is_none()
            };
            if unclaimed {
                self.disconnected(JobId(job)).await;
            }
        }
    }

    /// The job id of a submission's driver, once one registered.
    pub fn job_of_submission(&self, submission_id: &str) -> Option<JobId> {
        self.lock().by_submission.get(submission_id).map(|&j| JobId(j))
    }

    /// A deleted submission's id may be used again: its next driver gets a job of its own.
    pub fn forget_submission(&self, submission_id: &str) {
        self.lock().by_submission.remove(submission_id);
    }

    /// The submission that runs job `job`, if any.
    pub fn submission_of(&self, job: JobId) -> Option<String> {
        self.lock().records.get(&job.0).and_then(|r| r.submission_id.clone())
    }

    /// Rows for drivers not run by a submission, oldest first.
    pub fn rows(&self) -> Vec<JobDetails> {
        self.lock().records.values().filter(|r| r.submission_id.is_none()).map(DriverRecord::details).collect()
    }

    pub fn row(&self, job: JobId) -> Option<JobDetails> {
        self.lock().records.get(&job.0).filter(|r| r.submission_id.is_none()).map(DriverRecord::details)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(job_id: &str, submission_id: &str) -> v1::DriverInfo {
        v1::DriverInfo { job_id: job_id.into(), submission_id: submission_id.into(), pid: 7, ..Default::default() }
    }

    fn record(job: u32, submission_id: Option<&str>, ended: bool) -> DriverRecord {
        DriverRecord {
            job,
            submission_id: submission_id.map(str::to_string),
            pid: 7,
            node_id: String::new(),
            ip: "10.0.0.1".into(),
            entrypoint: "python a.py".into(),
            start_time: 1,
            end_time: ended.then_some(2),
        }
    }

    #[test]
    fn ids_count_up_and_are_kept_by_drivers_and_submissions() {
        assert_eq!(decide(&Table::default(), &info("", "")), Registration::New(1));
        let t = Table::from_records(vec![record(1, None, true), record(2, Some("raysubmit_a"), false)]);
        assert_eq!(decide(&t, &info("", "")), Registration::New(3));
        assert_eq!(decide(&t, &info("01000000", "")), Registration::Rejoin(1));
        assert_eq!(decide(&t, &info("", "raysubmit_a")), Registration::Rejoin(2));
        // An id the head never gave (its database was wiped) is not taken on trust.
        assert_eq!(decide(&t, &info("09000000", "")), Registration::New(3));
    }

    #[test]
    fn only_ended_records_past_the_cap_are_pruned_oldest_first() {
        let mut records: Vec<DriverRecord> = (1..=MAX_DRIVERS as u32).map(|j| record(j, None, j != 1)).collect();
        records.push(record(MAX_DRIVERS as u32 + 1, None, false));
        records.push(record(MAX_DRIVERS as u32 + 2, None, false));
        assert_eq!(pruned(&Table::from_records(records)), vec![2, 3]);
    }

    #[test]
    fn a_driver_row_is_rays_shape() {
        let row = serde_json::to_value(record(1, None, false).details()).unwrap();
        assert_eq!(row["type"], "DRIVER");
        assert_eq!(row["job_id"], "01000000");
        assert_eq!(row["status"], "RUNNING");
        assert_eq!(row["driver_info"]["id"], "01000000");
        assert_eq!(row["submission_id"], serde_json::Value::Null);
        assert_eq!(serde_json::to_value(record(1, None, true).details()).unwrap()["status"], "SUCCEEDED");
    }
}
