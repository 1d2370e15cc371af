//! The generated CRDs: the committed copy is current, small enough for `kubectl apply`, and
//! their schemas accept KubeRay-shaped manifests (apiVersion changed) and refuse bad values.

use kube::CustomResourceExt;
use oxray_operator::crd::{crds_yaml, RayCluster, RayJob, RayService};
use serde_json::Value;
use std::path::Path;

fn schema<K: CustomResourceExt>() -> Value {
    let crd = serde_json::to_value(K::crd()).unwrap();
    let mut schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    strip_kubernetes_keywords(&mut schema);
    schema
}

/// `x-kubernetes-*` keywords mean nothing to a JSON Schema validator; `nullable` does.
fn strip_kubernetes_keywords(value: &mut Value) {
    if let Value::Object(map) = value {
        map.retain(|k, _| !k.starts_with("x-kubernetes"));
        if map.remove("nullable") == Some(Value::Bool(true)) {
            if let Some(Value::String(t)) = map.get("type").cloned() {
                map.insert("type".into(), serde_json::json!([t, "null"]));
            }
        }
        map.values_mut().for_each(strip_kubernetes_keywords);
    } else if let Value::Array(items) = value {
        items.iter_mut().for_each(strip_kubernetes_keywords);
    }
}

fn fixture(name: &str) -> Value {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)).unwrap();
    serde_norway::from_str(&text).unwrap()
}

fn errors(schema: &Value, object: &Value) -> Vec<String> {
    let validator = jsonschema::validator_for(schema).unwrap();
    validator.iter_errors(object).map(|e| format!("{} at {}", e, e.instance_path())).collect()
}

#[test]
fn the_committed_crds_are_the_generated_ones() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/helm/oxray-operator/crds/oxray-crds.yaml");
    let committed = std::fs::read_to_string(&path).unwrap();
    assert!(committed == crds_yaml(), "run `make crds`: {} is out of date", path.display());
}

#[test]
fn each_crd_fits_in_the_annotation_that_kubectl_apply_writes() {
    for crd in [RayCluster::crd(), RayJob::crd(), RayService::crd()] {
        let size = serde_json::to_string(&crd).unwrap().len();
        assert!(size < 262_144 / 2, "{} is {size} bytes", crd.metadata.name.unwrap());
    }
}

#[test]
fn kuberay_shaped_manifests_validate() {
    for (name, schema) in [
        ("raycluster-sample.yaml", schema::<RayCluster>()),
        ("raycluster-autoscaler.yaml", schema::<RayCluster>()),
        ("rayjob-sample.yaml", schema::<RayJob>()),
        ("rayservice-sample.yaml", schema::<RayService>()),
    ] {
        let manifest = fixture(name);
        assert_eq!(errors(&schema, &manifest), Vec::<String>::new(), "{name}");
        // The typed view reads them too.
        match name {
            n if n.starts_with("raycluster") => drop(serde_json::from_value::<RayCluster>(manifest).unwrap()),
            n if n.starts_with("rayjob") => drop(serde_json::from_value::<RayJob>(manifest).unwrap()),
            _ => drop(serde_json::from_value::<RayService>(manifest).unwrap()),
        }
    }
}

#[test]
fn bad_values_are_refused_by_the_schema() {
    let schema = schema::<RayCluster>();
    let mut negative = fixture("raycluster-sample.yaml");
    negative["spec"]["workerGroupSpecs"][0]["replicas"] = serde_json::json!(-1);
    assert!(errors(&schema, &negative).iter().any(|e| e.contains("replicas")), "{:?}", errors(&schema, &negative));
    let mut bogus = fixture("raycluster-sample.yaml");
    bogus["spec"]["headGroupSpec"]["serviceType"] = serde_json::json!("Bogus");
    assert!(errors(&schema, &bogus).iter().any(|e| e.contains("serviceType")));
    let mut no_head = fixture("raycluster-sample.yaml");
    no_head["spec"].as_object_mut().unwrap().remove("headGroupSpec");
    assert!(!errors(&schema, &no_head).is_empty());
}
