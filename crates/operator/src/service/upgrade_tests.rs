use super::*;

fn spec(value: serde_json::Value) -> RayClusterSpec {
    serde_json::from_value(value).expect("a valid spec")
}

fn base() -> RayClusterSpec {
    spec(serde_json::json!({
        "headGroupSpec": {"rayStartParams": {"num-cpus": "1"},
                          "template": {"spec": {"containers": [{"name": "ray-head", "image": "oxray:1"}]}}},
        "workerGroupSpecs": [{"groupName": "small", "replicas": 1, "minReplicas": 0, "maxReplicas": 3,
                              "rayStartParams": {},
                              "template": {"spec": {"containers": [{"name": "w", "image": "oxray:1"}]}}}]
    }))
}

fn with_group(mut s: RayClusterSpec, name: &str) -> RayClusterSpec {
    let mut g = s.worker_group_specs[0].clone();
    g.group_name = name.into();
    s.worker_group_specs.push(g);
    s
}

fn named(name: &str, fit: Option<Fit>) -> Option<Named> {
    Some(Named { name: name.into(), fit })
}

#[test]
fn scale_and_injected_fields_leave_the_hash_alone_and_the_rest_changes_it() {
    let s = base();
    let mut scaled = s.clone();
    scaled.worker_group_specs[0].replicas = Some(3);
    scaled.worker_group_specs[0].max_replicas = Some(9);
    scaled.worker_group_specs[0].scale_strategy =
        Some(crate::crd::cluster::ScaleStrategy { workers_to_delete: vec!["p".into()] });
    scaled.suspend = Some(true);
    scaled.worker_group_specs[0].template.spec.as_mut().unwrap().tolerations = Some(vec![Default::default()]);
    assert_eq!(spec_hash(&scaled, None), spec_hash(&s, None));
    let mut image = s.clone();
    image.head_group_spec.template.spec.as_mut().unwrap().containers[0].image = Some("oxray:2".into());
    assert_ne!(spec_hash(&image, None), spec_hash(&s, None));
    let mut params = s.clone();
    params.worker_group_specs[0].ray_start_params.insert("num-gpus".into(), "1".into());
    assert_ne!(spec_hash(&params, None), spec_hash(&s, None));
}

#[test]
fn a_cluster_fits_the_same_config_groups_added_at_the_end_or_differs() {
    let s = base();
    assert_eq!(fit(&s, &marks(&s)), Fit::Same);
    assert_eq!(fit(&with_group(s.clone(), "big"), &marks(&s)), Fit::Extended);
    // A group added in front changes the groups the cluster has: a new cluster.
    let mut front = with_group(s.clone(), "big");
    front.worker_group_specs.swap(0, 1);
    assert_eq!(fit(&front, &marks(&s)), Fit::Different);
    // A removed group is no extension.
    assert_eq!(fit(&s, &marks(&with_group(s.clone(), "big"))), Fit::Different);
    let mut image = s.clone();
    image.worker_group_specs[0].template.spec.as_mut().unwrap().containers[0].image = Some("oxray:2".into());
    assert_eq!(fit(&with_group(image, "big"), &marks(&s)), Fit::Different);
    assert_eq!(fit(&s, &BTreeMap::new()), Fit::Unmarked);
    // The first worker group added to a cluster of a head alone.
    let head_only = RayClusterSpec { worker_group_specs: vec![], ..s.clone() };
    assert_eq!(fit(&s, &marks(&head_only)), Fit::Extended);
}

#[test]
fn the_first_cluster_is_prepared_then_serves() {
    let p = plan(None, None, ServiceUpgradeType::NewCluster, "svc-raycluster-aaaaa".into());
    assert_eq!(p.pending.as_deref(), Some("svc-raycluster-aaaaa"));
    assert_eq!(p.create.as_deref(), Some("svc-raycluster-aaaaa"));
    assert_eq!((p.active, p.serve.as_deref()), (None, Some("svc-raycluster-aaaaa")));
    // Even when upgrades are off, a service needs a cluster.
    let p = plan(None, None, ServiceUpgradeType::None, "n".into());
    assert_eq!(p.create.as_deref(), Some("n"));
    // Named in the status but not made yet (a pass cut short): made under that name.
    let p = plan(None, named("first", None), ServiceUpgradeType::NewCluster, "other".into());
    assert_eq!((p.pending.as_deref(), p.create.as_deref()), (Some("first"), Some("first")));
}

#[test]
fn a_running_cluster_that_fits_serves_and_is_kept_to_scale_in_place() {
    let p = plan(named("a", Some(Fit::Same)), None, ServiceUpgradeType::NewCluster, "n".into());
    assert_eq!(p.active.as_deref(), Some("a"));
    assert_eq!(p.serve.as_deref(), Some("a"));
    assert_eq!((p.pending, p.create), (None, None));
    assert_eq!(p.update, Some(InPlace { name: "a".into(), extend: false }));
    let p = plan(named("a", Some(Fit::Extended)), None, ServiceUpgradeType::NewCluster, "n".into());
    assert_eq!(p.update, Some(InPlace { name: "a".into(), extend: true }));
    assert_eq!(p.create, None);
    let p = plan(named("a", Some(Fit::Unmarked)), None, ServiceUpgradeType::NewCluster, "n".into());
    assert_eq!((p.mark.as_deref(), p.create), (Some("a"), None));
}

