//! Serve's autoscaling decisions (Ray's default policy), as pure functions: from the
//! requests in flight at a deployment's replicas over the look-back window to the number
//! of replicas it should have, after the up/downscale delays.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// `autoscaling_config`, with Ray's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    #[serde(default = "one")]
    pub min_replicas: u32,
    #[serde(default = "one")]
    pub max_replicas: u32,
    #[serde(default = "two")]
    pub target_ongoing_requests: f64,
    #[serde(default = "thirty")]
    pub look_back_period_s: f64,
    #[serde(default = "thirty")]
    pub upscale_delay_s: f64,
    #[serde(default = "six_hundred")]
    pub downscale_delay_s: f64,
    #[serde(default)]
    pub downscale_to_zero_delay_s: Option<f64>,
    #[serde(default)]
    pub upscaling_factor: Option<f64>,
    #[serde(default)]
    pub downscaling_factor: Option<f64>,
    /// How often the replicas are asked for their load (Ray's replicas push it this often).
    #[serde(default = "ten")]
    pub metrics_interval_s: f64,
}

fn one() -> u32 {
    1
}
fn six_hundred() -> f64 {
    600.0
}

impl Policy {
    /// How often to measure: as configured, but often enough to fill the look-back window
    /// with a few samples.
    pub fn measure_every_s(&self) -> f64 {
        self.metrics_interval_s.min(self.look_back_period_s / 3.0).max(0.1)
    }
}

/// Decisions kept for `autoscaling_detail`, newest last.
const DECISIONS_KEPT: usize = 20;

/// The load seen over time, the wish to scale that has held since when, and the decisions
/// made.
#[derive(Debug, Clone, Default)]
pub struct Load {
    samples: VecDeque<(f64, f64)>,
    wish: Option<(u32, f64)>,
    /// When the replicas were last asked (measurements are paced by it).
    pub last_asked: Option<f64>,
    /// When a measurement last came back: `metrics_health` says how fresh it is.
    pub last_measured: Option<f64>,
    decisions: VecDeque<serde_json::Value>,
}

impl Load {
    /// Records `ongoing` requests at time `now` (seconds), forgetting what left the window;
    /// `fresh` when the replicas answered for their part.
    pub fn record(&mut self, now: f64, ongoing: f64, policy: &Policy, fresh: bool) {
        self.samples.push_back((now, ongoing));
        while self.samples.front().is_some_and(|(t, _)| now - t > policy.look_back_period_s) {
            self.samples.pop_front();
        }
        if fresh {
            self.last_measured = Some(now);
        }
    }

    /// The mean of the window.
    pub fn average(&self) -> f64 {
        if self.samples.is_empty() {
            return 0.0;
        }
        self.samples.iter().map(|(_, v)| v).sum::<f64>() / self.samples.len() as f64
    }

    /// The replica count to have now, given the current one: what the load asks for, once
    /// that wish has held its delay.
    pub fn decide(&mut self, policy: &Policy, current: u32, now: f64) -> u32 {
        let wanted = desired(policy, self.average(), current);
        if wanted == current {
            self.wish = None;
            return current;
        }
        let since = match self.wish {
            Some((w, since)) if (w > current) == (wanted > current) => since,
            _ => now,
        };
        self.wish = Some((wanted, since));
        let delay = if wanted > current {
            // From zero, any request is worth a replica at once.
            if current == 0 {
                0.0
            } else {
                policy.upscale_delay_s
            }
        } else if wanted == 0 {
            policy.downscale_to_zero_delay_s.unwrap_or(policy.downscale_delay_s)
        } else {
            policy.downscale_delay_s
        };
        if now - since >= delay {
            self.wish = None;
            let reason = format!(
                "{:.1} ongoing requests on average over the last {:.0} s, for a target of {} per replica",
                self.average(),
                policy.look_back_period_s,
                policy.target_ongoing_requests
            );
            if self.decisions.len() == DECISIONS_KEPT {
                self.decisions.pop_front();
            }
            self.decisions.push_back(serde_json::json!({
                "timestamp_s": now, "reason": reason, "prev_num_replicas": current,
                "curr_num_replicas": wanted, "policy": "default",
            }));
            wanted
        } else {
            current
        }
    }

