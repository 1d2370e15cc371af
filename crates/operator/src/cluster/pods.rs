//! The pods of a cluster, built from its group templates: the container command, the
//! environment, labels, ports and volumes the operator adds.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector,
    PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Probe, SecretKeySelector, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sha2::{Digest, Sha256};

use crate::crd::cluster::{HeadGroupSpec, WorkerGroupSpec};
use crate::names::*;
use crate::params;
use crate::quantity;

/// What every pod of one cluster shares.
#[derive(Clone, Debug)]
pub struct ClusterRef {
    pub name: String,
    pub namespace: String,
    pub owner: OwnerReference,
    pub cluster_domain: String,
    /// Secret (key `token`) with the cluster token.
    pub token_secret: String,
    /// The claim holding the head's database, when it has one.
    pub head_claim: Option<(String, Option<String>)>,
    /// Worker groups scale with the demand (`enableInTreeAutoscaling`).
    pub autoscaling: bool,
}

impl ClusterRef {
    pub fn labels(&self, node_type: &str, group: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (LABEL_IS_NODE.into(), "yes".into()),
            (LABEL_CLUSTER.into(), self.name.clone()),
            (LABEL_NODE_TYPE.into(), node_type.into()),
            (LABEL_GROUP.into(), group.into()),
            (LABEL_IDENTIFIER.into(), format!("{}-{node_type}", self.name)),
            (LABEL_APP_NAME.into(), "oxray".into()),
            (LABEL_CREATED_BY.into(), MANAGER.into()),
        ])
    }

    pub fn meta(&self, name: Option<String>, labels: BTreeMap<String, String>) -> ObjectMeta {
        ObjectMeta {
            name,
            namespace: Some(self.namespace.clone()),
            labels: Some(labels),
            owner_references: Some(vec![self.owner.clone()]),
            ..Default::default()
        }
    }
}

/// A hash of what makes a group's pods what they are; pods whose hash differs are outdated.
pub fn template_hash(template: &PodTemplateSpec, params: &BTreeMap<String, String>) -> String {
    let text = serde_json::to_string(&(template, params)).expect("templates serialize");
    hex::encode(&Sha256::digest(text.as_bytes())[..8])
}

pub fn head_pod(cluster: &ClusterRef, spec: &HeadGroupSpec) -> Result<Pod, String> {
    let mut flags = vec!["start".to_string(), "--head".into(), "--block".into()];
    let mut p = spec.ray_start_params.clone();
    p.entry("dashboard-host".into()).or_insert_with(|| "0.0.0.0".into());
    flags.extend(logical_flags(&p, &spec.resources, &spec.labels)?);
    if cluster.head_claim.is_some() {
        flags.extend(["--storage".into(), format!("{STORAGE_MOUNT}/head.redb")]);
    }
    let dashboard = params::dashboard_port(&spec.ray_start_params)?;
    let mut pod = build(cluster, &spec.template, &spec.ray_start_params, "head", HEAD_GROUP, flags)?;
    pod.metadata.name = Some(crate::names::head_pod(&cluster.name));
    let podspec = pod.spec.as_mut().expect("built pods have a spec");
    let container = &mut podspec.containers[0];
    container
        .env
        .get_or_insert_with(Vec::new)
        .push(env("RAY_ADDRESS", "127.0.0.1:".to_string() + &params::gcs_port(&spec.ray_start_params)?.to_string()));
    if cluster.autoscaling {
        // Work no node can hold waits for the nodes the operator adds.
        container.env.get_or_insert_with(Vec::new).push(env("OXRAY_AUTOSCALING", "1".into()));
    }
    if container.ports.as_ref().is_none_or(|p| p.is_empty()) {
        container.ports = Some(default_head_ports(&spec.ray_start_params)?);
    }
    if container.readiness_probe.is_none() {
        container.readiness_probe = Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/api/gcs_healthz".into()),
                port: IntOrString::Int(dashboard),
                ..Default::default()
            }),
            period_seconds: Some(2),
            failure_threshold: Some(5),
            ..Default::default()
        });
    }
    if let Some((claim, sub_path)) = &cluster.head_claim {
        container.volume_mounts.get_or_insert_with(Vec::new).push(VolumeMount {
            name: "oxray-head-storage".into(),
            mount_path: STORAGE_MOUNT.into(),
            sub_path: sub_path.clone(),
            ..Default::default()
        });
        podspec.volumes.get_or_insert_with(Vec::new).push(Volume {
            name: "oxray-head-storage".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.clone(),
                read_only: None,
            }),
            ..Default::default()
        });
    }
    Ok(pod)
}

