use crate::BIN;
use nix::sys::signal::Signal;
use oxray_testkit::{count_states, LocalCluster};
use serde_json::{json, Value};
use std::io::Write;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    fn new(c: &LocalCluster) -> Self {
        // No pooled connections: tests restart the head under the client.
        let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
        Self { http, base: c.dashboard_url(), token: c.token().as_str().to_string() }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Vec<u8>>) -> (u16, String) {
        let mut req = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.body(b);
        }
        let resp = req.send().await.unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    async fn get(&self, path: &str) -> (u16, String) {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, String) {
        self.call(reqwest::Method::POST, path, Some(body.to_string().into_bytes())).await
    }

    async fn submit(&self, body: Value) -> String {
        let (status, text) = self.post("/api/jobs/", body).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 2, "exactly job_id and submission_id: {v}");
        v["submission_id"].as_str().unwrap().to_string()
    }

    async fn job(&self, id: &str) -> Value {
        let (status, text) = self.get(&format!("/api/jobs/{id}")).await;
        assert_eq!(status, 200, "{text}");
        serde_json::from_str(&text).unwrap()
    }

    async fn wait_status(&self, id: &str, wanted: &[&str]) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let job = self.job(id).await;
            if wanted.contains(&job["status"].as_str().unwrap()) {
                return job;
            }
            assert!(Instant::now() < deadline, "job {id} never reached {wanted:?}: {job}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The job once its driver's pid is known: RUNNING is reported before the entrypoint
    /// has started, the pid with the next report.
    async fn wait_driver_pid(&self, id: &str) -> i32 {
        let deadline = Instant::now() + WAIT;
        loop {
            let job = self.wait_status(id, &["RUNNING"]).await;
            if let Some(pid) = job["driver_info"]["pid"].as_str() {
                return pid.parse().unwrap();
            }
            assert!(Instant::now() < deadline, "job {id} never told its driver's pid: {job}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn logs(&self, id: &str) -> String {
        let (status, text) = self.get(&format!("/api/jobs/{id}/logs")).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        v["logs"].as_str().unwrap().to_string()
    }
}

/// No live process is left in the group (zombies waiting for a reaper count as gone).
fn group_is_gone(pgid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let live = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { return false };
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else { return false };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.first() != Some(&"Z") && fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
        });
        if !live {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn cluster(agents: usize, cpus: u32) -> LocalCluster {
    LocalCluster::builder(BIN).agents(agents).cpus_per_agent(cpus).start().expect("local cluster starts")
}

async fn ready(c: &LocalCluster, agents: usize) {
    c.wait_for(WAIT, |n| count_states(n) == (agents, 0)).await.unwrap();
}

#[tokio::test]
async fn a_job_runs_and_its_status_and_log_are_served() {
    let c = cluster(1, 2);
    ready(&c, 1).await;
    let api = Api::new(&c);
    let id = api
        .submit(json!({
            "entrypoint": "echo hello $GREETING; echo oops >&2",
            "runtime_env": {"env_vars": {"GREETING": "world"}},
            "metadata": {"owner": "ml-team"},
        }))
        .await;
    assert!(id.starts_with("raysubmit_"));
    let job = api.wait_status(&id, &["SUCCEEDED", "FAILED"]).await;
    assert_eq!(job["status"], "SUCCEEDED", "{job}");
    assert_eq!(job["type"], "SUBMISSION");
    assert_eq!(job["driver_exit_code"], 0);
    assert_eq!(job["metadata"]["owner"], "ml-team");
    assert_eq!(job["driver_node_id"], c.agent_node_id(0).unwrap());
    assert!(job["driver_info"]["pid"].is_string());
    assert!(job["end_time"].as_u64().unwrap() >= job["start_time"].as_u64().unwrap());
    let logs = api.logs(&id).await;
    assert!(logs.starts_with(&format!("Running entrypoint for job {id}: ")), "{logs}");
    assert!(logs.contains("hello world\n") && logs.contains("oops\n"), "{logs}");

    let (_, list) = api.get("/api/jobs/").await;
    assert!(list.contains(&id));
    assert_eq!(
        api.call(reqwest::Method::DELETE, &format!("/api/jobs/{id}"), None).await,
        (200, "{\"deleted\":true}".into())
    );
    assert_eq!(api.get(&format!("/api/jobs/{id}")).await.0, 404);
}

#[tokio::test]
async fn jobs_wait_for_resources_in_submission_order() {
    let c = cluster(1, 1);
    ready(&c, 1).await;
    let api = Api::new(&c);
    let first = api.submit(json!({"entrypoint": "sleep 2", "entrypoint_num_cpus": 1})).await;
    api.wait_status(&first, &["RUNNING"]).await;
    let second = api.submit(json!({"entrypoint": "echo second", "entrypoint_num_cpus": 1.0})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let waiting = api.job(&second).await;
    assert_eq!(waiting["status"], "PENDING", "{waiting}");
    assert!(waiting["message"].as_str().unwrap().contains("waiting for resources"));

    let done = api.wait_status(&second, &["SUCCEEDED", "FAILED"]).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    let first_done = api.job(&first).await;
    assert_eq!(first_done["status"], "SUCCEEDED");
    assert!(first_done["end_time"].as_u64() <= done["end_time"].as_u64());

    let never =
        api.submit(json!({"entrypoint": "true", "entrypoint_num_gpus": 1, "entrypoint_resources": {"tpu": 8}})).await;
    let failed = api.wait_status(&never, &["FAILED"]).await;
    assert_eq!(failed["error_type"], "JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE");
    assert!(failed["message"].as_str().unwrap().contains("GPU: 1"), "{failed}");
}

#[tokio::test]
async fn stop_ends_the_whole_process_group() {
    let c = cluster(1, 1);
    ready(&c, 1).await;
    let api = Api::new(&c);
    let id = api.submit(json!({"entrypoint": "sleep 100 & sleep 100", "submission_id": "long-one"})).await;
    let pid = api.wait_driver_pid(&id).await;
    let (status, text) = api.call(reqwest::Method::DELETE, "/api/jobs/long-one", None).await;
    assert_eq!(status, 500);
    assert!(text.contains("non-terminal state RUNNING"), "{text}");

    assert_eq!(api.post("/api/jobs/long-one/stop", json!(null)).await, (200, "{\"stopped\":true}".into()));
    let stopped = api.wait_status(&id, &["STOPPED", "FAILED", "SUCCEEDED"]).await;
    assert_eq!(stopped["status"], "STOPPED", "{stopped}");
    assert!(stopped["driver_exit_code"].is_null());
    assert!(group_is_gone(pid), "no process of the job's group is left");
    assert_eq!(api.post("/api/jobs/long-one/stop", json!(null)).await, (200, "{\"stopped\":false}".into()));
}

#[tokio::test]
async fn head_restart_keeps_jobs_and_records_how_they_end() {
    let mut c = cluster(1, 1);
    ready(&c, 1).await;
    let api = Api::new(&c);
    let early = api.submit(json!({"entrypoint": "echo early"})).await;
    api.wait_status(&early, &["SUCCEEDED"]).await;
    let id = api.submit(json!({"entrypoint": "sleep 3; echo done"})).await;
    api.wait_status(&id, &["RUNNING"]).await;

    c.kill_head(Signal::SIGKILL);
    c.restart_head().unwrap();
    assert_eq!(api.job(&early).await["status"], "SUCCEEDED");
    assert_eq!(api.job(&id).await["status"], "RUNNING", "the job kept running without the head");
    let done = api.wait_status(&id, &["SUCCEEDED", "FAILED"]).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    assert!(api.logs(&id).await.contains("done\n"));
}

fn zip_bytes(entries: &[(&str, &str)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, body) in entries {
        zip.start_file(*name, zip::write::SimpleFileOptions::default()).unwrap();
        zip.write_all(body.as_bytes()).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

#[tokio::test]
async fn bad_input_gets_plain_4xx_and_the_head_keeps_serving() {
    // Packages over 1 MiB are refused here (100 MiB by default).
    let c = LocalCluster::builder(BIN)
        .agents(1)
        .head_env("OXRAY_MAX_PACKAGE_MB", "1")
        .start()
        .expect("local cluster starts");
    ready(&c, 1).await;
    let api = Api::new(&c);
    let cases = [
        (b"{not json".to_vec(), "not valid JSON"),
        (json!({"entrypoint": "x", "metadata": {"a": 1}}).to_string().into_bytes(), "metadata values must be strings"),
        (json!({"entrypoint": "x", "runtime_env": {"conda": "env"}}).to_string().into_bytes(), "not supported"),
        (
            json!({"entrypoint": "x", "runtime_env": {"working_dir": "gcs://_ray_pkg_missing.zip"}})
                .to_string()
                .into_bytes(),
            "was not uploaded",
        ),
    ];
    for (body, needle) in cases {
        let (status, text) = api.call(reqwest::Method::POST, "/api/jobs/", Some(body)).await;
        assert_eq!(status, 400, "{text}");
        assert!(text.contains(needle), "{needle:?} in {text}");
    }
    api.submit(json!({"entrypoint": "true", "submission_id": "dup"})).await;
    let (status, text) = api.post("/api/jobs/", json!({"entrypoint": "true", "submission_id": "dup"})).await;
    assert_eq!(status, 400);
    assert!(text.contains("Job with submission_id dup already exists"), "{text}");
    for path in ["/api/jobs/nope", "/api/jobs/nope/logs"] {
        assert_eq!(api.get(path).await, (404, "Job nope does not exist".into()));
    }
    assert_eq!(api.post("/api/jobs/nope/stop", json!(null)).await.0, 404);

    let packages = c.dir().join("head.packages");
    for (name, archive) in [
        ("_ray_pkg_escape.zip", zip_bytes(&[("ok.txt", "x"), ("../../evil.txt", "x")])),
        ("_ray_pkg_abs.zip", zip_bytes(&[("/tmp/evil.txt", "x")])),
        ("_ray_pkg_junk.zip", b"not a zip".to_vec()),
    ] {
        let (status, text) = api.call(reqwest::Method::PUT, &format!("/api/packages/gcs/{name}"), Some(archive)).await;
        assert_eq!(status, 400, "{name}: {text}");
        assert_eq!(api.get(&format!("/api/packages/gcs/{name}")).await.0, 404);
    }
    assert!(!c.dir().join("evil.txt").exists() && !std::path::Path::new("/tmp/evil.txt").exists());
    assert_eq!(std::fs::read_dir(&packages).unwrap().count(), 0, "no partial upload is left");

    // The head answers 413 without reading the rest, so the client may see the connection
    // close before it has sent everything: either is a refusal.
    let huge = vec![0u8; 2 * 1024 * 1024];
    let url = format!("{}/api/packages/gcs/_ray_pkg_huge.zip", api.base);
    match api.http.put(url).bearer_auth(&api.token).body(huge).send().await {
        Ok(resp) => assert_eq!(resp.status().as_u16(), 413),
        Err(e) => assert!(e.is_request(), "{e}"),
    }
    assert_eq!(api.get("/api/packages/gcs/_ray_pkg_huge.zip").await.0, 404);
    assert_eq!(std::fs::read_dir(&packages).unwrap().count(), 0, "no partial upload is left");
    assert_eq!(api.get("/api/version").await.0, 200);
}

#[tokio::test]
async fn working_dir_and_py_modules_reach_the_entrypoint() {
    let c = cluster(1, 1);
    ready(&c, 1).await;
    let api = Api::new(&c);
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(project.path().join("work/sub")).unwrap();
    std::fs::create_dir_all(project.path().join("mymod")).unwrap();
    std::fs::write(project.path().join("work/sub/data.txt"), "from-working-dir").unwrap();
    std::fs::write(project.path().join("mymod/__init__.py"), "X = 'from-py-module'\n").unwrap();
    let limit = 1 << 20;
    let (wd, wd_bytes) = oxray_runtime_env::pack_dir(&project.path().join("work"), None, &[], limit).unwrap();
    let (pm, pm_bytes) = oxray_runtime_env::pack_dir(&project.path().join("mymod"), Some("mymod"), &[], limit).unwrap();
    for (name, bytes) in [(&wd, wd_bytes), (&pm, pm_bytes)] {
        let (status, text) = api.call(reqwest::Method::PUT, &format!("/api/packages/gcs/{name}"), Some(bytes)).await;
        assert_eq!(status, 200, "{text}");
    }
    let id = api
        .submit(json!({
            "entrypoint": "python3 -c \"import mymod; print(open('sub/data.txt').read(), mymod.X)\"",
            "runtime_env": {"working_dir": format!("gcs://{wd}"), "py_modules": [format!("gcs://{pm}")]},
        }))
        .await;
    let job = api.wait_status(&id, &["SUCCEEDED", "FAILED"]).await;
    let logs = api.logs(&id).await;
    assert_eq!(job["status"], "SUCCEEDED", "{job}\n{logs}");
    assert!(logs.contains("from-working-dir from-py-module"), "{logs}");
}

/// A minimal pure-Python wheel, so pip can install it with no index.
fn write_wheel(dir: &std::path::Path) {
    let files = [
        ("oxtestpkg/__init__.py", "VALUE = 42\n"),
        ("oxtestpkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: oxtestpkg\nVersion: 1.0\n"),
        ("oxtestpkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        ("oxtestpkg-1.0.dist-info/RECORD", "oxtestpkg/__init__.py,,\noxtestpkg-1.0.dist-info/METADATA,,\noxtestpkg-1.0.dist-info/WHEEL,,\noxtestpkg-1.0.dist-info/RECORD,,\n"),
    ];
    std::fs::write(dir.join("oxtestpkg-1.0-py3-none-any.whl"), zip_bytes(&files)).unwrap();
}

#[tokio::test]
async fn pip_runtime_env_installs_from_a_local_wheel_directory_with_no_index() {
    let wheels = tempfile::tempdir().unwrap();
    write_wheel(wheels.path());
    let c = LocalCluster::builder(BIN)
        .agents(1)
        .agent_env("PIP_NO_INDEX", "1")
        .agent_env("PIP_FIND_LINKS", &wheels.path().display().to_string())
        .start()
        .unwrap();
    ready(&c, 1).await;
    let api = Api::new(&c);
    let env = json!({"pip": {"packages": ["oxtestpkg==1.0"], "pip_check": false}, "_ray_commit": "x"});
    let entry = "python -c 'import oxtestpkg, sys; print(\"value\", oxtestpkg.VALUE, sys.prefix)'";
    let first = api.submit(json!({"entrypoint": entry, "runtime_env": env})).await;
    let job = api.wait_status(&first, &["SUCCEEDED", "FAILED"]).await;
    let logs = api.logs(&first).await;
    assert_eq!(job["status"], "SUCCEEDED", "{job}\n{logs}");
    assert!(logs.contains("value 42"), "{logs}");

    let second = api.submit(json!({"entrypoint": entry, "runtime_env": env})).await;
    api.wait_status(&second, &["SUCCEEDED"]).await;
    assert!(api.logs(&second).await.contains("Using cached virtualenv"), "the virtualenv is reused");

    let missing = api.submit(json!({"entrypoint": "true", "runtime_env": {"pip": ["no-such-package-xyz"]}})).await;
    let failed = api.wait_status(&missing, &["FAILED"]).await;
    assert_eq!(failed["error_type"], "RUNTIME_ENV_SETUP_FAILURE", "{failed}");
}
