//! Turns a job's `runtime_env` into a working directory, environment variables and a
//! virtualenv on this node. Packages and virtualenvs are cached and shared between jobs.

use oxray_proto::v1;
use oxray_rpc::HeadClient;
use oxray_runtime_env::{package_name, stem, unpack, ArchiveKind, PipSpec, RuntimeEnv};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;

#[derive(Debug, Default)]
pub struct Prepared {
    pub cwd: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    /// Prepended to PYTHONPATH.
    pub python_path: Vec<PathBuf>,
    /// A virtualenv whose bin/ goes first on PATH.
    pub venv: Option<PathBuf>,
}

impl Prepared {
    /// Puts the environment on a process about to start: its directory, PYTHONPATH, the
    /// virtualenv first on PATH, the variables.
    pub fn apply(&self, cmd: &mut tokio::process::Command) {
        if let Some(cwd) = &self.cwd {
            cmd.current_dir(cwd);
        }
        if !self.python_path.is_empty() {
            let mut parts: Vec<String> = self.python_path.iter().map(|p| p.display().to_string()).collect();
            if let Ok(existing) = std::env::var("PYTHONPATH") {
                parts.push(existing);
            }
            cmd.env("PYTHONPATH", parts.join(":"));
        }
        if let Some(venv) = &self.venv {
            let path = std::env::var("PATH").unwrap_or_default();
            cmd.env("PATH", format!("{}:{path}", venv.join("bin").display())).env("VIRTUAL_ENV", venv);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    }
}

pub struct EnvCache {
    root: PathBuf,
    head: HeadClient,
    /// One preparation of a given package or virtualenv at a time.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl EnvCache {
    pub fn new(root: PathBuf, head: HeadClient) -> Self {
        Self { root, head, locks: Mutex::new(HashMap::new()) }
    }

    fn lock_for(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks.lock().expect("cache locks").entry(key.to_string()).or_default().clone()
    }

    /// `log` receives progress lines for the job's log; a `pip` virtualenv is built from
    /// the interpreter `python` and sees the packages it sees. Preparing takes at most the
    /// spec's setup timeout; what it started (pip) is ended when it runs out.
    pub async fn prepare(
        &self,
        spec: &RuntimeEnv,
        python: &str,
        log: &mut tokio::fs::File,
    ) -> Result<Prepared, String> {
        let Some(limit) = spec.setup_timeout() else { return self.prepare_all(spec, python, log).await };
        match tokio::time::timeout(limit, self.prepare_all(spec, python, log)).await {
            Ok(prepared) => prepared,
            Err(_) => Err(format!(
                "the runtime_env was not ready after {} s (its config's setup_timeout_seconds)",
                limit.as_secs()
            )),
        }
    }

    async fn prepare_all(
        &self,
        spec: &RuntimeEnv,
        python: &str,
        log: &mut tokio::fs::File,
    ) -> Result<Prepared, String> {
        let mut out = Prepared::default();
        if let Some(dir) = &spec.working_dir {
            out.cwd = Some(self.location(dir, "working_dir").await?);
        }
        for module in &spec.py_modules {
            out.python_path.push(self.location(module, "py_modules").await?);
        }
        out.env = spec.env_vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if let Some(pip) = spec.pip.as_ref().filter(|p| !p.packages.is_empty()) {
            out.venv = Some(self.virtualenv(pip, python, log).await?);
        }
        Ok(out)
    }

    /// A local directory for a package URI or an absolute path on this node.
    async fn location(&self, uri: &str, kind: &str) -> Result<PathBuf, String> {
        let Some(name) = package_name(uri) else {
            let path = PathBuf::from(uri);
            return if path.is_dir() || path.is_file() {
                Ok(path)
            } else {
                Err(format!("{kind} {uri} does not exist on this node"))
            };
        };
        let lock = self.lock_for(name);
        let _guard = lock.lock().await;
        let archive = self.fetch(uri, name).await?;
        let archive_kind = ArchiveKind::from_name(name).map_err(|e| e.to_string())?;
        if archive_kind == ArchiveKind::Wheel {
            return Ok(archive);
        }
        let dest = self.root.join(kind).join(stem(name));
        if !dest.is_dir() {
            let (a, d) = (archive.clone(), dest.clone());
            tokio::task::spawn_blocking(move || unpack(&a, archive_kind, &d))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("cannot unpack {uri}: {e}"))?;
        }
        Ok(dest)
    }

