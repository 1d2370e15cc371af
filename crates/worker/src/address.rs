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
    .and_then(refuse_other_services)
}

/// Accepts the schemes users carry over from Ray.
fn strip(address: &str) -> String {
    address.trim_start_matches("oxray://").trim_start_matches("ray://").to_string()
}

/// Ray Client's port (`ray://HOST:10001`).
const RAY_CLIENT_PORT: &str = "10001";

/// An address of another of Ray's services is an error that names the head's, never a dial
/// of a port where nothing answers the driver's protocol.
fn refuse_other_services(target: Target) -> Result<Target, crate::WorkerError> {
    let Target::Connect(address) = &target else { return Ok(target) };
    let lower = address.to_ascii_lowercase();
    let why = if lower.starts_with("http://") || lower.starts_with("https://") {
        "is the dashboard's URL (what `ray job` takes)"
    } else if address.rsplit_once(':').is_some_and(|(_, port)| port == RAY_CLIENT_PORT) {
        "is Ray Client's port; oxray has no Ray Client server, drivers connect to the head directly"
    } else {
        return Ok(target);
    };
    let host = address.split("://").last().unwrap_or(address).rsplit_once(':').map_or(address.as_str(), |(h, _)| h);
    Err(crate::WorkerError::Connect(format!(
        "{address} {why}: connect to the head's address instead, e.g. ray.init(address=\"{host}:{}\")",
        oxray_config::DEFAULT_PORT
    )))
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
        assert_eq!(resolve(Some("ray://h:6379"), None, None).map_err(|e| e.to_string()), connect("h:6379"));
    }

    #[test]
    fn the_addresses_of_ray_s_other_services_name_the_head_s() {
        let error = |explicit: Option<&str>, env: Option<&str>| resolve(explicit, env, None).unwrap_err().to_string();
        let client = error(Some("ray://10.0.0.1:10001"), None);
        assert!(client.contains("Ray Client") && client.contains("address=\"10.0.0.1:6379\""), "{client}");
        let dashboard = error(None, Some("http://10.0.0.2:8265"));
        assert!(dashboard.contains("dashboard") && dashboard.contains("\"10.0.0.2:6379\""), "{dashboard}");
        assert!(error(Some("HTTPS://h:8265"), None).contains("dashboard"));
    }
}
