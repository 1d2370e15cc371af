//! The names the binary answers to: `oxray`, `ray` (Ray's CLI, the same verbs and flags) and
//! `serve` (Ray's Serve CLI, which is `oxray serve`). A symlink or a console script chooses.

use std::ffi::{OsStr, OsString};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Personality {
    Oxray,
    Ray,
    Serve,
}

impl Personality {
    /// By the name the program was run under (`argv[0]`'s last part).
    pub fn of(argv0: Option<&OsStr>) -> Self {
        match argv0.and_then(|a| Path::new(a).file_name()).and_then(OsStr::to_str) {
            Some("ray") => Self::Ray,
            Some("serve") => Self::Serve,
            _ => Self::Oxray,
        }
    }

    /// The command line as the `oxray` parser takes it.
    pub fn argv(self, mut args: Vec<OsString>) -> Vec<OsString> {
        if self == Self::Serve {
            args.insert(1.min(args.len()), "serve".into());
        }
        args
    }

    /// The program's name in help and errors.
    pub fn name(self) -> &'static str {
        match self {
            Self::Oxray => "oxray",
            Self::Ray => "ray",
            Self::Serve => "serve",
        }
    }

    /// What `--version` prints: Ray's line, for the scripts that read it, naming oxray too.
    pub fn version_line(self, args: &[OsString]) -> Option<String> {
        let asked = args.len() == 2 && matches!(args[1].to_str(), Some("--version" | "-V"));
        (asked && self != Self::Oxray).then(|| {
            format!(
                "{}, version {} (oxray {})",
                self.name(),
                oxray_config::ray_env::RAY_COMPAT_VERSION,
                oxray_config::VERSION
            )
        })
    }
}

/// Whether the verb starts servers, whose children must not take a client's `RAY_ADDRESS`.
pub fn starts_servers(args: &[OsString]) -> bool {
    matches!(args.get(1).and_then(|a| a.to_str()), Some("start" | "head" | "agent" | "operator"))
}

/// Why a verb of Ray's CLI that oxray lacks is not there, and what to use instead.
pub fn missing_verb(verb: &str) -> String {
    const LAUNCHER: &[&str] = &[
        "up",
        "down",
        "attach",
        "exec",
        "submit",
        "rsync-up",
        "rsync-down",
        "get-head-ip",
        "get-worker-ips",
        "monitor",
        "kuberay-autoscaler",
        "cluster-dump",
    ];
    if LAUNCHER.contains(&verb) {
        format!(
            "`{verb}` belongs to Ray's cluster launcher, which oxray does not have: start the head with \
             `ray start --head` and each other machine with `ray start --address HEAD:6379`, or run the \
             Kubernetes operator"
        )
    } else {
        format!("unrecognized command `{verb}`; `--help` lists the commands")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_name_run_under_chooses_the_cli() {
        assert_eq!(Personality::of(Some(OsStr::new("/usr/local/bin/ray"))), Personality::Ray);
        assert_eq!(Personality::of(Some(OsStr::new("serve"))), Personality::Serve);
        assert_eq!(Personality::of(Some(OsStr::new("/opt/oxray"))), Personality::Oxray);
        assert_eq!(Personality::of(Some(OsStr::new("ray-2"))), Personality::Oxray);
        assert_eq!(Personality::of(None), Personality::Oxray);
    }

    #[test]
    fn serve_is_the_serve_verb() {
        assert_eq!(Personality::Serve.argv(os(&["serve", "run", "app:x"])), os(&["serve", "serve", "run", "app:x"]));
        assert_eq!(Personality::Ray.argv(os(&["ray", "status"])), os(&["ray", "status"]));
    }

    #[test]
    fn ray_s_version_line() {
        let line = Personality::Ray.version_line(&os(&["ray", "--version"])).unwrap();
        assert!(line.starts_with("ray, version 2.60.0 (oxray "), "{line}");
        assert!(Personality::Oxray.version_line(&os(&["oxray", "--version"])).is_none());
        assert!(Personality::Ray.version_line(&os(&["ray", "status", "--version"])).is_none());
    }

    #[test]
    fn verbs() {
        assert!(starts_servers(&os(&["ray", "start", "--head"])));
        assert!(!starts_servers(&os(&["ray", "status"])));
        assert!(missing_verb("up").contains("ray start --address"));
        assert!(missing_verb("frobnicate").starts_with("unrecognized command"));
    }
}
