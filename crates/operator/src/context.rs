//! What every reconcile shares: the API client, event recorder, HTTP client for heads.

use std::time::Duration;

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};

pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub http: reqwest::Client,
    /// The cluster DNS domain in the names workers use to reach their head.
    pub cluster_domain: String,
}

impl Context {
    pub fn new(client: Client, cluster_domain: String) -> Context {
        let reporter = Reporter { controller: crate::names::MANAGER.into(), instance: std::env::var("POD_NAME").ok() };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .connect_timeout(Duration::from_secs(3))
            .build()
            .expect("the HTTP client builds");
        Context { recorder: Recorder::new(client.clone(), reporter), client, http, cluster_domain }
    }

    /// Records an event on the object; a failure to record is logged, never fatal.
    pub async fn event<K>(&self, object: &K, warning: bool, reason: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        let event = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &object.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "could not record an event");
        }
    }
}
