use serde_json::{Map, Value};
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("runtime_env field {0:?} is not supported; supported fields: working_dir, py_modules, env_vars, pip, excludes, config")]
    UnknownField(String),
    #[error("runtime_env field {field:?} must be {expected}")]
    WrongType { field: String, expected: &'static str },
    #[error("runtime_env {field:?}: {uri:?} is not a package URI this cluster can serve (expected gcs://<name>.zip, .whl, .tar.gz, .tgz or .tar.xz)")]
    BadUri { field: String, uri: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PipSpec {
    /// Requirement lines, as pip reads them from a requirements file.
    pub packages: Vec<String>,
}

/// A checked `runtime_env`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuntimeEnv {
    /// A package URI (`gcs://…`) or an absolute directory on the node.
    pub working_dir: Option<String>,
    pub py_modules: Vec<String>,
    pub env_vars: BTreeMap<String, String>,
    pub pip: Option<PipSpec>,
    /// Only meaningful to the client that packed the directories.
    pub excludes: Vec<String>,
    /// Ray's `config.setup_timeout_seconds` as given: -1 for no limit.
    pub setup_timeout_seconds: Option<i64>,
}

/// How long an environment may take to prepare when its `config` does not say.
const DEFAULT_SETUP_TIMEOUT_S: u64 = 600;

fn strings(field: &str, value: &Value) -> Result<Vec<String>, SpecError> {
    let wrong = || SpecError::WrongType { field: field.to_string(), expected: "a list of strings" };
    value.as_array().ok_or_else(wrong)?.iter().map(|v| v.as_str().map(str::to_string).ok_or_else(wrong)).collect()
}

/// The package name inside a `gcs://` URI, checked to be a plain file name.
pub fn package_name(uri: &str) -> Option<&str> {
    let name = uri.strip_prefix("gcs://")?;
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-+".contains(&b));
    (plain && crate::ArchiveKind::from_name(name).is_ok()).then_some(name)
}

fn location(field: &str, uri: &str) -> Result<String, SpecError> {
    if package_name(uri).is_some() || (uri.starts_with('/') && !uri.contains("..")) {
        Ok(uri.to_string())
    } else {
        Err(SpecError::BadUri { field: field.to_string(), uri: uri.to_string() })
    }
}

impl RuntimeEnv {
    pub fn parse(env: &Map<String, Value>) -> Result<Self, SpecError> {
        let mut spec = RuntimeEnv::default();
        for (field, value) in env {
            if value.is_null() {
                continue;
            }
            match field.as_str() {
                "working_dir" => {
                    let uri =
                        value.as_str().ok_or(SpecError::WrongType { field: field.clone(), expected: "a string" })?;
                    spec.working_dir = Some(location(field, uri)?);
                }
                "py_modules" => {
                    spec.py_modules =
                        strings(field, value)?.iter().map(|u| location(field, u)).collect::<Result<_, _>>()?;
                }
                "env_vars" => {
                    let wrong = || SpecError::WrongType { field: field.clone(), expected: "an object of strings" };
                    for (k, v) in value.as_object().ok_or_else(wrong)? {
                        spec.env_vars.insert(k.clone(), v.as_str().ok_or_else(wrong)?.to_string());
                    }
                }
                "pip" => spec.pip = Some(parse_pip(value)?),
                "excludes" => spec.excludes = strings(field, value)?,
                "config" => spec.setup_timeout_seconds = parse_config(value)?,
                // Set by Ray's client next to pip.
                "_ray_commit" => {}
                other => return Err(SpecError::UnknownField(other.to_string())),
            }
        }
        Ok(spec)
    }

    /// How long preparing this environment may take (600 s unless its config says; None:
    /// no limit).
    pub fn setup_timeout(&self) -> Option<std::time::Duration> {
        match self.setup_timeout_seconds {
            None => Some(std::time::Duration::from_secs(DEFAULT_SETUP_TIMEOUT_S)),
            Some(s) if s > 0 => Some(std::time::Duration::from_secs(s as u64)),
            Some(_) => None,
        }
    }
}

/// Ray's `RuntimeEnvConfig`: `setup_timeout_seconds` (a positive integer, or -1 for no
/// limit), `eager_install` (a bool; environments are prepared when first used either way)
/// and `log_files` (a list of strings).
fn parse_config(value: &Value) -> Result<Option<i64>, SpecError> {
    let wrong = |field: &str, expected| SpecError::WrongType { field: format!("config.{field}"), expected };
    let config = value.as_object().ok_or(SpecError::WrongType { field: "config".into(), expected: "an object" })?;
    let mut timeout = None;
    for (key, v) in config {
        match key.as_str() {
            "setup_timeout_seconds" => match v.as_i64() {
                Some(s) if s > 0 || s == -1 => timeout = Some(s),
                _ => return Err(wrong(key, "a positive integer or -1")),
            },
            "eager_install" if !v.is_boolean() => return Err(wrong(key, "a bool")),
            "log_files" if strings("config.log_files", v).is_err() => return Err(wrong(key, "a list of strings")),
            "eager_install" | "log_files" => {}
            other => return Err(SpecError::UnknownField(format!("config.{other}"))),
        }
    }
    Ok(timeout)
}

/// `["pkg", ...]` or Ray's normalised `{"packages": [...], "pip_check": bool, "pip_version": str}`.
fn parse_pip(value: &Value) -> Result<PipSpec, SpecError> {
    let expected = "a list of requirements or {\"packages\": [...]}";
    let wrong = || SpecError::WrongType { field: "pip".into(), expected };
    match value {
        Value::Array(_) => Ok(PipSpec { packages: strings("pip", value)? }),
        Value::Object(o) => {
            for key in o.keys() {
                if !["packages", "pip_check", "pip_version"].contains(&key.as_str()) {
                    return Err(SpecError::UnknownField(format!("pip.{key}")));
                }
            }
            Ok(PipSpec { packages: strings("pip.packages", o.get("packages").ok_or_else(wrong)?)? })
        }
        _ => Err(wrong()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<RuntimeEnv, SpecError> {
        RuntimeEnv::parse(v.as_object().unwrap())
    }

    #[test]
    fn parses_what_rays_client_sends() {
        let env = parse(json!({
            "working_dir": "gcs://_ray_pkg_dfb316b29e0ce3bc.zip",
            "py_modules": ["gcs://_ray_pkg_aa.zip", "gcs://foo-1.0-py3-none-any.whl"],
            "env_vars": {"A": "1"},
            "pip": {"packages": ["requests==2.0"], "pip_check": false},
            "_ray_commit": "b7f4259e",
            "excludes": ["*.log"],
        }))
        .unwrap();
        assert_eq!(env.working_dir.as_deref(), Some("gcs://_ray_pkg_dfb316b29e0ce3bc.zip"));
        assert_eq!(env.py_modules.len(), 2);
        assert_eq!(env.env_vars["A"], "1");
        assert_eq!(env.pip.unwrap().packages, ["requests==2.0"]);
    }

    #[test]
    fn config_sets_the_setup_timeout_as_rays_does() {
        use std::time::Duration;
        assert_eq!(parse(json!({})).unwrap().setup_timeout(), Some(Duration::from_secs(600)));
        let set = parse(json!({"config": {"setup_timeout_seconds": 5, "eager_install": false}})).unwrap();
        assert_eq!(set.setup_timeout(), Some(Duration::from_secs(5)));
        assert_eq!(parse(json!({"config": {"setup_timeout_seconds": -1}})).unwrap().setup_timeout(), None);
        for bad in
            [json!({"setup_timeout_seconds": 0}), json!({"setup_timeout_seconds": "5"}), json!({"eager_install": 1})]
        {
            assert!(matches!(parse(json!({ "config": bad })), Err(SpecError::WrongType { .. })), "{bad}");
        }
        assert_eq!(parse(json!({"config": {"retries": 1}})), Err(SpecError::UnknownField("config.retries".into())));
        assert!(matches!(parse(json!({"config": 5})), Err(SpecError::WrongType { .. })));
    }

    #[test]
    fn refuses_unknown_fields_and_wrong_types() {
        assert_eq!(parse(json!({"conda": "env"})), Err(SpecError::UnknownField("conda".into())));
        assert!(matches!(parse(json!({"env_vars": {"A": 1}})), Err(SpecError::WrongType { .. })));
        assert!(matches!(parse(json!({"env_vars": ["A"]})), Err(SpecError::WrongType { .. })));
        assert!(matches!(parse(json!({"pip": 3})), Err(SpecError::WrongType { .. })));
        assert!(matches!(parse(json!({"working_dir": "s3://bucket/x.zip"})), Err(SpecError::BadUri { .. })));
        assert!(matches!(parse(json!({"working_dir": "gcs://../x.zip"})), Err(SpecError::BadUri { .. })));
        assert!(matches!(parse(json!({"working_dir": "relative/dir"})), Err(SpecError::BadUri { .. })));
    }

    #[test]
    fn package_names_are_plain_files() {
        assert_eq!(package_name("gcs://_ray_pkg_1.zip"), Some("_ray_pkg_1.zip"));
        assert_eq!(package_name("gcs://a/b.zip"), None);
        assert_eq!(package_name("gcs://x.exe"), None);
        assert_eq!(package_name("gcs://.hidden.zip"), None);
    }
}
