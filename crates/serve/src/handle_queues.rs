//! Requests that handles in other processes hold for a deployment with no room (none of its
//! replicas free, or no replica at all): each process reports its counts as it refreshes
//! its view of the replicas, and the autoscaler counts them as load, as it counts the
//! proxy's, so a deployment at zero replicas reached only through handles scales up.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A report older than this no longer counts (its process stopped reporting: gone, or its
/// requests were sent).
pub const FRESH_FOR: Duration = Duration::from_secs(5);

#[derive(Default)]
pub struct HandleQueues {
    by_deployment: HashMap<(String, String), HashMap<String, (i64, Instant)>>,
}

impl HandleQueues {
    /// A process's counts by (application, deployment), which replace what it said before.
    pub fn report(&mut self, process: &str, counts: &[(String, String, i64)], now: Instant) {
        for per in self.by_deployment.values_mut() {
            per.remove(process);
        }
        for (app, deployment, n) in counts.iter().filter(|c| c.2 > 0) {
            self.by_deployment
                .entry((app.clone(), deployment.clone()))
                .or_default()
                .insert(process.to_string(), (*n, now));
        }
        self.by_deployment.retain(|_, per| !per.is_empty());
    }

    /// The requests waiting for the deployment in every process whose report is fresh.
    pub fn total(&mut self, app: &str, deployment: &str, now: Instant) -> i64 {
        let Some(per) = self.by_deployment.get_mut(&(app.to_string(), deployment.to_string())) else { return 0 };
        per.retain(|_, (_, at)| now.duration_since(*at) <= FRESH_FOR);
        per.values().map(|(n, _)| n).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(n: i64) -> Vec<(String, String, i64)> {
        vec![("app".into(), "D".into(), n)]
    }

    #[test]
    fn fresh_reports_add_up_and_a_new_report_replaces_the_old() {
        let now = Instant::now();
        let mut queues = HandleQueues::default();
        queues.report("p1", &counts(3), now);
        queues.report("p2", &counts(2), now);
        assert_eq!(queues.total("app", "D", now), 5);
        queues.report("p1", &[], now);
        assert_eq!(queues.total("app", "D", now), 2, "p1 sent its requests");
        assert_eq!(queues.total("app", "other", now), 0);
        assert_eq!(queues.total("app", "D", now + FRESH_FOR + Duration::from_millis(1)), 0, "p2 went silent");
        assert!(queues.by_deployment.values().all(|per| per.is_empty()));
    }
}
