/// What `init(address)` means, resolved as Ray resolves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Connect(String),
    StartLocal,
}

/// `explicit` is the `address` argument; `env` is `OXRAY_ADDRESS` (set inside jobs);
/// `current` is the cluster started on this machine with `oxray start`.
pub fn resolve(explicit: Option<&str>, env: Option<&str>, current: Option<&str>) -> Result<Target, crate::WorkerError> {
    let existing = || env.or(current).filter(|a| !a.is_empty()).map(|a| Target::Connect(strip(a)));
    match explicit.map(str::trim).filter(|a| !a.is_empty()) {
        None => Ok(existing().unwrap_or(Target::StartLocal)),
        Some("auto") => existing().ok_or(crate::WorkerError::NoCluster),
        Some("local") => Ok(Target::StartLocal),
        Some(address) => Ok(Target::Connect(strip(address))),
    }
}

/// Accepts the schemes users carry over from Ray.
fn strip(address: &str) -> String {
    address.trim_start_matches("oxray://").trim_start_matches("ray://").trim_start_matches("http://").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_like_ray() {
        let connect = |a: &str| Ok(Target::Connect(a.into()));
        assert_eq!(resolve(None, None, None).ok(), Some(Target::StartLocal));
        assert_eq!(
            resolve(None, Some("10.0.0.1:6379"), Some("x:1")).map_err(|e| e.to_string()),
            connect("10.0.0.1:6379")
        );
        assert_eq!(resolve(None, None, Some("h:6379")).map_err(|e| e.to_string()), connect("h:6379"));
        assert_eq!(resolve(Some("auto"), None, Some("h:6379")).map_err(|e| e.to_string()), connect("h:6379"));
        assert!(resolve(Some("auto"), None, None).is_err());
        assert_eq!(resolve(Some("local"), Some("e:1"), None).ok(), Some(Target::StartLocal));
        assert_eq!(resolve(Some("ray://h:10001"), None, None).map_err(|e| e.to_string()), connect("h:10001"));
    }
}