    /// Ray's `DeploymentAutoscalingDetail`: which way the autoscaler leans, its recent
    /// decisions, the load it sees, and whether that load is fresh (measured within two
    /// intervals: healthy; ten: delayed; else unavailable).
    pub fn detail(&self, policy: &Policy, current: u32, now: f64) -> serde_json::Value {
        let status = match self.wish {
            Some((wanted, _)) if wanted > current => "UPSCALING",
            Some(_) => "DOWNSCALING",
            None => "STABLE",
        };
        let every = policy.measure_every_s();
        let health = match self.last_measured.map(|t| now - t) {
            Some(age) if age <= 2.0 * every => "healthy",
            Some(age) if age <= 10.0 * every => "delayed",
            _ => "unavailable",
        };
        serde_json::json!({
            "scaling_status": status,
            "decisions": self.decisions,
            "metrics": {
                "total_ongoing_requests": self.average(),
                "target_ongoing_requests": policy.target_ongoing_requests,
                "look_back_period_s": policy.look_back_period_s,
            },
            "metrics_health": health,
            "errors": [],
        })
    }
}

/// Ray's default policy: `total / target` replicas, moved toward by the up/downscaling
/// factor, clamped to [min, max]; from zero replicas any load asks for at least one, and a
/// downscale goes to zero only from one replica with no load.
pub fn desired(policy: &Policy, total: f64, current: u32) -> u32 {
    let (min, max) = (policy.min_replicas, policy.max_replicas.max(policy.min_replicas));
    if current == 0 {
        return if total > 0.0 { policy.upscaling_factor.unwrap_or(1.0).ceil().max(1.0) as u32 } else { 0 }
            .clamp(min, max);
    }
    let ideal = total / policy.target_ongoing_requests.max(1e-9);
    let cur = current as f64;
    let factor = if ideal > cur { policy.upscaling_factor } else { policy.downscaling_factor }.unwrap_or(1.0);
    let mut wanted = (cur + factor * (ideal - cur)).ceil();
    if ideal < cur && wanted >= cur {
        // A small factor must not stall a downscale the load asks for.
        wanted = cur - 1.0;
    }
    let wanted = wanted.max(0.0) as u32;
    // Never below one replica while there is load, nor to zero but from one.
    let floor = if total > 0.0 || current > 1 { 1 } else { 0 };
    wanted.max(floor).clamp(min, max)
}

