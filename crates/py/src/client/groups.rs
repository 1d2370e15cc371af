//! Placement groups.

use super::*;

#[pymethods]
impl Client {
    /// Asks the head for a placement group; returns its id at once (it is placed later).
    #[allow(clippy::too_many_arguments)]
    fn create_placement_group(
        &self,
        py: Python<'_>,
        bundles: Vec<BTreeMap<String, f64>>,
        strategy: String,
        name: String,
        namespace: String,
        detached: bool,
        label_selectors: Vec<BTreeMap<String, String>>,
    ) -> PyResult<String> {
        let strategy = pg::parse_strategy(&strategy).map_err(PyValueError::new_err)?;
        let bundles = bundles
            .into_iter()
            .map(oxray_types::ResourceSet::try_from)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let owner = if detached { String::new() } else { self.owner_address(py)? };
        let request = pg::create_request(&bundles, &label_selectors, strategy, &name, &namespace, detached, &owner);
        let id = request.placement_group_id.clone();
        if name.is_empty() && !detached {
            // Nothing left for the head to refuse (the bundles were checked here), and the
            // group ends with this process anyway: the request goes on its own, later calls
            // about the group wait for it.
            self.cluster.groups().start(self.runtime.handle(), self.cluster.head(), request);
            return Ok(id);
        }
        py.detach(|| {
            self.cluster.write(|head| {
                let request = request.clone();
                async move { pg::create(&head, request).await }
            })
        })
        .map_err(|s| to_py(s.into()))?;
        Ok(id)
    }

    /// Removes a group; returns at once (as Ray's removal does): later calls about the
    /// group, and `shutdown`, wait for the removal to land.
    fn remove_placement_group(&self, id: String) {
        self.cluster.groups().remove(self.runtime.handle(), self.cluster.head(), id);
    }

    /// One group as JSON, by id or by name in a namespace.
    fn placement_group_json(&self, py: Python<'_>, id: String, name: String, namespace: String) -> PyResult<String> {
        let group = py
            .detach(|| {
                let (id, name, namespace) = (id.as_str(), name.as_str(), namespace.as_str());
                self.cluster.read_about_group(id, |head| async move { pg::get(&head, id, name, namespace).await })
            })
            .map_err(to_py)?;
        Ok(pg::to_json(&group).to_string())
    }

    /// Every group the head knows, as a JSON list.
    fn placement_groups_json(&self, py: Python<'_>) -> PyResult<String> {
        let creations = self.cluster.groups();
        let groups = py
            .detach(|| {
                let creations = &creations;
                self.cluster.read(|head| async move {
                    creations.all_settled().await;
                    pg::list(&head).await
                })
            })
            .map_err(to_py)?;
        Ok(serde_json::Value::Array(groups.iter().map(pg::to_json).collect()).to_string())
    }

    /// Whether the group is created, waiting up to `timeout` seconds (forever: None).
    #[pyo3(signature = (id, timeout=None))]
    fn wait_placement_group(&self, py: Python<'_>, id: String, timeout: Option<f64>) -> PyResult<bool> {
        let group = py
            .detach(|| {
                let (id, until) = (id.as_str(), deadline(timeout));
                self.cluster.read_about_group(id, |head| async move { pg::wait(&head, id, until).await })
            })
            .map_err(to_py)?;
        Ok(group.state == oxray_worker::PlacementGroupState::Created as i32)
    }

    /// An object that becomes `value` once the group is created (lost if it is removed
    /// first): what `PlacementGroup.ready()` returns.
    fn placement_group_ready(&self, id: String, value: Vec<u8>) -> String {
        let object = self.objects.pending();
        let (objects, head, target) = (self.objects.clone(), self.cluster.head(), object.clone());
        let groups = self.cluster.groups().clone();
        self.runtime.spawn(async move {
            let waited = match groups.settled(&id).await {
                Ok(()) => pg::wait(&head, &id, None).await,
                Err(refused) => Err(refused),
            };
            let (data, outcome) = match waited {
                Ok(g) if g.state == oxray_worker::PlacementGroupState::Created as i32 => (value, Outcome::Value),
                Ok(_) => (format!("placement group {id} was removed before it was ready").into_bytes(), Outcome::Lost),
                Err(s) => (format!("placement group {id}: {}", s.message()).into_bytes(), Outcome::Lost),
            };
            objects.fulfil(&target, data, outcome, Vec::new());
        });
        object
    }
}
