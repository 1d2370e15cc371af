//! Resource and label flags shared by `start` and the agent role, named as Ray's.

use anyhow::{bail, Context, Result};
use clap::Args;
use oxray_types::{resource_names as names, ResourceSet};
use std::collections::BTreeMap;

#[derive(Args, Debug, Clone, Default)]
pub struct ResourceArgs {
    /// CPUs this node offers [default: detected, honouring cgroup and affinity limits]
    #[arg(long, allow_negative_numbers = true, value_parser = parse_count)]
    pub num_cpus: Option<u32>,
    /// GPUs this node offers [default: NVIDIA GPUs found by nvidia-smi, else 0]
    #[arg(long, allow_negative_numbers = true, value_parser = parse_count)]
    pub num_gpus: Option<u32>,
    /// Memory in bytes this node offers to work [default: 70% of available memory]
    #[arg(long, allow_negative_numbers = true, value_parser = parse_bytes)]
    pub memory: Option<u64>,
    /// Shared memory in bytes for the node's object store; larger objects spill to disk
    /// [default: 30% of available memory]
    #[arg(long, allow_negative_numbers = true, value_parser = parse_bytes)]
    pub object_store_memory: Option<u64>,
    /// Custom resources as a JSON object, e.g. '{"accelerator": 4}'
    #[arg(long, value_name = "JSON")]
    pub resources: Option<String>,
    /// Node labels, e.g. zone=a,disk=ssd
    #[arg(long, value_name = "K=V,...")]
    pub labels: Option<String>,
    /// The address other machines reach this node at [default: detected]
    #[arg(long)]
    pub node_ip_address: Option<String>,
}

fn parse_count(text: &str) -> Result<u32, String> {
    text.parse::<u32>().map_err(|_| format!("expected a non-negative integer, got {text:?}"))
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    text.parse::<u64>().map_err(|_| format!("expected a non-negative number of bytes, got {text:?}"))
}

/// Names the user may not set through `--resources`: each has its own flag.
const RESERVED: [(&str, &str); 4] = [
    (names::CPU, "--num-cpus"),
    (names::GPU, "--num-gpus"),
    (names::MEMORY, "--memory"),
    (names::OBJECT_STORE_MEMORY, "--object-store-memory"),
];

impl ResourceArgs {
    /// Checks the flags without detecting anything, so a launcher can refuse bad input
    /// before it starts a process.
    pub fn validate(&self) -> Result<()> {
        self.custom()?;
        self.labels()?;
        if let Some(ip) = &self.node_ip_address {
            ip.parse::<std::net::IpAddr>()
                .with_context(|| format!("invalid --node-ip-address {ip:?}: expected an IP address"))?;
        }
        Ok(())
    }

    pub fn custom(&self) -> Result<ResourceSet> {
        let Some(json) = &self.resources else {
            return Ok(ResourceSet::new());
        };
        let value: serde_json::Value =
            serde_json::from_str(json).with_context(|| format!("invalid --resources {json:?}: not JSON"))?;
        let Some(object) = value.as_object() else {
            bail!("invalid --resources {json:?}: expected a JSON object such as '{{\"accelerator\": 4}}'");
        };
        let mut set = ResourceSet::new();
        for (name, amount) in object {
            if let Some((_, flag)) = RESERVED.iter().find(|(n, _)| n == name) {
                bail!("invalid --resources: set {name} with {flag}, not in --resources");
            }
            let Some(amount) = amount.as_f64() else {
                bail!("invalid --resources: {name:?} must be a number, got {amount}");
            };
            set.set(name.clone(), amount).context("invalid --resources")?;
        }
        Ok(set)
    }