/// Serde defaults shared with the deployment spec.
pub(crate) fn ten() -> f64 {
    10.0
}
pub(crate) fn thirty() -> f64 {
    30.0
}
pub(crate) fn two() -> f64 {
    2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        serde_json::from_value(serde_json::json!({
            "min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 2,
            "upscale_delay_s": 3, "downscale_delay_s": 10, "look_back_period_s": 5
        }))
        .unwrap()
    }

    #[test]
    fn the_detail_shows_the_lean_the_decisions_and_how_fresh_the_load_is() {
        let p = policy();
        let mut load = Load::default();
        assert_eq!(load.detail(&p, 1, 0.0)["metrics_health"], "unavailable");
        load.record(0.0, 6.0, &p, true);
        assert_eq!(load.decide(&p, 1, 0.0), 1, "the upscale delay has not passed");
        let detail = load.detail(&p, 1, 0.5);
        assert_eq!(
            (detail["scaling_status"].as_str(), detail["metrics_health"].as_str()),
            (Some("UPSCALING"), Some("healthy"))
        );
        assert_eq!(detail["metrics"]["total_ongoing_requests"], 6.0);
        assert_eq!(load.decide(&p, 1, 3.0), 3);
        let detail = load.detail(&p, 3, 3.0);
        assert_eq!(detail["scaling_status"], "STABLE");
        let decision = &detail["decisions"][0];
        assert_eq!(
            (decision["prev_num_replicas"].as_u64(), decision["curr_num_replicas"].as_u64()),
            (Some(1), Some(3))
        );
        assert!(decision["reason"].as_str().unwrap().starts_with("6.0 ongoing requests"));
        assert_eq!(load.detail(&p, 3, 3.0 + 20.0 * p.measure_every_s())["metrics_health"], "unavailable");
        // A round no replica answered still counts what waits, but is not a fresh measure.
        let late = 3.0 * p.measure_every_s();
        load.record(late, 9.0, &p, false);
        assert_eq!(load.detail(&p, 3, late)["metrics_health"], "delayed");
        // Without delays every swing of the load is a decision; only the newest are kept.
        let swift = Policy { upscale_delay_s: 0.0, downscale_delay_s: 0.0, look_back_period_s: 0.5, ..p.clone() };
        let mut current = 3;
        for t in 0..30 {
            let at = 10.0 + t as f64;
            load.record(at, if t % 2 == 0 { 0.0 } else { 8.0 }, &swift, true);
            current = load.decide(&swift, current, at);
        }
        let decisions = load.detail(&swift, current, 40.0)["decisions"].as_array().unwrap().clone();
        assert_eq!(decisions.len(), DECISIONS_KEPT);
        assert_eq!(decisions.last().unwrap()["timestamp_s"], 39.0, "the newest kept");
    }

    #[test]
    fn ray_s_defaults() {
        let p: Policy = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!((p.min_replicas, p.max_replicas, p.target_ongoing_requests), (1, 1, 2.0));
        assert_eq!((p.upscale_delay_s, p.downscale_delay_s, p.look_back_period_s), (30.0, 600.0, 30.0));
    }

    #[test]
    fn the_load_over_the_target_sets_the_count_within_bounds() {
        let p = policy();
        assert_eq!(desired(&p, 6.0, 1), 3);
        assert_eq!(desired(&p, 100.0, 1), 4);
        assert_eq!(desired(&p, 0.0, 3), 1);
        assert_eq!(desired(&p, 3.0, 3), 2);
    }

    #[test]
    fn factors_move_part_way_but_a_downscale_never_stalls() {
        let mut p = policy();
        p.upscaling_factor = Some(0.5);
        p.downscaling_factor = Some(0.01);
        assert_eq!(desired(&p, 8.0, 1), 3); // 1 + 0.5 * (4 - 1) = 2.5 -> 3
        assert_eq!(desired(&p, 2.0, 3), 2);
    }

    #[test]
    fn from_zero_any_load_asks_for_a_replica_and_to_zero_only_from_one() {
        let mut p = policy();
        p.min_replicas = 0;
        assert_eq!(desired(&p, 0.5, 0), 1);
        assert_eq!(desired(&p, 0.0, 0), 0);
        assert_eq!(desired(&p, 0.0, 3), 1);
        assert_eq!(desired(&p, 0.0, 1), 0);
    }

    #[test]
    fn a_wish_waits_its_delay() {
        let p = policy();
        let mut load = Load::default();
        load.record(0.0, 6.0, &p, true);
        assert_eq!(load.decide(&p, 1, 0.0), 1);
        assert_eq!(load.decide(&p, 1, 2.9), 1);
        assert_eq!(load.decide(&p, 1, 3.0), 3);
        // The load goes: the window forgets it, and the downscale waits 10 s.
        load.record(6.0, 0.0, &p, true);
        assert_eq!(load.average(), 0.0);
        assert_eq!(load.decide(&p, 3, 6.0), 3);
        assert_eq!(load.decide(&p, 3, 15.9), 3);
        assert_eq!(load.decide(&p, 3, 16.0), 1);
    }

    #[test]
    fn a_change_of_mind_restarts_the_clock() {
        let p = policy();
        let mut load = Load::default();
        load.record(0.0, 6.0, &p, true);
        assert_eq!(load.decide(&p, 1, 0.0), 1);
        load.record(5.5, 0.0, &p, true);
        assert_eq!(load.decide(&p, 1, 5.5), 1, "the load went: the wish with it");
        load.record(11.0, 6.0, &p, true);
        assert_eq!(load.decide(&p, 1, 11.0), 1);
        assert_eq!(load.decide(&p, 1, 13.9), 1);
        assert_eq!(load.decide(&p, 1, 14.0), 3);
    }

    #[test]
    fn measuring_fills_the_window() {
        let p = policy();
        assert!((p.measure_every_s() - 5.0 / 3.0).abs() < 1e-9);
    }
}
