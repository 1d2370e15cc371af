//! Events on the operator's objects (`events.k8s.io/v1`). An event said again within a while
//! counts as a repeat of the first (its series), as `kubectl describe` shows "x3"; what makes
//! it the same includes its note, so "0 -> 2" and later "2 -> 0" stay two events. (kube's
//! Recorder leaves the note out of that, and would show the first note for both.)

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;

/// How long a said event stays the one its repeats count on.
const REPEATS_WITHIN: Duration = Duration::from_secs(360);

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    uid: Option<String>,
    warning: bool,
    reason: String,
    note: String,
}

struct Said {
    name: String,
    namespace: String,
    count: i32,
    last: Instant,
}

pub struct Events {
    client: Client,
    controller: String,
    instance: String,
    said: Mutex<HashMap<Key, Said>>,
}

impl Events {
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Events {
        let instance = instance.unwrap_or_else(|| controller.to_string());
        Events { client, controller: controller.into(), instance, said: Mutex::default() }
    }

    pub async fn publish(
        &self,
        regarding: ObjectReference,
        warning: bool,
        reason: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        let key = Key { uid: regarding.uid.clone(), warning, reason: reason.into(), note: note.clone() };
        let now = Timestamp::now();
        let repeat = {
            let mut said = self.said.lock().expect("events lock");
            said.retain(|_, s| s.last.elapsed() < REPEATS_WITHIN);
            said.get_mut(&key).map(|s| {
                s.count += 1;
                s.last = Instant::now();
                (s.name.clone(), s.namespace.clone(), s.count)
            })
        };
        if let Some((name, namespace, count)) = repeat {
            let series = EventSeries { count, last_observed_time: MicroTime(now) };
            let patch = serde_json::json!({ "series": series });
            let api = Api::<Event>::namespaced(self.client.clone(), &namespace);
            match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => return Ok(()),
                // Gone (expired, deleted): this one is a new event.
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    self.said.lock().expect("events lock").remove(&key);
                }
                Err(e) => return Err(e),
            }
        }
        let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".into());
        let name = format!("{}.{:x}", regarding.name.as_deref().unwrap_or(&self.controller), now.as_nanosecond());
        let event = Event {
            metadata: ObjectMeta { name: Some(name.clone()), namespace: Some(namespace.clone()), ..Default::default() },
            action: Some(reason.into()),
            reason: Some(reason.into()),
            note: Some(note),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            ..Default::default()
        };
        Api::<Event>::namespaced(self.client.clone(), &namespace).create(&PostParams::default(), &event).await?;
        self.said.lock().expect("events lock").insert(key, Said { name, namespace, count: 1, last: Instant::now() });
        Ok(())
    }
}