pub fn worker_pod(
    cluster: &ClusterRef,
    group: &WorkerGroupSpec,
    head_params: &BTreeMap<String, String>,
) -> Result<Pod, String> {
    let address = format!(
        "{}:{}",
        head_fqdn(&cluster.name, &cluster.namespace, &cluster.cluster_domain),
        params::gcs_port(head_params)?
    );
    // The head may start after its workers (image pulls, scheduling): they wait for it.
    let mut flags = vec![
        "start".to_string(),
        "--address".into(),
        address,
        "--block".into(),
        "--join-timeout-s".into(),
        "600".into(),
    ];
    flags.extend(logical_flags(&group.ray_start_params, &group.resources, &group.labels)?);
    let mut pod = build(cluster, &group.template, &group.ray_start_params, "worker", &group.group_name, flags)?;
    pod.metadata.generate_name = Some(worker_pod_prefix(&cluster.name, &group.group_name));
    Ok(pod)
}

/// The flags of `oxray start` for `rayStartParams`, with a group's `resources` and `labels`
/// merged into those of the parameters (they win where both name one): each flag once.
fn logical_flags(
    start_params: &BTreeMap<String, String>,
    resources: &Option<BTreeMap<String, String>>,
    labels: &Option<BTreeMap<String, String>>,
) -> Result<Vec<String>, String> {
    let mut rest = start_params.clone();
    rest.retain(|name, _| !matches!(name.trim_start_matches('-'), "resources" | "labels"));
    let mut flags = params::start_flags(&rest)?;
    let resources = params::node_resources(start_params, resources)?;
    if !resources.is_empty() {
        flags.extend(["--resources".into(), serde_json::json!(resources).to_string()]);
    }
    let labels = params::node_labels(start_params, labels)?;
    if !labels.is_empty() {
        let text: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        flags.extend(["--labels".into(), text.join(",")]);
    }
    Ok(flags)
}

