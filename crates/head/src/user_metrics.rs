//! Application metrics (`oxray.util.metrics`, as Ray's `ray.util.metrics`) of every process
//! in the cluster, as each last reported them, exported on `/metrics` with Ray's `ray_`
//! prefix and the reporting node and process as labels.

use oxray_proto::v1::MetricSample;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Series kept at most; new ones beyond are not kept.
pub const MAX_SERIES: usize = 10_000;
/// A process silent this long (it ended) has its series dropped.
pub const FORGET_AFTER: Duration = Duration::from_secs(600);

/// `(name, reporter, tags)`: one series.
type Key = (String, String, Vec<(String, String)>);

struct Series {
    sample: MetricSample,
    seen: Instant,
}

#[derive(Default)]
pub struct UserMetrics {
    series: Mutex<BTreeMap<Key, Series>>,
}

impl UserMetrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Series>> {
        self.series.lock().expect("user metrics lock")
    }

    pub fn record(&self, reporter: &str, samples: Vec<MetricSample>, now: Instant) {
        let mut series = self.lock();
        series.retain(|_, s| now.duration_since(s.seen) < FORGET_AFTER);
        for sample in samples {
            let mut tags: Vec<(String, String)> = sample.tags.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            tags.sort();
            let key = (sample.name.clone(), reporter.to_string(), tags);
            if series.len() >= MAX_SERIES && !series.contains_key(&key) {
                continue;
            }
            series.insert(key, Series { sample, seen: now });
        }
    }

    /// The series in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let series = self.lock();
        render(series.iter().map(|((_, reporter, tags), s)| (reporter.as_str(), tags.as_slice(), &s.sample)))
    }
}

/// A name Prometheus takes: letters, digits, `_` and `:`, not starting with a digit.
fn metric_name(name: &str) -> String {
    let clean: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == ':' { c } else { '_' }).collect();
    format!("ray_{clean}")
}

fn label_value(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn labels(reporter: &str, tags: &[(String, String)], extra: Option<(&str, String)>) -> String {
    let (node, pid) = reporter.rsplit_once(':').unwrap_or((reporter, ""));
    let mut parts: Vec<String> = tags
        .iter()
        .map(|(k, v)| (metric_name(k)[4..].to_string(), v))
        .map(|(k, v)| format!("{k}=\"{}\"", label_value(v)))
        .collect();
    parts.push(format!("node_id=\"{}\"", label_value(node)));
    parts.push(format!("pid=\"{}\"", label_value(pid)));
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{v}\""));
    }
    format!("{{{}}}", parts.join(","))
}

fn number(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        format!("{v}")
    }
}

/// Families in order of name (the series come sorted by name): each family's kind is the
/// first series' kind; series of another kind under the same name are left out.
fn render<'a>(series: impl Iterator<Item = (&'a str, &'a [(String, String)], &'a MetricSample)>) -> String {
    let mut out = String::new();
    let mut family: Option<(String, String)> = None;
    for (reporter, tags, s) in series {
        let name = metric_name(&s.name);
        if family.as_ref().is_none_or(|(n, _)| *n != name) {
            let kind = match s.kind.as_str() {
                "counter" | "gauge" | "histogram" => s.kind.clone(),
                _ => continue,
            };
            let _ = writeln!(out, "# TYPE {name} {kind}");
            if !s.description.is_empty() {
                let _ = writeln!(out, "# HELP {name} {}", s.description.replace('\n', " "));
            }
            family = Some((name.clone(), kind));
        }
        let Some((_, kind)) = &family else { continue };
        if *kind != s.kind {
            continue;
        }
        match kind.as_str() {
            "counter" => {
                let _ = writeln!(out, "{name}_total{} {}", labels(reporter, tags, None), number(s.value));
            }
            "gauge" => {
                let _ = writeln!(out, "{name}{} {}", labels(reporter, tags, None), number(s.value));
            }
            _ => {
                let mut cumulative = 0u64;
                let bounds = s.boundaries.iter().copied().chain(std::iter::once(f64::INFINITY));
                for (bound, count) in bounds.zip(s.bucket_counts.iter().copied().chain(std::iter::repeat(0))) {
                    cumulative += count;
                    let le = Some(("le", number(bound)));
                    let _ = writeln!(out, "{name}_bucket{} {cumulative}", labels(reporter, tags, le));
                }
                let _ = writeln!(out, "{name}_sum{} {}", labels(reporter, tags, None), number(s.sum));
                let _ = writeln!(out, "{name}_count{} {}", labels(reporter, tags, None), s.count);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(name: &str, kind: &str, value: f64, tags: &[(&str, &str)]) -> MetricSample {
        MetricSample {
            name: name.into(),
            kind: kind.into(),
            value,
            tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn series_are_per_process_and_tags_and_render_as_openmetrics() {
        let metrics = UserMetrics::default();
        let now = Instant::now();
        let mut requests = sample("requests", "counter", 3.0, &[("route", "/a")]);
        requests.description = "Requests served".into();
        metrics.record("n1:10", vec![requests, sample("queue-depth", "gauge", 2.5, &[])], now);
        metrics.record("n2:20", vec![sample("requests", "counter", 4.0, &[("route", "/a\"b")])], now);
        let latency = MetricSample {
            boundaries: vec![0.1, 1.0],
            bucket_counts: vec![1, 2, 3],
            sum: 9.5,
            count: 6,
            ..sample("latency", "histogram", 0.0, &[])
        };
        metrics.record("n1:10", vec![latency, sample("requests", "gauge", 1.0, &[("x", "y")])], now);
        let text = metrics.render();
        let expected = [
            "# TYPE ray_latency histogram",
            "ray_latency_bucket{node_id=\"n1\",pid=\"10\",le=\"0.1\"} 1",
            "ray_latency_bucket{node_id=\"n1\",pid=\"10\",le=\"1\"} 3",
            "ray_latency_bucket{node_id=\"n1\",pid=\"10\",le=\"+Inf\"} 6",
            "ray_latency_sum{node_id=\"n1\",pid=\"10\"} 9.5",
            "ray_latency_count{node_id=\"n1\",pid=\"10\"} 6",
            "# TYPE ray_queue_depth gauge",
            "ray_queue_depth{node_id=\"n1\",pid=\"10\"} 2.5",
            "# TYPE ray_requests counter",
            "# HELP ray_requests Requests served",
            "ray_requests_total{route=\"/a\",node_id=\"n1\",pid=\"10\"} 3",
            "ray_requests_total{route=\"/a\\\"b\",node_id=\"n2\",pid=\"20\"} 4",
        ];
        assert_eq!(text.lines().collect::<Vec<_>>(), expected, "{text}");
    }

    #[test]
    fn silent_processes_are_forgotten_and_series_are_bounded() {
        let metrics = UserMetrics::default();
        let start = Instant::now();
        metrics.record("gone:1", vec![sample("a", "gauge", 1.0, &[])], start);
        metrics.record("here:2", vec![sample("b", "gauge", 1.0, &[])], start + FORGET_AFTER);
        assert!(!metrics.render().contains("ray_a"));
        let many: Vec<MetricSample> =
            (0..MAX_SERIES + 5).map(|i| sample("c", "gauge", 1.0, &[("i", &i.to_string())])).collect();
        metrics.record("here:2", many, start + FORGET_AFTER);
        assert_eq!(metrics.lock().len(), MAX_SERIES);
    }
}