    async fn fetch(&self, uri: &str, name: &str) -> Result<PathBuf, String> {
        let path = self.root.join("packages").join(name);
        if path.is_file() {
            return Ok(path);
        }
        let fail = |e: &dyn std::fmt::Display| format!("cannot fetch {uri} from the head: {e}");
        tokio::fs::create_dir_all(path.parent().expect("has parent")).await.map_err(|e| fail(&e))?;
        let mut stream = self
            .head
            .clone()
            .get_package(v1::GetPackageRequest { uri: uri.to_string() })
            .await
            .map_err(|s| fail(&s.message()))?
            .into_inner();
        let tmp = path.with_extension(format!("part{}", std::process::id()));
        let mut file = tokio::fs::File::create(&tmp).await.map_err(|e| fail(&e))?;
        loop {
            match stream.message().await {
                Ok(Some(chunk)) => file.write_all(&chunk.data).await.map_err(|e| fail(&e))?,
                Ok(None) => break,
                Err(s) => {
                    let _ = tokio::fs::remove_file(&tmp).await;
                    return Err(fail(&s.message()));
                }
            }
        }
        file.sync_all().await.map_err(|e| fail(&e))?;
        tokio::fs::rename(&tmp, &path).await.map_err(|e| fail(&e))?;
        Ok(path)
    }

    /// One virtualenv per distinct requirement list and base interpreter, seeing the base's
    /// packages, made with pip as configured on this node (pip.conf, PIP_* variables: offline
    /// indexes work).
    async fn virtualenv(&self, pip: &PipSpec, base: &str, log: &mut tokio::fs::File) -> Result<PathBuf, String> {
        let mut hasher = Sha256::new();
        hasher.update(base.as_bytes());
        hasher.update(b"\n");
        for line in &pip.packages {
            hasher.update(line.as_bytes());
            hasher.update(b"\n");
        }
        let key = hex::encode(&hasher.finalize()[..8]);
        let dest = self.root.join("pip").join(&key);
        let ready = dest.join(".oxray-ready");
        let lock = self.lock_for(&format!("pip-{key}"));
        let _guard = lock.lock().await;
        if ready.exists() {
            let _ = log.write_all(format!("Using cached virtualenv {}\n", dest.display()).as_bytes()).await;
            return Ok(dest);
        }
        // A virtualenv names its own absolute path inside, so it is built where it stays; a
        // marker written last tells a complete one from a failed attempt.
        let _ = tokio::fs::remove_dir_all(&dest).await;
        tokio::fs::create_dir_all(&dest).await.map_err(|e| e.to_string())?;
        let requirements = dest.join("requirements.txt");
        tokio::fs::write(&requirements, pip.packages.join("\n") + "\n").await.map_err(|e| e.to_string())?;
        let _ = log.write_all(format!("Creating virtualenv for pip packages {:?}\n", pip.packages).as_bytes()).await;
        run_logged(log, base, &["-m", "venv", "--system-site-packages", &dest.display().to_string()]).await?;
        let python = dest.join("bin/python").display().to_string();
        inherit_site_packages(base, &python).await?;
        let reqs = requirements.display().to_string();
        run_logged(log, &python, &["-m", "pip", "install", "--disable-pip-version-check", "-r", &reqs]).await?;
        tokio::fs::write(&ready, b"").await.map_err(|e| e.to_string())?;
        Ok(dest)
    }
}

/// Lets a virtualenv see what its base interpreter sees. `--system-site-packages` alone
/// reaches the system's packages only, so a base that is itself a virtualenv (where oxray is
/// usually installed) would lose its own: a `.pth` file adds them after the new ones, with
/// their own `.pth` files (editable installs) read too.
async fn inherit_site_packages(base: &str, python: &str) -> Result<(), String> {
    const BASE_SITES: &str = "import site; print(repr(site.getsitepackages()))";
    const OWN_SITE: &str = "import sysconfig; print(sysconfig.get_paths()['purelib'])";
    let sites = python_output(base, BASE_SITES).await?;
    let own = python_output(python, OWN_SITE).await?;
    let pth = PathBuf::from(own.trim()).join("_oxray_base_site.pth");
    let line = format!("import site; list(map(site.addsitedir, {}))\n", sites.trim());
    tokio::fs::write(&pth, line).await.map_err(|e| format!("cannot write {}: {e}", pth.display()))
}

async fn python_output(python: &str, code: &str) -> Result<String, String> {
    let out = tokio::process::Command::new(python)
        .args(["-c", code])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{python} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("{python} printed something not UTF-8: {e}"))
}

/// Runs a setup command with its output in the job's log; fails with its exit status.
async fn run_logged(log: &tokio::fs::File, program: &str, args: &[&str]) -> Result<(), String> {
    let out = log.try_clone().await.map_err(|e| e.to_string())?.into_std().await;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let status = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{program} {}` failed ({status})", args.join(" ")))
    }
}
