use super::*;
use crate::crd::cluster::{AutoscalerOptions, ScaleStrategy};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn group(name: &str, replicas: i32, min: i32, max: i32, resources: &[(&str, &str)]) -> WorkerGroupSpec {
    let limits = BTreeMap::from([("cpu".to_string(), Quantity("2".into()))]);
    let template = PodTemplateSpec {
        spec: Some(PodSpec {
            containers: vec![Container {
                resources: Some(ResourceRequirements { limits: Some(limits), ..Default::default() }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    WorkerGroupSpec {
        group_name: name.into(),
        replicas: Some(replicas),
        min_replicas: Some(min),
        max_replicas: Some(max),
        template,
        resources: Some(resources.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        ..Default::default()
    }
}

fn spec(groups: Vec<WorkerGroupSpec>) -> RayClusterSpec {
    RayClusterSpec {
        worker_group_specs: groups,
        autoscaler_options: Some(AutoscalerOptions { idle_timeout_seconds: Some(10), ..Default::default() }),
        ..Default::default()
    }
}

fn wants(resources: &[(&str, f64)], count: u32) -> Waiting {
    Waiting {
        resources: resources.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        count,
        label_selector: BTreeMap::new(),
    }
}

fn pod(name: &str, group: &str, joined: bool, idle_s: Option<f64>) -> WorkerPod {
    WorkerPod { name: name.into(), group: group.into(), joined, idle_s, age_s: 30.0 }
}

fn replicas(scaled: &BTreeMap<String, Scaled>) -> Vec<(String, i32)> {
    scaled.iter().map(|(g, s)| (g.clone(), s.replicas)).collect()
}

#[test]
fn a_pod_offers_its_start_parameters_else_its_container_limits_and_its_named_resources() {
    let mut g = group("g", 0, 0, 1, &[("special", "2")]);
    assert_eq!(pod_shape(&g), BTreeMap::from([("CPU".into(), 2.0), ("special".into(), 2.0)]));
    g.ray_start_params = BTreeMap::from([
        ("num-cpus".to_string(), "8".to_string()),
        ("resources".to_string(), r#""{\"TPU\": 4}""#.to_string()),
    ]);
    let shape = pod_shape(&g);
    assert_eq!((shape["CPU"], shape["TPU"], shape["special"]), (8.0, 4.0, 2.0));
}

#[test]
fn waiting_work_adds_pods_of_the_first_group_that_holds_it_up_to_its_max() {
    let spec = spec(vec![group("small", 0, 0, 5, &[]), group("special", 0, 0, 2, &[("special", "1")])]);
    let scaled = autoscale(&spec, &[], &[wants(&[("special", 1.0)], 3), wants(&[("CPU", 1.0)], 3)]);
    // Three 1-CPU tasks fit in two 2-CPU pods; three `special` ones would need three pods of
    // a group of at most two.
    assert_eq!(replicas(&scaled), vec![("small".into(), 2), ("special".into(), 2)]);
    let nothing_fits = autoscale(&spec, &[], &[wants(&[("GPU", 1.0)], 4)]);
    assert_eq!(replicas(&nothing_fits), vec![("small".into(), 0), ("special".into(), 0)]);
}

#[test]
fn room_in_pods_on_their_way_is_counted_before_adding_more() {
    let spec = spec(vec![group("g", 2, 0, 9, &[])]);
    // One pod created and not joined yet, one wanted and not created: 4 CPUs coming.
    let pods = [pod("g-1", "g", false, None)];
    let scaled = autoscale(&spec, &pods, &[wants(&[("CPU", 1.0)], 4)]);
    assert_eq!(scaled["g"].replicas, 2);
    let more = autoscale(&spec, &pods, &[wants(&[("CPU", 1.0)], 5)]);
    assert_eq!(more["g"].replicas, 3);
}

#[test]
fn pods_that_joined_and_hold_nothing_yet_take_the_waiting_work_before_new_ones() {
    let spec = spec(vec![group("g", 2, 0, 9, &[])]);
    // Both pods of a scale-up just joined; the demand that asked for them is still reported.
    let joined = [pod("g-1", "g", true, Some(0.5)), pod("g-2", "g", true, Some(0.4))];
    assert_eq!(autoscale(&spec, &joined, &[wants(&[("CPU", 2.0)], 2)])["g"].replicas, 2);
    // Busy pods have no room to give.
    let busy = [pod("g-1", "g", true, None), pod("g-2", "g", true, None)];
    assert_eq!(autoscale(&spec, &busy, &[wants(&[("CPU", 2.0)], 2)])["g"].replicas, 4);
    // A pod idle past the timeout whose room work was given stays.
    let idle = [pod("g-1", "g", true, Some(30.0)), pod("g-2", "g", true, Some(30.0))];
    let kept = autoscale(&spec, &idle, &[wants(&[("CPU", 2.0)], 1)]);
    assert_eq!(kept["g"], Scaled { replicas: 1, workers_to_delete: vec!["g-2".into()] });
}

#[test]
fn pods_idle_past_the_timeout_go_down_to_the_min_and_busy_ones_never() {
    let mut g = group("g", 4, 1, 9, &[]);
    g.scale_strategy = Some(ScaleStrategy { workers_to_delete: vec!["gone".into()] });
    let spec = spec(vec![g]);
    let pods = [
        pod("busy", "g", true, None),
        pod("recent", "g", true, Some(3.0)),
        pod("idle-a", "g", true, Some(30.0)),
        pod("idle-b", "g", true, Some(12.0)),
    ];
    let scaled = autoscale(&spec, &pods, &[]);
    assert_eq!(scaled["g"], Scaled { replicas: 2, workers_to_delete: vec!["idle-a".into(), "idle-b".into()] });
    // Never below the min.
    let tight = autoscale(&super::tests::spec(vec![group("g", 2, 2, 9, &[])]), &pods, &[]);
    assert_eq!(tight["g"], Scaled { replicas: 2, workers_to_delete: vec![] });
    // A group growing this round removes nothing.
    let growing = autoscale(&spec, &pods, &[wants(&[("CPU", 2.0)], 9)]);
    assert!(growing["g"].replicas > 4 && growing["g"].workers_to_delete.is_empty(), "{growing:?}");
}

#[test]
fn the_spec_changes_only_when_a_decision_does() {
    let spec = spec(vec![group("g", 1, 0, 3, &[])]);
    let same = autoscale(&spec, &[pod("g-1", "g", true, None)], &[]);
    assert!(applied(&spec, &same).is_none());
    let grown = autoscale(&spec, &[pod("g-1", "g", true, None)], &[wants(&[("CPU", 2.0)], 1)]);
    let new = applied(&spec, &grown).expect("one more pod");
    assert_eq!(new.worker_group_specs[0].replicas, Some(2));
    assert!(new.worker_group_specs[0].scale_strategy.is_none(), "no empty strategy is written");
    let shrunk = autoscale(&spec, &[pod("g-1", "g", true, Some(60.0))], &[]);
    let new = applied(&spec, &shrunk).expect("one pod less");
    assert_eq!(new.worker_group_specs[0].replicas, Some(0));
    assert_eq!(new.worker_group_specs[0].scale_strategy.as_ref().unwrap().workers_to_delete, vec!["g-1".to_string()]);
    assert_eq!(
        patch(&spec, &new, Some("7")),
        serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            {"op": "test", "path": "/spec/workerGroupSpecs/0/groupName", "value": "g"},
            {"op": "add", "path": "/spec/workerGroupSpecs/0/replicas", "value": 0},
            {"op": "add", "path": "/spec/workerGroupSpecs/0/scaleStrategy", "value": {"workersToDelete": ["g-1"]}},
        ])
    );
}

#[test]
fn conservative_upscaling_keeps_as_many_pods_on_their_way_as_the_cluster_has_nodes() {
    let mut spec = spec(vec![group("g", 0, 0, 100, &[])]);
    let lots = [wants(&[("CPU", 2.0)], 40)];
    assert_eq!(autoscale(&spec, &[], &lots)["g"].replicas, 40, "no bound by default");
    spec.autoscaler_options.as_mut().unwrap().upscaling_mode = Some(UpscalingMode::Conservative);
    assert_eq!(autoscale(&spec, &[], &lots)["g"].replicas, 5, "at least 5");
    // Eight joined and busy, two on their way: a cluster of nine nodes has nine on the way.
    let mut pods: Vec<WorkerPod> = (0..8).map(|i| pod(&format!("b{i}"), "g", true, None)).collect();
    pods.extend([pod("w1", "g", false, None), pod("w2", "g", false, None)]);
    spec.worker_group_specs[0].replicas = Some(10);
    assert_eq!(autoscale(&spec, &pods, &lots)["g"].replicas, 17);
    spec.autoscaler_options.as_mut().unwrap().upscaling_mode = Some(UpscalingMode::Aggressive);
    assert_eq!(autoscale(&spec, &pods, &lots)["g"].replicas, 48, "aggressive is the default");
}

#[test]
fn a_pod_that_never_joins_is_no_room_and_goes() {
    let spec = spec(vec![group("g", 2, 1, 9, &[])]);
    let stuck = WorkerPod { age_s: STUCK_AFTER.as_secs_f64(), ..pod("late", "g", false, None) };
    let pods = [pod("ok", "g", true, None), stuck.clone()];
    // A 2-CPU task: the stuck pod is no room for it, so a pod is added in its place.
    let scaled = autoscale(&spec, &pods, &[wants(&[("CPU", 2.0)], 1)]);
    assert_eq!((scaled["g"].replicas, scaled["g"].workers_to_delete.clone()), (2, vec!["late".to_string()]));
    let quiet = autoscale(&spec, &pods, &[]);
    assert_eq!((quiet["g"].replicas, quiet["g"].workers_to_delete.clone()), (1, vec!["late".to_string()]));
    // At the group's min, it is replaced.
    let mut one = spec.clone();
    one.worker_group_specs[0].replicas = Some(1);
    let at_min = autoscale(&one, std::slice::from_ref(&stuck), &[]);
    assert_eq!((at_min["g"].replicas, at_min["g"].workers_to_delete.clone()), (1, vec!["late".to_string()]));
    // Not stuck yet: room on its way, and it stays.
    let young = [pod("ok", "g", true, None), WorkerPod { age_s: 60.0, ..stuck }];
    assert_eq!(autoscale(&spec, &young, &[wants(&[("CPU", 2.0)], 1)])["g"].replicas, 2);
    assert!(autoscale(&spec, &young, &[])["g"].workers_to_delete.is_empty());
}

#[test]
fn work_that_selects_labels_gets_pods_of_a_group_with_them() {
    let mut a100 = group("a100", 0, 0, 4, &[]);
    a100.labels = Some(BTreeMap::from([("accelerator".to_string(), "A100".to_string())]));
    let mut h100 = group("h100", 0, 0, 4, &[]);
    h100.ray_start_params.insert("labels".into(), "\"accelerator=H100, zone=b\"".into());
    assert_eq!(pod_labels(&h100)["zone"], "b");
    let spec = spec(vec![group("plain", 0, 0, 4, &[]), a100, h100]);
    let on = |value: &str, count| Waiting {
        label_selector: BTreeMap::from([("accelerator".to_string(), value.to_string())]),
        ..wants(&[("CPU", 2.0)], count)
    };
    let scaled = autoscale(&spec, &[], &[on("H100", 2), on("!A100", 1), wants(&[("CPU", 2.0)], 1)]);
    // A missing label matches only a negation: the plain group takes `!A100` and the rest.
    assert_eq!(replicas(&scaled), vec![("a100".into(), 0), ("h100".into(), 2), ("plain".into(), 2)]);
    // An idle pod of another group is no room for it: a pod of the right group is added.
    let idle_plain = [pod("p1", "plain", true, Some(1.0))];
    let mut with_one = spec.clone();
    with_one.worker_group_specs[0].replicas = Some(1);
    let scaled = autoscale(&with_one, &idle_plain, &[on("A100", 1)]);
    assert_eq!(scaled["a100"].replicas, 1);
    assert_eq!(scaled["plain"].replicas, 1, "not idle past its timeout yet");
}
