use crate::BIN;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// An isolated oxray home and temp dir; whatever a test starts is force-stopped at the end.
struct Machine {
    dir: tempfile::TempDir,
}

impl Machine {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().unwrap() }
    }

    fn home(&self) -> std::path::PathBuf {
        self.dir.path().join("home")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("OXRAY_HOME", self.home())
            .env("OXRAY_TEMP_DIR", self.dir.path().join("tmp"))
            .env_remove("OXRAY_ADDRESS")
            .env_remove("OXRAY_AUTH_TOKEN")
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Pids of the servers this machine's oxray recorded.
    fn server_pids(&self) -> Vec<u32> {
        oxray_config::procs::list_running(&self.home()).iter().map(|r| r.pid).collect()
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        let _ = self.run(&["stop", "--force"]);
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "failed: {}\n{}", text(&out.stderr), text(&out.stdout));
    text(&out.stdout)
}

fn fails(out: &Output, code: i32, needle: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
}

fn gone(pid: u32) -> bool {
    oxray_config::procs::start_ticks(pid).is_none()
}

fn wait_gone(pids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pids.iter().all(|p| gone(*p)) {
        assert!(Instant::now() < deadline, "processes left behind: {pids:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn start_head(m: &Machine) -> String {
    let out = ok(&m.run(&[
        "start",
        "--head",
        "--port",
        "0",
        "--dashboard-port",
        "0",
        "--num-cpus",
        "2",
        "--node-ip-address",
        "127.0.0.1",
    ]));
    assert!(out.contains("oxray start --address='127.0.0.1:"), "{out}");
    let current: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.home().join("current_cluster.json")).unwrap()).unwrap();
    current["address"].as_str().unwrap().to_string()
}

#[test]
fn start_join_status_list_and_stop() {
    let m = Machine::new();
    let address = start_head(&m);

    let token = ok(&m.run(&["get-auth-token"])).trim().to_string();
    assert_eq!(token.len(), 64);
    assert_eq!(mode(&m.home().join("auth_token")), 0o600);
    let session = std::fs::read_link(m.dir.path().join("tmp/session_latest")).unwrap();
    assert_eq!(mode(&m.dir.path().join("tmp").join(session).join("auth_token")), 0o600);

    ok(&m.run(&["start", "--address", &address, "--num-cpus", "1", "--labels", "zone=a", "--node-name", "worker-1"]));

    let status = ok(&m.run(&["status"]));
    assert!(status.contains("Alive:"), "{status}");
    assert!(status.contains(" 0.0/3.0 CPU"), "{status}");
    assert!(status.contains("(no dead nodes)"), "{status}");

    let rows: serde_json::Value = serde_json::from_str(&ok(&m.run(&["list", "nodes", "--format", "json"]))).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 2);
    let workers: serde_json::Value = serde_json::from_str(&ok(&m.run(&[
        "list",
        "nodes",
        "--format",
        "json",
        "--filter",
        "is_head_node=false",
        "--detail",
    ])))
    .unwrap();
    let worker = &workers[0];
    assert_eq!(workers.as_array().unwrap().len(), 1);
    assert_eq!(worker["node_name"], "worker-1");
    assert_eq!(worker["labels"]["zone"], "a");
    assert!(worker["start_time_ms"].as_u64().unwrap() > 0);
    let table = ok(&m.run(&["list", "nodes"]));
    assert!(table.starts_with("NODE_ID"), "{table}");
    assert!(ok(&m.run(&["list", "nodes", "--format", "yaml"])).contains("node_id: "));

    let pids = m.server_pids();
    assert_eq!(pids.len(), 3, "head, head's agent, worker agent");
    let out = ok(&m.run(&["stop"]));
    assert!(out.contains("Stopped 3 oxray processes"), "{out}");
    wait_gone(&pids);
    assert!(m.server_pids().is_empty());
    fails(&m.run(&["status"]), 1, "no cluster to talk to");
    assert!(ok(&m.run(&["stop"])).contains("No oxray processes"));
}