    pub fn labels(&self) -> Result<BTreeMap<String, String>> {
        let mut labels = BTreeMap::new();
        let Some(text) = &self.labels else {
            return Ok(labels);
        };
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => {
                    labels.insert(k.trim().to_string(), v.trim().to_string());
                }
                _ => bail!("invalid --labels entry {pair:?}: expected key=value"),
            }
        }
        Ok(labels)
    }

    /// The node's complete resources: flags first, detection for the rest.
    pub fn resolve(&self, node_ip: &str, is_head: bool) -> Result<ResourceSet> {
        let mut set = self.custom()?;
        let cpus = self.num_cpus.unwrap_or_else(oxray_agent::detect::cpus);
        let gpus = self.num_gpus.unwrap_or_else(oxray_agent::detect::gpus);
        let free = oxray_agent::detect::available_memory() as f64;
        // As Ray: about 30% of free memory backs the object store, the rest is for work.
        let object_store = self.object_store_memory.map(|m| m as f64).unwrap_or((free * 0.3).floor());
        let memory = self.memory.map(|m| m as f64).unwrap_or((free * 0.7).floor());
        set.set(names::CPU, cpus as f64)?;
        set.set(names::GPU, gpus as f64)?;
        set.set(names::MEMORY, memory)?;
        set.set(names::OBJECT_STORE_MEMORY, object_store)?;
        set.set(names::node_ip_marker(node_ip), 1.0)?;
        if is_head {
            set.set(names::HEAD_MARKER, 1.0)?;
        }
        Ok(set)
    }

    /// The flags as given, to hand to the agent process.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        let mut push = |flag: &str, value: Option<String>| {
            if let Some(v) = value {
                args.push(flag.to_string());
                args.push(v);
            }
        };
        push("--num-cpus", self.num_cpus.map(|v| v.to_string()));
        push("--num-gpus", self.num_gpus.map(|v| v.to_string()));
        push("--memory", self.memory.map(|v| v.to_string()));
        push("--object-store-memory", self.object_store_memory.map(|v| v.to_string()));
        push("--resources", self.resources.clone());
        push("--labels", self.labels.clone());
        push("--node-ip-address", self.node_ip_address.clone());
        args
    }
}

/// The first non-loopback IPv4 address of this machine, else loopback.
pub fn detect_node_ip() -> String {
    let found = nix::ifaddrs::getifaddrs().ok().and_then(|addrs| {
        addrs
            .filter_map(|a| a.address?.as_sockaddr_in().map(|s| s.ip()))
            .find(|ip| !ip.is_loopback() && !ip.is_unspecified())
    });
    found.map(|ip| ip.to_string()).unwrap_or_else(|| "127.0.0.1".to_string())
}

/// The local address this machine uses to reach `head` (HOST:PORT), else the first
/// non-loopback address.
pub fn node_ip_towards(head: &str) -> String {
    use std::net::{TcpStream, ToSocketAddrs};
    let local =
        head.to_socket_addrs().ok().and_then(|mut addrs| addrs.next()).and_then(|addr| {
            TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)).ok()?.local_addr().ok()
        });
    local.map(|a| a.ip().to_string()).unwrap_or_else(detect_node_ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(resources: Option<&str>, labels: Option<&str>) -> ResourceArgs {
        ResourceArgs { resources: resources.map(Into::into), labels: labels.map(Into::into), ..Default::default() }
    }

    #[test]
    fn parses_custom_resources() {
        let set = args(Some(r#"{"accelerator": 4, "ssd": 0.5}"#), None).custom().unwrap();
        assert_eq!(set.get("accelerator"), 4.0);
        assert_eq!(set.get("ssd"), 0.5);
    }

    #[test]
    fn refuses_malformed_or_negative_resources() {
        for bad in ["{", "[1]", r#"{"a": -1}"#, r#"{"a": "x"}"#, r#"{"CPU": 2}"#, r#"{"": 1}"#] {
            assert!(args(Some(bad), None).validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_labels() {
        let labels = args(None, Some("zone=a, disk=ssd")).labels().unwrap();
        assert_eq!(labels["zone"], "a");
        assert_eq!(labels["disk"], "ssd");
        assert!(args(None, Some("zone")).validate().is_err());
        assert!(args(None, Some("=a")).validate().is_err());
    }

    #[test]
    fn explicit_amounts_win_over_detection() {
        let a = ResourceArgs { num_cpus: Some(3), num_gpus: Some(1), memory: Some(1000), ..Default::default() };
        let set = a.resolve("10.0.0.1", true).unwrap();
        assert_eq!((set.get("CPU"), set.get("GPU"), set.get("memory")), (3.0, 1.0, 1000.0));
        assert_eq!(set.get("node:10.0.0.1"), 1.0);
        assert_eq!(set.get("node:__internal_head__"), 1.0);
    }

    #[test]
    fn round_trips_through_args() {
        let a = ResourceArgs { num_cpus: Some(2), labels: Some("a=b".into()), ..Default::default() };
        assert_eq!(a.to_args(), ["--num-cpus", "2", "--labels", "a=b"]);
    }
}