#[test]
fn a_changed_config_prepares_a_new_cluster_while_the_old_one_serves() {
    let p = plan(named("a", Some(Fit::Different)), None, ServiceUpgradeType::NewCluster, "b".into());
    assert_eq!(p.active.as_deref(), Some("a"), "the old cluster keeps the traffic");
    assert_eq!((p.pending.as_deref(), p.create.as_deref(), p.serve.as_deref()), (Some("b"), Some("b"), Some("b")));
    assert_eq!(p.update, None, "the old cluster is left as it is");
    // On the next passes the pending cluster exists.
    let p =
        plan(named("a", Some(Fit::Different)), named("b", Some(Fit::Same)), ServiceUpgradeType::NewCluster, "c".into());
    assert_eq!((p.pending.as_deref(), p.create), (Some("b"), None));
    assert_eq!(p.update, Some(InPlace { name: "b".into(), extend: false }));
    // With upgrades off, the old cluster serves on, untouched.
    let p = plan(named("a", Some(Fit::Different)), None, ServiceUpgradeType::None, "b".into());
    assert_eq!((p.active.as_deref(), p.pending, p.create, p.update), (Some("a"), None, None, None));
}

#[test]
fn a_config_changed_again_mid_upgrade_replaces_the_pending_cluster_or_rolls_back() {
    let changed = plan(
        named("a", Some(Fit::Different)),
        named("b", Some(Fit::Different)),
        ServiceUpgradeType::NewCluster,
        "c".into(),
    );
    assert_eq!((changed.pending.as_deref(), changed.create.as_deref()), (Some("c"), Some("c")));
    assert_eq!(changed.active.as_deref(), Some("a"));
    let back =
        plan(named("a", Some(Fit::Same)), named("b", Some(Fit::Different)), ServiceUpgradeType::NewCluster, "c".into());
    assert_eq!((back.active.as_deref(), back.pending, back.create), (Some("a"), None, None));
    assert_eq!(back.serve.as_deref(), Some("a"));
    let back = plan(named("a", Some(Fit::Same)), named("b", None), ServiceUpgradeType::NewCluster, "c".into());
    assert_eq!((back.pending, back.create), (None, None));
    let off =
        plan(named("a", Some(Fit::Different)), named("b", Some(Fit::Different)), ServiceUpgradeType::None, "c".into());
    assert_eq!((off.active.as_deref(), off.pending, off.create), (Some("a"), None, None));
}

#[test]
fn a_lost_active_cluster_is_prepared_again() {
    let p = plan(named("a", None), None, ServiceUpgradeType::NewCluster, "b".into());
    assert_eq!(p.active.as_deref(), Some("a"), "named until another takes the traffic");
    assert_eq!((p.pending.as_deref(), p.create.as_deref()), (Some("b"), Some("b")));
}

#[test]
fn the_pending_cluster_takes_the_traffic_once_it_serves() {
    assert!(promote(true, 1, true));
    assert!(!promote(false, 3, true), "an application not running yet");
    assert!(!promote(true, 0, true), "no pod of it serves");
    assert!(promote(true, 0, false), "the first cluster: nothing serves anyway");
}

#[test]
fn scale_fields_and_added_groups_are_applied_in_place() {
    let live = base();
    assert!(in_place(&live, &live, false).is_none());
    let mut goal = with_group(live.clone(), "big");
    goal.worker_group_specs[0].replicas = Some(2);
    goal.worker_group_specs[0].max_replicas = Some(8);
    let new = in_place(&live, &goal, true).unwrap();
    assert_eq!(new.worker_group_specs.len(), 2);
    assert_eq!((new.worker_group_specs[0].replicas, new.worker_group_specs[0].max_replicas), (Some(2), Some(8)));
    let new = in_place(&live, &goal, false).unwrap();
    assert_eq!(new.worker_group_specs.len(), 1, "groups are added only to a cluster that fits but for them");
    // An autoscaler owns the replicas: min and max follow, the count stays its.
    let mut autoscaled = live.clone();
    autoscaled.enable_in_tree_autoscaling = Some(true);
    let new = in_place(&autoscaled, &goal, false).unwrap();
    assert_eq!((new.worker_group_specs[0].replicas, new.worker_group_specs[0].max_replicas), (Some(1), Some(8)));
}

#[test]
fn clusters_no_longer_used_are_marked_then_deleted_after_the_delay() {
    let now = humantime::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
    let p = Plan { active: Some("b".into()), pending: Some("c".into()), ..Default::default() };
    let owned = vec![
        ("a".to_string(), None),
        ("b".to_string(), None),
        ("c".to_string(), None),
        ("d".to_string(), Some("2026-01-01T00:00:30Z".to_string())),
        ("e".to_string(), Some("2025-12-31T23:59:59Z".to_string())),
        ("f".to_string(), Some("yesterday".to_string())),
        // Taken back as active after it was marked.
        ("b".to_string(), Some("2025-12-31T23:59:59Z".to_string())),
    ];
    let sweeps = sweep(&owned, &p, now, Duration::from_secs(60));
    assert_eq!(
        sweeps,
        vec![
            Sweep::Mark { name: "a".into(), at: "2026-01-01T00:01:00Z".into() },
            Sweep::Delete { name: "e".into() },
            Sweep::Mark { name: "f".into(), at: "2026-01-01T00:01:00Z".into() },
            Sweep::Unmark { name: "b".into() },
        ]
    );
}