/// A head started with `--block`, once it announced itself; the pids of its node's servers.
fn start_blocking(m: &Machine) -> (std::process::Child, Vec<u32>) {
    let mut child = m
        .command(&["start", "--head", "--block", "--port", "0", "--dashboard-port", "0", "--num-cpus", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    assert!(lines.any(|l| l.unwrap().contains("--block")), "start --block announced itself");
    let pids = m.server_pids();
    assert_eq!(pids.len(), 2);
    (child, pids)
}

#[test]
fn block_stays_in_the_foreground_until_sigterm() {
    let m = Machine::new();
    let (mut child, pids) = start_blocking(&m);
    assert!(child.try_wait().unwrap().is_none(), "still in the foreground");

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    wait_gone(&pids);
}

#[test]
fn a_killed_block_takes_its_node_with_it() {
    let m = Machine::new();
    let (mut child, pids) = start_blocking(&m);
    child.kill().unwrap();
    child.wait().unwrap();
    wait_gone(&pids);
}

fn free_port() -> String {
    std::net::TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port().to_string()
}

fn job_ids(m: &Machine) -> Vec<String> {
    let list: serde_json::Value = serde_json::from_str(&ok(&m.run(&["job", "list", "--format", "json"]))).unwrap();
    list.as_array().unwrap().iter().map(|j| j["submission_id"].as_str().unwrap().to_string()).collect()
}

fn node_ids(m: &Machine) -> Vec<String> {
    let rows: serde_json::Value = serde_json::from_str(&ok(&m.run(&["list", "nodes", "--format", "json"]))).unwrap();
    rows.as_array().unwrap().iter().map(|n| n["node_id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_plain_restart_after_a_crash_keeps_the_heads_state() {
    let m = Machine::new();
    let port = free_port();
    let start = ["start", "--head", "--port", port.as_str(), "--dashboard-port", "0", "--num-cpus", "1"];
    ok(&m.run(&start));
    ok(&m.run(&["job", "submit", "--submission-id", "before-crash", "--", "true"]));
    let first_nodes = node_ids(&m);
    let pids = m.server_pids();
    for pid in &pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), nix::sys::signal::Signal::SIGKILL);
    }
    wait_gone(&pids);

    ok(&m.run(&start));
    assert_eq!(job_ids(&m), vec!["before-crash"], "the same flags find the same database");
    let nodes = node_ids(&m);
    assert!(first_nodes.iter().all(|n| nodes.contains(n)), "{first_nodes:?} in {nodes:?}");
    assert_eq!(nodes.len(), 2, "the old node and the new one");
    ok(&m.run(&["stop"]));

    let mut fresh = start.to_vec();
    fresh.push("--fresh");
    ok(&m.run(&fresh));
    assert!(job_ids(&m).is_empty(), "--fresh starts empty");
    assert_eq!(node_ids(&m).len(), 1);
    let kept = m.dir.path().join(format!("tmp/head-{port}/head.redb.previous"));
    assert!(kept.is_file(), "the old database is kept aside");
}

/// The shared-memory store directory of the node `node_id`, found by its marker.
fn store_of(node_id: &str) -> Option<std::path::PathBuf> {
    std::fs::read_dir("/dev/shm").ok()?.flatten().map(|e| e.path()).find(|p| {
        p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("oxray-objects-"))
            && std::fs::read_to_string(p.join("node")).is_ok_and(|n| n == node_id)
    })
}

/// Starts a head, kills it (SIGKILL) and returns its node's store and spill directories.
fn killed_head_stores(m: &Machine) -> (std::path::PathBuf, std::path::PathBuf) {
    start_head(m);
    let store = store_of(&node_ids(m).remove(0)).expect("the node marks its store");
    let port = store.file_name().unwrap().to_string_lossy().trim_start_matches("oxray-objects-").to_string();
    ok(&m.run(&["stop", "--force"]));
    (store, std::env::temp_dir().join(format!("oxray-spill-{port}")))
}

#[test]
fn a_killed_agents_object_store_goes_when_the_next_agent_starts() {
    if !Path::new("/dev/shm").is_dir() {
        return;
    }
    let m = Machine::new();
    let (store, spill) = killed_head_stores(&m);
    assert!(store.is_dir() && spill.is_dir(), "SIGKILL leaves them behind");
    start_head(&m);
    assert!(!store.exists() && !spill.exists(), "swept by the next agent of this machine");
    ok(&m.run(&["stop"]));
}

#[test]
fn a_killed_agents_spill_folder_goes_even_when_its_shared_memory_went_first() {
    if !Path::new("/dev/shm").is_dir() {
        return;
    }
    let m = Machine::new();
    let (store, spill) = killed_head_stores(&m);
    // As a private /dev/shm (a container's, a test host's) goes with its mount namespace.
    std::fs::remove_dir_all(&store).unwrap();
    assert!(spill.is_dir());
    start_head(&m);
    assert!(!spill.exists(), "swept by the next agent of this machine");
    ok(&m.run(&["stop"]));
}

