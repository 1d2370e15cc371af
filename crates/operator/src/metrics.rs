//! Reconcile counts for Prometheus.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    kind: String,
    result: String,
}

pub struct Metrics {
    reconciles: Family<Labels, Counter>,
    registry: Mutex<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        let reconciles = Family::<Labels, Counter>::default();
        let mut registry = Registry::default();
        registry.register("oxray_operator_reconciles", "Reconciles by kind and result", reconciles.clone());
        Metrics { reconciles, registry: Mutex::new(registry) }
    }
}

impl Metrics {
    pub fn record(&self, kind: &str, error: Option<String>) {
        let result = if error.is_some() { "error" } else { "ok" };
        self.reconciles.get_or_create(&Labels { kind: kind.into(), result: result.into() }).inc();
    }

    pub fn render(&self) -> String {
        let mut text = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("text encoding never fails");
        text
    }
}
