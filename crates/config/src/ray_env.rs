//! Ray's settings, read wherever oxray's are: a Ray user's shell, job or pod keeps its
//! `RAY_*` variables, its token file and its flags, and they mean the same here.

use std::path::PathBuf;

/// The Ray release whose APIs, CLI and wire formats oxray answers to.
pub const RAY_COMPAT_VERSION: &str = "2.60.0";

/// Where one of oxray's variables takes its value from when only Ray's is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Value(String),
    /// `RAY_AUTH_TOKEN_PATH`: the token is the file's content.
    File(PathBuf),
}

/// The oxray variables a process should set from Ray's, given its environment. oxray's own
/// always win; `with_address` is false for the commands that start servers, whose children
/// must not take a client's `RAY_ADDRESS` for their own.
pub fn adoptions(get: impl Fn(&str) -> Option<String>, with_address: bool) -> Vec<(&'static str, Source)> {
    let set = |name: &str| get(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let mut out = Vec::new();
    if set("OXRAY_AUTH_TOKEN").is_none() {
        if let Some(token) = set("RAY_AUTH_TOKEN") {
            out.push(("OXRAY_AUTH_TOKEN", Source::Value(token)));
        } else if let Some(path) = set("RAY_AUTH_TOKEN_PATH") {
            out.push(("OXRAY_AUTH_TOKEN", Source::File(PathBuf::from(path))));
        }
    }
    if with_address && set("OXRAY_ADDRESS").is_none() {
        // An http(s) RAY_ADDRESS names the dashboard, for `ray job`; it reads it itself.
        if let Some(address) = set("RAY_ADDRESS").filter(|a| !is_dashboard_url(a)) {
            out.push(("OXRAY_ADDRESS", Source::Value(address)));
        }
    }
    out
}

/// Whether an address is the dashboard's URL rather than the head's control-plane address.
pub fn is_dashboard_url(address: &str) -> bool {
    let lower = address.trim().to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// Ray's own token file, `~/.ray/auth_token` (what `ray get-auth-token --generate` writes).
pub fn ray_token_file() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|home| PathBuf::from(home).join(".ray/auth_token"))
}

/// Sets this process's oxray variables from Ray's. Call it first thing in `main`, before any
/// thread starts: the environment is not safe to change once one has.
pub fn adopt(with_address: bool) -> Result<(), String> {
    for (name, source) in adoptions(|n| std::env::var(n).ok(), with_address) {
        let value = match source {
            Source::Value(value) => value,
            Source::File(path) => match crate::secret::read_trimmed(&path) {
                Ok(Some(token)) if !token.is_empty() => token,
                Ok(_) => return Err(format!("RAY_AUTH_TOKEN_PATH={}: no token in that file", path.display())),
                Err(e) => return Err(format!("RAY_AUTH_TOKEN_PATH={}: cannot read it: {e}", path.display())),
            },
        };
        std::env::set_var(name, value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)], address: bool) -> Vec<(&'static str, Source)> {
        let env: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        adoptions(|n| env.get(n).cloned(), address)
    }

    #[test]
    fn ray_token_settings_fill_in_for_oxray_s() {
        assert_eq!(with(&[("RAY_AUTH_TOKEN", " t1 ")], true), vec![("OXRAY_AUTH_TOKEN", Source::Value("t1".into()))]);
        assert_eq!(
            with(&[("RAY_AUTH_TOKEN_PATH", "/x/tok")], true),
            vec![("OXRAY_AUTH_TOKEN", Source::File("/x/tok".into()))]
        );
        assert_eq!(
            with(&[("RAY_AUTH_TOKEN", "t1"), ("RAY_AUTH_TOKEN_PATH", "/x/tok")], true),
            vec![("OXRAY_AUTH_TOKEN", Source::Value("t1".into()))],
            "the variable wins over the file, as in Ray"
        );
        assert!(with(&[("RAY_AUTH_TOKEN", "t1"), ("OXRAY_AUTH_TOKEN", "mine")], true).is_empty());
        assert!(with(&[("RAY_AUTH_TOKEN", "")], true).is_empty());
    }

    #[test]
    fn ray_address_names_the_head_unless_it_is_the_dashboard() {
        assert_eq!(
            with(&[("RAY_ADDRESS", "10.0.0.1:6379")], true),
            vec![("OXRAY_ADDRESS", Source::Value("10.0.0.1:6379".into()))]
        );
        assert!(with(&[("RAY_ADDRESS", "http://10.0.0.1:8265")], true).is_empty());
        assert!(with(&[("RAY_ADDRESS", "HTTPS://h:8265")], true).is_empty());
        assert!(with(&[("RAY_ADDRESS", "h:6379"), ("OXRAY_ADDRESS", "o:1")], true).is_empty());
        assert!(with(&[("RAY_ADDRESS", "h:6379")], false).is_empty(), "servers never take a client's address");
    }
}
