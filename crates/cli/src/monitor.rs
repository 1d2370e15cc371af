//! The memory monitor's flags, shared by `start` and the agent role, named as Ray's settings.

use clap::Args;
use oxray_agent::memory::{MonitorConfig, DEFAULT_REFRESH, DEFAULT_THRESHOLD};
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct MemoryMonitorArgs {
    /// The fraction of the node's memory (or of its container's limit) past which the agent
    /// ends the worker of the newest task, which fails with OutOfMemoryError or runs again
    #[arg(long, env = "OXRAY_MEMORY_USAGE_THRESHOLD", default_value_t = DEFAULT_THRESHOLD, value_parser = parse_fraction)]
    pub memory_usage_threshold: f64,
    /// How often the memory monitor looks, in milliseconds (0: it is off)
    #[arg(long, env = "OXRAY_MEMORY_MONITOR_REFRESH_MS", default_value_t = DEFAULT_REFRESH.as_millis() as u64)]
    pub memory_monitor_refresh_ms: u64,
}

fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!("expected a fraction above 0 and at most 1, got {text:?}")),
    }
}

impl MemoryMonitorArgs {
    pub fn config(&self) -> MonitorConfig {
        let refresh =
            (self.memory_monitor_refresh_ms > 0).then(|| Duration::from_millis(self.memory_monitor_refresh_ms));
        MonitorConfig { threshold: self.memory_usage_threshold, refresh }
    }

    /// The flags, to hand to the agent process.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "--memory-usage-threshold".into(),
            self.memory_usage_threshold.to_string(),
            "--memory-monitor-refresh-ms".into(),
            self.memory_monitor_refresh_ms.to_string(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_outside_zero_to_one_are_refused() {
        assert_eq!(parse_fraction("0.95"), Ok(0.95));
        assert!(parse_fraction("0").is_err() && parse_fraction("1.5").is_err() && parse_fraction("x").is_err());
        let args = MemoryMonitorArgs { memory_usage_threshold: 0.5, memory_monitor_refresh_ms: 0 };
        assert!(args.config().refresh.is_none(), "0 turns the monitor off");
    }
}
