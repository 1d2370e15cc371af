//! What every reconcile shares: the API client, event recorder, HTTP client for heads.

use std::time::Duration;

use kube::{Client, Resource};

use crate::events::Events;

pub struct Context {
    pub client: Client,
    pub events: Events,
    pub http: reqwest::Client,
    /// The cluster DNS domain in the names workers use to reach their head.
    pub cluster_domain: String,
}

impl Context {
    pub fn new(client: Client, cluster_domain: String) -> Context {
        let events = Events::new(client.clone(), crate::names::MANAGER, std::env::var("POD_NAME").ok());
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .connect_timeout(Duration::from_secs(3))
            .build()
            .expect("the HTTP client builds");
        Context { events, client, http, cluster_domain }
    }

    /// Records an event on the object; a failure to record is logged, never fatal.
    pub async fn event<K>(&self, object: &K, warning: bool, reason: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        if let Err(e) = self.events.publish(object.object_ref(&()), warning, reason, note).await {
            tracing::warn!(error = %e, reason, "could not record an event");
        }
    }
}
