//! Work that waits for room: leases asked of this agent that no node could grant when asked,
//! remembered while their askers keep asking, and reported to the head with each heartbeat.
//! An autoscaler adds nodes for it (Ray's resource demand, with the asker's backlog).

use oxray_proto::convert::resources_to_proto;
use oxray_proto::v1;
use oxray_types::ResourceSet;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a demand counts after it was last asked: an asker that waits asks again well
/// within it (every `NOTHING_YET` or `BUSY_WAIT`), one that stopped drops out.
const REMEMBERED: Duration = Duration::from_secs(3);

#[derive(Default)]
pub struct Demand {
    /// Whether the cluster adds nodes for waiting work: then a lease no node can hold waits.
    autoscaling: AtomicBool,
    waiting: Mutex<HashMap<Key, Waiting>>,
}

/// Asker, shape and label selector.
type Key = (String, String, BTreeMap<String, String>);

struct Waiting {
    resources: ResourceSet,
    /// The labels its node must have; empty when any node will do, or not known here (an
    /// asker sent here by another agent).
    selector: BTreeMap<String, String>,
    count: u32,
    asked: Instant,
}

/// Who asked: a process of one machine, for one of its actors or for its tasks.
pub fn asker(owner: Option<&v1::ProcessIdentity>, actor_id: &str) -> String {
    let process =
        owner.map(|o| format!("{}/{}/{}/{}", o.boot_id, o.pid_namespace, o.pid, o.start_ticks)).unwrap_or_default();
    if actor_id.is_empty() {
        process
    } else {
        format!("{process}/{actor_id}")
    }
}

impl Demand {
    pub fn autoscaling(&self) -> bool {
        self.autoscaling.load(Ordering::Relaxed)
    }

    pub fn set_autoscaling(&self, on: bool) {
        self.autoscaling.store(on, Ordering::Relaxed);
    }

    /// `asker` waits for `count` of `resources` on a node `selector` selects (none: nothing
    /// waits behind its request any more, a cancelled task's, say).
    pub fn record(
        &self,
        asker: &str,
        resources: &ResourceSet,
        selector: &BTreeMap<String, String>,
        count: u32,
        now: Instant,
    ) {
        let key = (asker.to_string(), format!("{:?}", resources.to_map()), selector.clone());
        let waiting = Waiting { resources: resources.clone(), selector: selector.clone(), count, asked: now };
        self.waiting.lock().expect("demand lock").insert(key, waiting);
    }

    /// `asker`'s lease of `resources` was granted (under any selector): what remains waits
    /// behind it, and asks again.
    pub fn granted(&self, asker: &str, resources: &ResourceSet) {
        let mut waiting = self.waiting.lock().expect("demand lock");
        // Every lease passes here: nothing is looked at while nothing waits, as is usual.
        if !waiting.is_empty() {
            let shape = format!("{:?}", resources.to_map());
            waiting.retain(|(who, what, _), _| who != asker || *what != shape);
        }
    }

    /// What waits now; forgets what nobody asked for lately.
    pub fn current(&self, now: Instant) -> Vec<v1::ResourceDemand> {
        let mut waiting = self.waiting.lock().expect("demand lock");
        waiting.retain(|_, w| now.duration_since(w.asked) < REMEMBERED && w.count > 0);
        let mut entries: Vec<_> = waiting.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        entries
            .into_iter()
            .map(|((asker, _, _), w)| v1::ResourceDemand {
                resources: resources_to_proto(&w.resources),
                count: w.count,
                asker: asker.clone(),
                label_selector: w.selector.clone().into_iter().collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(n: f64) -> ResourceSet {
        let mut set = ResourceSet::new();
        set.set("CPU", n).unwrap();
        set
    }

    #[test]
    fn waiting_work_counts_while_its_asker_asks_and_once_per_asker_and_shape() {
        let demand = Demand::default();
        let t0 = Instant::now();
        let any = BTreeMap::new();
        demand.record("a", &cpus(4.0), &any, 3, t0);
        demand.record("a", &cpus(4.0), &any, 2, t0 + Duration::from_secs(1));
        demand.record("b", &cpus(4.0), &any, 0, t0 + Duration::from_secs(1));
        let gpu = BTreeMap::from([("accelerator".to_string(), "A100".to_string())]);
        demand.record("a", &cpus(1.0), &gpu, 1, t0 + Duration::from_secs(2));
        let now = demand.current(t0 + Duration::from_secs(2));
        let counts: Vec<(String, u32)> = now.iter().map(|d| (d.asker.clone(), d.count)).collect();
        assert_eq!(counts, vec![("a".into(), 1), ("a".into(), 2)], "the newest backlog; none waits behind b's");
        assert_eq!(now[0].label_selector.get("accelerator").map(String::as_str), Some("A100"));
        assert!(now[1].label_selector.is_empty());
        demand.granted("a", &cpus(1.0));
        assert_eq!(demand.current(t0 + Duration::from_secs(2)).len(), 1);
        let later = demand.current(t0 + Duration::from_secs(4) + Duration::from_millis(500));
        assert!(later.is_empty(), "nobody asked for 3 s: {later:?}");
    }

    #[test]
    fn one_asker_waiting_for_one_shape_under_two_selectors_asks_for_both() {
        let demand = Demand::default();
        let t0 = Instant::now();
        let on = |v: &str| BTreeMap::from([("accelerator".to_string(), v.to_string())]);
        demand.record("a", &cpus(1.0), &on("A100"), 2, t0);
        demand.record("a", &cpus(1.0), &on("H100"), 1, t0);
        let found: Vec<(u32, String)> =
            demand.current(t0).iter().map(|d| (d.count, d.label_selector["accelerator"].clone())).collect();
        assert_eq!(found, vec![(2, "A100".to_string()), (1, "H100".to_string())]);
        demand.granted("a", &cpus(1.0));
        assert!(demand.current(t0).is_empty(), "a grant of the shape asks again, under whichever selector");
    }

    #[test]
    fn an_asker_is_a_process_of_a_machine() {
        let owner = v1::ProcessIdentity { boot_id: "b".into(), pid_namespace: "n".into(), pid: 7, start_ticks: 9 };
        assert_eq!(asker(Some(&owner), ""), "b/n/7/9");
        assert_eq!(asker(Some(&owner), "a1"), "b/n/7/9/a1", "each actor counts");
        assert_eq!(asker(None, ""), "");
    }
}