#[test]
fn bad_flags_get_one_line_errors_and_start_nothing() {
    let m = Machine::new();
    fails(&m.run(&["start", "--head", "--bogus"]), 2, "unexpected argument '--bogus'");
    fails(&m.run(&["start"]), 2, "required");
    fails(&m.run(&["start", "--head", "--num-cpus", "-1"]), 2, "non-negative integer");
    fails(&m.run(&["start", "--head", "--num-gpus", "two"]), 2, "non-negative integer");
    fails(&m.run(&["start", "--head", "--resources", "{bad"]), 1, "invalid --resources");
    fails(&m.run(&["start", "--head", "--resources", r#"{"acc": -2}"#]), 1, "invalid --resources");
    fails(&m.run(&["start", "--head", "--labels", "novalue"]), 1, "invalid --labels");
    fails(&m.run(&["start", "--address", "headonly"]), 1, "invalid --address");
    fails(&m.run(&["list", "nodes", "--filter", "color=red"]), 1, "cannot filter nodes by \"color\"");
    fails(&m.run(&["get-auth-token"]), 1, "no cluster token");
    assert!(m.server_pids().is_empty());
}

#[test]
fn a_port_in_use_is_reported_and_leaves_nothing_running() {
    let m = Machine::new();
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = m.run(&["start", "--head", "--port", &port, "--dashboard-port", "0"]);
    fails(&out, 1, &format!("port {port} (control plane) is already in use"));
    assert_eq!(text(&out.stderr).lines().count(), 1, "one line: {}", text(&out.stderr));
    assert!(m.server_pids().is_empty());
}

#[test]
fn joining_an_unreachable_or_wrong_head_fails_cleanly() {
    let m = Machine::new();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    fails(&m.run(&["start", "--address", &closed, "--token", "x"]), 1, "cannot reach the head");
    assert!(m.server_pids().is_empty());

    let address = start_head(&m);
    let before = m.server_pids();
    fails(&m.run(&["start", "--address", &address, "--token", "wrong-token"]), 1, "refused the cluster token");
    assert_eq!(m.server_pids(), before);
    let rows: serde_json::Value = serde_json::from_str(&ok(&m.run(&["list", "nodes", "--format", "json"]))).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1, "nothing joined");
    let out = m.run(&["status", "--token", "wrong-token"]);
    fails(&out, 1, "refused the cluster token");
}

#[test]
fn job_cli_submits_follows_stops_and_exits_with_the_outcome() {
    let m = Machine::new();
    start_head(&m);
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("train.py"), "import os\nprint('answer', 6 * 7, os.environ['OXRAY_JOB_ID'])\n")
        .unwrap();
    let out = m
        .command(&["job", "submit", "--working-dir", ".", "--submission-id", "t1", "--", "python3", "train.py"])
        .current_dir(project.path())
        .output()
        .unwrap();
    let stdout = ok(&out);
    assert!(stdout.contains("answer 42 t1"), "{stdout}");
    assert!(stdout.contains("Job 't1' succeeded"), "{stdout}");

    let failed = m.run(&["job", "submit", "--", "sh", "-c", "echo going down; exit 3"]);
    assert_eq!(failed.status.code(), Some(1), "{}", text_of(&failed));
    assert!(text(&failed.stdout).contains("going down"));

    ok(&m.run(&[
        "job",
        "submit",
        "--no-wait",
        "--submission-id",
        "long",
        "--metadata-json",
        r#"{"team": "a"}"#,
        "--",
        "sleep",
        "60",
    ]));
    let status = ok(&m.run(&["job", "status", "long"]));
    assert!(status.contains("PENDING") || status.contains("RUNNING"), "{status}");
    fails(&m.run(&["job", "delete", "long"]), 1, "non-terminal state");
    assert!(ok(&m.run(&["job", "stop", "long"])).contains("Job 'long' was stopped"));
    assert!(ok(&m.run(&["job", "logs", "long"])).contains("Running entrypoint for job long: sleep 60"));
    let list: serde_json::Value = serde_json::from_str(&ok(&m.run(&["job", "list", "--format", "json"]))).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 3);
    assert_eq!(list[2]["metadata"]["team"], "a");
    ok(&m.run(&["job", "delete", "long"]));
    fails(&m.run(&["job", "status", "long"]), 1, "Job long does not exist");
    fails(&m.run(&["job", "submit", "--runtime-env-json", "{", "--", "true"]), 1, "invalid --runtime-env-json");
}

fn text_of(out: &Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

#[test]
fn job_list_shows_the_newest_jobs_the_server_sends() {
    let m = Machine::new();
    ok(&m.run(&["start", "--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", "1"]));
    for id in ["first", "second", "third"] {
        ok(&m.run(&["job", "submit", "--submission-id", id, "--", "true"]));
    }
    let newest = m.run(&["job", "list", "--limit", "2", "--format", "json"]);
    let rows: serde_json::Value = serde_json::from_str(&ok(&newest)).unwrap();
    let ids: Vec<&str> = rows.as_array().unwrap().iter().map(|j| j["submission_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["second", "third"]);
    assert!(text(&newest.stderr).contains("The newest 2 of 3 jobs"), "{}", text(&newest.stderr));
    assert_eq!(job_ids(&m), ["first", "second", "third"], "1000 by default");
    let all = m.run(&["job", "list", "--limit", "0", "--format", "json"]);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&ok(&all)).unwrap().as_array().unwrap().len(), 3);
    assert!(text(&all.stderr).is_empty(), "{}", text(&all.stderr));
    ok(&m.run(&["stop"]));
}
