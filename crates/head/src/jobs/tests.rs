//! The job loop against in-process fake agents.

use super::*;
use std::collections::VecDeque;
use tonic::Status;

pub fn sample_job(id: &str) -> JobRecord {
    JobRecord::pending(id.into(), "echo hi".into(), now_ms())
}

/// Agents that note the starts and stops asked of them and answer from a script (`Ok`
/// once the script is out).
#[derive(Default)]
struct FakeAgents {
    asked: Mutex<Vec<String>>,
    starts: Mutex<VecDeque<Result<(), Status>>>,
}

#[tonic::async_trait]
impl AgentJobs for FakeAgents {
    async fn start_job(&self, agent: &str, r: v1::StartJobRequest) -> Result<(), Status> {
        self.asked.lock().unwrap().push(format!("start {agent} {}", r.submission_id));
        self.starts.lock().unwrap().pop_front().unwrap_or(Ok(()))
    }
    async fn stop_job(&self, agent: &str, r: v1::StopJobRequest) -> Result<bool, Status> {
        self.asked.lock().unwrap().push(format!("stop {agent} {}", r.submission_id));
        Ok(true)
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    agents: Arc<FakeAgents>,
    jobs: Arc<JobManager>,
}

impl Fixture {
    async fn new(cpus: f64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let agents = Arc::new(FakeAgents::default());
        let jobs = Self::open(&dir, agents.clone());
        let mut node = crate::membership::tests::node_with(cpus);
        node.is_head_node = true;
        jobs.membership.register(node).await.unwrap();
        Self { dir, agents, jobs }
    }

    fn open(dir: &tempfile::TempDir, agents: Arc<FakeAgents>) -> Arc<JobManager> {
        let store = Arc::new(Store::open(&dir.path().join("db")).unwrap());
        let events = Arc::new(Events::open(store.clone()).unwrap());
        let membership = Arc::new(Membership::open(store.clone(), events.clone(), Duration::from_secs(60)).unwrap());
        let packages = Packages::open(&dir.path().join("packages")).unwrap();
        let copies = crate::job_log_copies::LogCopies::open(dir.path().join("joblogs")).unwrap();
        Arc::new(JobManager::open(store, membership, events, packages, Token::generate(), agents, copies).unwrap())
    }

    async fn submit(&self, id: &str, cpus: f64) {
        let request = SubmitRequest {
            entrypoint: "echo hi".into(),
            submission_id: Some(id.into()),
            runtime_env: Default::default(),
            parsed_env: Default::default(),
            metadata: Default::default(),
            resources: [("CPU".to_string(), cpus)].into_iter().collect(),
        };
        self.jobs.submit(request).await.unwrap();
    }

    /// A round, and the starts it decided sent.
    async fn round(&self) {
        for d in self.jobs.round().await {
            self.jobs.clone().dispatch(d).await;
        }
    }

    fn asked(&self) -> Vec<String> {
        std::mem::take(&mut *self.agents.asked.lock().unwrap())
    }

    fn job(&self, id: &str) -> JobRecord {
        self.jobs.lock().records[id].clone()
    }
}

#[tokio::test]
async fn a_job_is_started_on_the_node_its_round_chose_and_that_choice_is_on_disk() {
    let f = Fixture::new(2.0).await;
    f.submit("j1", 1.0).await;
    f.round().await;
    assert_eq!(f.asked(), vec!["start 127.0.0.1:7000 j1"]);
    f.round().await;
    assert!(f.asked().is_empty(), "an acknowledged start is not sent again");
    let node = f.job("j1").driver_node_id.expect("placed");
    drop(f.jobs);
    let reopened = Fixture::open(&f.dir, f.agents.clone());
    assert_eq!(reopened.lock().records["j1"].driver_node_id, Some(node));
}

#[tokio::test]
async fn an_agent_out_of_reach_is_asked_again_and_one_that_refuses_fails_the_job() {
    let f = Fixture::new(2.0).await;
    f.agents
        .starts
        .lock()
        .unwrap()
        .extend([Err(Status::unavailable("connection refused")), Err(Status::failed_precondition("no such python"))]);
    f.submit("j1", 1.0).await;
    f.round().await;
    assert_eq!(f.job("j1").status, JobStatus::Pending);
    f.round().await;
    assert_eq!(f.asked(), vec!["start 127.0.0.1:7000 j1", "start 127.0.0.1:7000 j1"]);
    let failed = f.job("j1");
    assert_eq!(failed.status, JobStatus::Failed);
    assert_eq!(failed.error_type.as_deref(), Some(error_types::START_ERROR));
}

#[tokio::test]
async fn a_waiting_job_stops_where_it_is_and_a_placed_one_is_stopped_by_its_agent_and_never_started() {
    let f = Fixture::new(2.0).await;
    // The first start does not reach the agent: the placed job is to be sent again.
    f.agents.starts.lock().unwrap().push_back(Err(Status::unavailable("connection refused")));
    f.submit("big", 2.0).await;
    f.submit("waits", 2.0).await;
    f.round().await;
    assert!(f.jobs.stop("waits").await.unwrap());
    assert_eq!(f.job("waits").status, JobStatus::Stopped);
    assert!(f.jobs.stop("big").await.unwrap());
    assert_eq!(f.asked(), vec!["start 127.0.0.1:7000 big", "stop 127.0.0.1:7000 big"]);
    assert!(f.job("big").stop_requested);
    f.round().await;
    assert!(f.asked().is_empty(), "a job being stopped is not started again");
}
