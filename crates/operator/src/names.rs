//! Names, labels and ports of what the operator creates. Pod labels are KubeRay's, so
//! selectors written for KubeRay clusters (services, network policies, queues) keep working.

pub const MANAGER: &str = "oxray-operator";
pub const LABEL_IS_NODE: &str = "ray.io/is-ray-node";
pub const LABEL_CLUSTER: &str = "ray.io/cluster";
pub const LABEL_NODE_TYPE: &str = "ray.io/node-type";
pub const LABEL_GROUP: &str = "ray.io/group";
pub const LABEL_IDENTIFIER: &str = "ray.io/identifier";
pub const LABEL_APP_NAME: &str = "app.kubernetes.io/name";
pub const LABEL_CREATED_BY: &str = "app.kubernetes.io/created-by";
/// "true" on the pods behind the Serve Service: those whose Serve proxy is up.
pub const LABEL_SERVE: &str = "ray.io/serve";
pub const LABEL_ORIGIN_NAME: &str = "ray.io/originated-from-cr-name";
pub const LABEL_ORIGIN_KIND: &str = "ray.io/originated-from-crd";
pub const ANNOTATION_TEMPLATE_HASH: &str = "oxray.io/pod-template-hash";
/// Keep the user's container command; the generated one is in `$OXRAY_START_CMD`.
pub const ANNOTATION_KEEP_COMMAND: &str = "ray.io/overwrite-container-cmd";
/// On a bare RayCluster: make `<cluster>-serve-svc`, as a RayService has.
pub const ANNOTATION_SERVE_SERVICE: &str = "ray.io/enable-serve-service";
pub const HEAD_GROUP: &str = "headgroup";
pub const JOB_FINALIZER: &str = "oxray.io/rayjob-finalizer";

pub const PORT_GCS: i32 = 6379;
pub const PORT_DASHBOARD: i32 = 8265;
pub const PORT_CLIENT: i32 = 10001;
pub const PORT_SERVE: i32 = 8000;
pub const PORT_METRICS: i32 = 8080;

/// Where the head's database lives inside the head pod when it has a claim.
pub const STORAGE_MOUNT: &str = "/var/lib/oxray";

pub fn head_service(cluster: &str) -> String {
    format!("{cluster}-head-svc")
}

pub fn head_pod(cluster: &str) -> String {
    format!("{cluster}-head")
}

pub fn worker_pod_prefix(cluster: &str, group: &str) -> String {
    format!("{cluster}-{group}-worker-")
}

pub fn token_secret(cluster: &str) -> String {
    format!("{cluster}-token")
}

pub fn head_storage_claim(cluster: &str) -> String {
    format!("{cluster}-head-storage")
}

/// The head's stable DNS name, which workers join.
pub fn head_fqdn(cluster: &str, namespace: &str, cluster_domain: &str) -> String {
    format!("{}.{namespace}.svc.{cluster_domain}", head_service(cluster))
}

/// Five random lowercase characters, as Kubernetes' generated names use.
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut bytes = [0u8; 5];
    getrandom::fill(&mut bytes).expect("the OS random source works");
    bytes.iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect()
}