fn build(
    cluster: &ClusterRef,
    template: &PodTemplateSpec,
    start_params: &BTreeMap<String, String>,
    node_type: &str,
    group: &str,
    mut flags: Vec<String>,
) -> Result<Pod, String> {
    let mut spec = template.spec.clone().ok_or("the pod template has no spec")?;
    if spec.containers.is_empty() {
        return Err("the pod template has no containers: the oxray container must be containers[0]".into());
    }
    let template_meta = template.metadata.clone().unwrap_or_default();
    let mut labels = template_meta.labels.clone().unwrap_or_default();
    // Set by the operator once the pod's Serve proxy is up, never before.
    labels.remove(LABEL_SERVE);
    labels.extend(cluster.labels(node_type, group));
    let mut annotations = template_meta.annotations.clone().unwrap_or_default();
    annotations.insert(ANNOTATION_TEMPLATE_HASH.into(), template_hash(template, start_params));
    let keep_command = annotations.get(ANNOTATION_KEEP_COMMAND).is_some_and(|v| v == "true");

    let container = &mut spec.containers[0];
    flags.extend(["--node-ip-address".into(), "$(POD_IP)".into(), "--node-name".into(), "$(POD_NAME)".into()]);
    flags.extend(container_resource_flags(container, start_params)?);
    let mut env_vars = vec![
        field_env("POD_IP", "status.podIP"),
        field_env("POD_NAME", "metadata.name"),
        env("RAY_CLUSTER_NAME", cluster.name.clone()),
        env("RAY_CLUSTER_NAMESPACE", cluster.namespace.clone()),
        // Pods talk to each other on TLS from the cluster token, whatever their addresses
        // (and whatever names reach them); the user's own value comes later and wins.
        env("OXRAY_TLS", "auto".into()),
        EnvVar {
            name: "OXRAY_AUTH_TOKEN".into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: cluster.token_secret.clone(),
                    key: "token".into(),
                    optional: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    ];
    if keep_command {
        env_vars.push(env("OXRAY_START_CMD", format!("oxray {}", flags.join(" "))));
    } else {
        container.command = Some(vec!["oxray".into()]);
        container.args = Some(flags);
    }
    // The operator's variables come first: `$(POD_IP)` in the user's own values then resolves.
    let user_env = container.env.take().unwrap_or_default();
    env_vars.extend(
        user_env.into_iter().filter(|e| !matches!(e.name.as_str(), "POD_IP" | "POD_NAME" | "OXRAY_AUTH_TOKEN")),
    );
    container.env = Some(env_vars);

    // Containers get a 64 MiB /dev/shm by default; the object store lives there.
    let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
    if !mounts.iter().any(|m| m.mount_path == "/dev/shm") {
        mounts.push(VolumeMount { name: "shared-mem".into(), mount_path: "/dev/shm".into(), ..Default::default() });
        spec.volumes.get_or_insert_with(Vec::new).push(Volume {
            name: "shared-mem".into(),
            empty_dir: Some(EmptyDirVolumeSource { medium: Some("Memory".into()), size_limit: None }),
            ..Default::default()
        });
    }

    let mut meta = cluster.meta(None, labels);
    meta.annotations = Some(annotations);
    Ok(Pod { metadata: meta, spec: Some(spec), status: None })
}

/// CPUs, GPUs and memory from the container's limits (else requests), unless the
/// parameters give them, as KubeRay does.
fn container_resource_flags(
    container: &Container,
    start_params: &BTreeMap<String, String>,
) -> Result<Vec<String>, String> {
    let resources = container.resources.clone().unwrap_or_default();
    let pick = |name: &str| {
        resources
            .limits
            .as_ref()
            .and_then(|l| l.get(name))
            .or_else(|| resources.requests.as_ref().and_then(|r| r.get(name)))
            .map(|q| q.0.clone())
    };
    let mut flags = Vec::new();
    let wanted = [("num-cpus", "cpu"), ("num-gpus", "nvidia.com/gpu"), ("memory", "memory")];
    for (flag, resource) in wanted {
        if start_params.contains_key(flag) {
            continue;
        }
        if let Some(amount) = pick(resource) {
            let units = quantity::ceil_units(&amount)
                .ok_or_else(|| format!("containers[0].resources {resource}: {amount:?} is not a quantity"))?;
            flags.extend([format!("--{flag}"), units.to_string()]);
        }
    }
    Ok(flags)
}

fn default_head_ports(start_params: &BTreeMap<String, String>) -> Result<Vec<ContainerPort>, String> {
    let port = |name: &str, number: i32| ContainerPort {
        name: Some(name.into()),
        container_port: number,
        ..Default::default()
    };
    Ok(vec![
        port("gcs-server", params::gcs_port(start_params)?),
        port("dashboard", params::dashboard_port(start_params)?),
        port("client", PORT_CLIENT),
        port("serve", PORT_SERVE),
    ])
}

fn env(name: &str, value: String) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value), value_from: None }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector { field_path: path.into(), api_version: None }),
            ..Default::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn cluster() -> ClusterRef {
        ClusterRef {
            name: "c".into(),
            namespace: "ns".into(),
            owner: OwnerReference { name: "c".into(), uid: "u".into(), ..Default::default() },
            cluster_domain: "cluster.local".into(),
            token_secret: "c-token".into(),
            head_claim: None,
            autoscaling: false,
        }
    }

    fn template(cpu: &str) -> PodTemplateSpec {
        let resources = ResourceRequirements {
            limits: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity(cpu.into())),
                ("memory".into(), Quantity("1Gi".into())),
            ])),
            ..Default::default()
        };
        PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container { name: "ray".into(), resources: Some(resources), ..Default::default() }],
                ..Default::default()
            }),
        }
    }

    fn args(pod: &Pod) -> Vec<String> {
        pod.spec.as_ref().unwrap().containers[0].args.clone().unwrap()
    }

    #[test]
    fn the_head_runs_oxray_start_with_its_resources_and_labels() {
        let spec = HeadGroupSpec { template: template("1500m"), ..Default::default() };
        let pod = head_pod(&cluster(), &spec).unwrap();
        let a = args(&pod).join(" ");
        assert!(a.starts_with("start --head --block --dashboard-host 0.0.0.0"), "{a}");
        assert!(a.contains("--num-cpus 2") && a.contains("--memory 1073741824"), "{a}");
        assert!(a.contains("--node-ip-address $(POD_IP) --node-name $(POD_NAME)"), "{a}");
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels["ray.io/node-type"], "head");
        assert_eq!(labels["ray.io/cluster"], "c");
        assert_eq!(pod.metadata.name.as_deref(), Some("c-head"));
        let container = &pod.spec.as_ref().unwrap().containers[0];
        let env: Vec<&str> = container.env.as_ref().unwrap().iter().map(|e| e.name.as_str()).collect();
        assert!(env.contains(&"OXRAY_AUTH_TOKEN") && env[0] == "POD_IP", "{env:?}");
        let mounts = container.volume_mounts.as_ref().unwrap();
        assert!(mounts.iter().any(|m| m.mount_path == "/dev/shm"));
        assert!(container.readiness_probe.is_some());
    }

    #[test]
    fn workers_join_the_head_service_and_wait_for_it() {
        let group = WorkerGroupSpec { group_name: "gpu".into(), template: template("2"), ..Default::default() };
        let head_params = BTreeMap::from([("port".to_string(), "6380".to_string())]);
        let pod = worker_pod(&cluster(), &group, &head_params).unwrap();
        let a = args(&pod).join(" ");
        assert!(a.contains("--address c-head-svc.ns.svc.cluster.local:6380 --block --join-timeout-s"), "{a}");
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("c-gpu-worker-"));
    }

    #[test]
    fn start_parameters_and_a_group_s_resources_and_labels_make_each_flag_once() {
        let group = WorkerGroupSpec {
            group_name: "gpu".into(),
            template: template("2"),
            ray_start_params: BTreeMap::from([
                ("resources".to_string(), r#""{\"TPU\": 4, \"disk\": 1}""#.to_string()),
                ("labels".to_string(), "zone=a, disk=hdd".to_string()),
            ]),
            resources: Some(BTreeMap::from([("disk".to_string(), "2".to_string())])),
            labels: Some(BTreeMap::from([("disk".to_string(), "ssd".to_string())])),
            ..Default::default()
        };
        let a = args(&worker_pod(&cluster(), &group, &BTreeMap::new()).unwrap());
        let after = |flag: &str| {
            assert_eq!(a.iter().filter(|x| *x == flag).count(), 1, "{flag} once: {a:?}");
            a[a.iter().position(|x| x == flag).unwrap() + 1].clone()
        };
        assert_eq!(after("--resources"), r#"{"TPU":4.0,"disk":2.0}"#, "the group's amount wins");
        assert_eq!(after("--labels"), "disk=ssd,zone=a");
        let with = |key: &str, value: &str| WorkerGroupSpec {
            ray_start_params: BTreeMap::from([(key.to_string(), value.to_string())]),
            labels: None,
            resources: None,
            ..group.clone()
        };
        let dashed = args(&worker_pod(&cluster(), &with("--resources", r#"{"TPU": 4}"#), &BTreeMap::new()).unwrap());
        assert!(dashed.join(" ").contains(r#"--resources {"TPU":4.0}"#), "written with its dashes: {dashed:?}");
        let json = args(&worker_pod(&cluster(), &with("labels", r#"{"zone": "a"}"#), &BTreeMap::new()).unwrap());
        assert!(json.join(" ").contains("--labels zone=a"), "{json:?}");
        for (value, why) in [("zone", "not key=value"), (r#"{"zone": "a,b"}"#, "may not hold")] {
            let err = worker_pod(&cluster(), &with("labels", value), &BTreeMap::new()).unwrap_err();
            assert!(err.contains(why), "{value}: {err}");
        }
    }

    #[test]
    fn a_kept_command_gets_the_generated_one_in_the_environment() {
        let mut t = template("1");
        t.metadata = Some(ObjectMeta {
            annotations: Some(BTreeMap::from([(ANNOTATION_KEEP_COMMAND.to_string(), "true".to_string())])),
            ..Default::default()
        });
        t.spec.as_mut().unwrap().containers[0].command = Some(vec!["my-entry".into()]);
        let pod = head_pod(&cluster(), &HeadGroupSpec { template: t, ..Default::default() }).unwrap();
        let c = &pod.spec.as_ref().unwrap().containers[0];
        assert_eq!(c.command.as_deref(), Some(&["my-entry".to_string()][..]));
        assert!(c.env.as_ref().unwrap().iter().any(|e| e.name == "OXRAY_START_CMD"));
    }

    #[test]
    fn bad_templates_and_params_are_errors() {
        let empty = HeadGroupSpec { template: PodTemplateSpec::default(), ..Default::default() };
        assert!(head_pod(&cluster(), &empty).is_err());
        let typo = HeadGroupSpec {
            template: template("1"),
            ray_start_params: BTreeMap::from([("num-cpu".to_string(), "1".to_string())]),
            ..Default::default()
        };
        assert!(head_pod(&cluster(), &typo).unwrap_err().contains("num-cpu"));
        assert!(head_pod(&cluster(), &HeadGroupSpec { template: template("lots"), ..Default::default() }).is_err());
    }

    #[test]
    fn the_hash_follows_the_template() {
        let params = BTreeMap::new();
        assert_eq!(template_hash(&template("1"), &params), template_hash(&template("1"), &params));
        assert_ne!(template_hash(&template("1"), &params), template_hash(&template("2"), &params));
    }
}
