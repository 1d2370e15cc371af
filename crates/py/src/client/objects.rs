//! Objects: puts, the node store, borrowing, `get` and `wait`, reference counts.

use super::*;

#[pymethods]
impl Client {
    /// Borrows the bytes from Python and copies them once; `contained` are the ObjectRefs
    /// inside the value.
    #[pyo3(signature = (data, contained=Vec::new()))]
    fn put(&self, data: &[u8], contained: Vec<String>) -> String {
        self.objects.put(data.to_vec(), &contained)
    }

    /// Where other processes fetch the objects this one owns (its object server, started
    /// on first use).
    pub(crate) fn owner_address(&self, py: Python<'_>) -> PyResult<String> {
        if let Some(address) = self.object_address.get() {
            return Ok(address.clone());
        }
        // Started without the GIL: its lock's holder must never wait for the GIL.
        py.detach(|| self.start_object_server())
    }

    /// A new file in the node's object store for a value of `size` bytes (on disk with
    /// `spill`): `(object_id, path)`, or None when this process has no store (then the value
    /// stays in its memory).
    #[pyo3(signature = (size, spill=false))]
    fn store_create(&self, py: Python<'_>, size: u64, spill: bool) -> PyResult<Option<(String, String)>> {
        let Some(store) = py.detach(|| self.node_store()) else { return Ok(None) };
        let id = oxray_worker::new_id();
        let file = store.create(&id, size, spill).map_err(|e| PyRuntimeError::new_err(format!("object store: {e}")))?;
        self.creating.lock().expect("creating lock").insert(id.clone(), file.clone());
        Ok(Some((id, file.path.display().to_string())))
    }

    /// The node store's shared-memory directory, which names it; None without a store.
    fn store_dir(&self, py: Python<'_>) -> Option<String> {
        py.detach(|| self.node_store()).map(|s| s.dir().display().to_string())
    }

    /// Gives up a file from `store_create`, now written, to the caller of the task whose
    /// result it holds: that process owns and removes it.
    fn store_give(&self, id: &str) {
        self.creating.lock().expect("creating lock").remove(id);
    }

    /// The value of a file from `store_create`, now written: readers get `data` (where it
    /// is); the file goes with the object. With `data` None the file is discarded.
    #[pyo3(signature = (id, data, contained=Vec::new()))]
    fn store_seal(&self, id: String, data: Option<Vec<u8>>, contained: Vec<String>) -> PyResult<Option<String>> {
        let file = self.creating.lock().expect("creating lock").remove(&id);
        let file = file.ok_or_else(|| PyValueError::new_err(format!("no object {id} is being written")))?;
        match data {
            Some(data) => Ok(Some(self.objects.put_stored(id, data, file, &contained))),
            None => {
                if let Some(store) = self.objects.store() {
                    store.delete(&file);
                }
                Ok(None)
            }
        }
    }

    /// The content of an object its owner keeps in its node's store (for a reader on
    /// another machine).
    fn fetch_stored<'py>(&self, py: Python<'py>, owner: String, id: String) -> PyResult<Bound<'py, PyBytes>> {
        let data = py
            .detach(|| self.runtime.block_on(self.links.fetch_content(&id, &owner)))
            .map_err(pyo3::exceptions::PyKeyError::new_err)?;
        Ok(PyBytes::new(py, &data))
    }

    /// Bytes of the node's shared memory that objects use now (0 without a store).
    fn object_store_used(&self, py: Python<'_>) -> u64 {
        py.detach(|| self.node_store()).map_or(0, |s| s.used())
    }

    /// Whether `owner` is this process's object server.
    fn is_owner(&self, owner: &str) -> bool {
        self.object_address.get().map(String::as_str) == Some(owner)
    }

    /// Takes a reference to an object read from bytes: 0 when this process owns it, 1 when
    /// it is borrowed, 2 when borrowed for the first time here (its owner must be told).
    fn hold(&self, id: &str, owner: &str) -> u8 {
        if self.is_owner(owner) {
            self.objects.add_ref(id);
            0
        } else if self.objects.borrow(id, owner) {
            2
        } else {
            1
        }
    }

    /// `hold` for every ref a value held, in one call (a value may hold thousands); true
    /// when one of them is borrowed here for the first time.
    fn hold_many(&self, py: Python<'_>, ids: Vec<String>, owners: Vec<String>) -> bool {
        let mine = self.object_address.get();
        py.detach(|| {
            let mut new = false;
            for (id, owner) in ids.iter().zip(&owners) {
                if mine.map(String::as_str) == Some(owner.as_str()) {
                    self.objects.add_ref(id);
                } else if self.objects.borrow(id, owner) {
                    new = true;
                }
            }
            new
        })
    }

    /// Tells owners of the objects newly borrowed here, and waits until they know. A process
    /// that borrows before it owns anything starts its object server now, so the state API
    /// lists what it holds.
    fn announce_borrows(&self, py: Python<'_>) {
        if self.object_address.get().is_none() {
            if let Err(e) = self.owner_address(py) {
                tracing::debug!("this process's references will not be listed: {e}");
            }
        }
        py.detach(|| self.runtime.block_on(self.objects.announce()));
    }

    /// Takes a reference to each object on behalf of a task's caller, which receives them
    /// inside the task's result; returns each object's owner.
    fn hold_for_caller(&self, py: Python<'_>, ids: Vec<String>) -> PyResult<Vec<(String, String)>> {
        let mut out = Vec::with_capacity(ids.len());
        let mut remote: HashMap<String, Vec<(String, i32)>> = HashMap::new();
        for id in ids {
            let owner = match self.objects.owner_of(&id) {
                Some(owner) => {
                    remote.entry(owner.clone()).or_default().push((id.clone(), 1));
                    owner
                }
                None => {
                    // The caller's reference, given back through `UpdateRefs` as another
                    // process's.
                    self.objects.add_use(&id, oxray_worker::Use::Remote);
                    self.owner_address(py)?
                }
            };
            out.push((id, owner));
        }
        py.detach(|| {
            self.runtime.block_on(async {
                for (owner, changes) in remote {
                    oxray_worker::Owners::update(self.links.as_ref(), owner, changes).await;
                }
            })
        });
        Ok(out)
    }

    /// `(data, outcome)` for each id: outcome 0 is a value, 1 a task's exception, 2 a
    /// system failure whose data is a message.
    #[pyo3(signature = (ids, timeout=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        ids: Vec<String>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<(Bound<'py, PyBytes>, u8)>> {
        let ready =
            waiting::wait_for(py, &self.runtime, self.blocked_notice(), self.objects.get(&ids, deadline(timeout)))?
                .map_err(get_error)?;
        // The values' own references are taken by Python as it reads them.
        Ok(ready.into_iter().map(|r| (PyBytes::new(py, &r.data), r.outcome as u8)).collect())
    }

    /// Where the first `num_returns` ready objects are in `ids`, once that many are ready
    /// (or fewer at the timeout).
    #[pyo3(signature = (ids, num_returns, timeout=None))]
    fn wait(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, pyo3::types::PyList>,
        num_returns: usize,
        timeout: Option<f64>,
    ) -> PyResult<Vec<usize>> {
        // Mostly enough are ready already (the first of a thousand refs, say): the ids are
        // looked at where they are, and only as far as needed.
        let mut bad = None;
        let looked_at = ids.iter().map_while(|id| id.extract::<String>().map_err(|e| bad = Some(e)).ok());
        let now = {
            let _inside = self.runtime.enter();
            self.objects.ready_now(looked_at, num_returns).map_err(get_error)?
        };
        if let Some(e) = bad {
            return Err(e);
        }
        if let Some(ready) = now {
            return Ok(ready);
        }
        let ids: Vec<String> = ids.extract()?;
        let waited = self.objects.wait(&ids, num_returns, deadline(timeout));
        let ready = waiting::wait_for(py, &self.runtime, self.blocked_notice(), waited)?.map_err(get_error)?;
        Ok(ready.iter().enumerate().filter(|(_, r)| **r).map(|(at, _)| at).take(num_returns).collect())
    }

    /// How many objects this process holds (owned and borrowed): for tests and debugging.
    fn object_count(&self) -> usize {
        self.objects.len()
    }

    fn add_ref(&self, id: &str) {
        self.objects.add_ref(id);
    }

    fn release(&self, id: &str) {
        self.objects.release(id);
    }

    /// A borrowed actor handle holds this object (its actor's creation): the state API says so.
    fn mark_actor_handle(&self, id: &str) {
        self.objects.mark_actor_handle(id);
    }
}

impl Client {
    /// Starts this process's object server once; its address.
    fn start_object_server(&self) -> PyResult<String> {
        let _starting = self.starting_object_server.lock().expect("object server lock");
        if let Some(address) = self.object_address.get() {
            return Ok(address.clone());
        }
        let node = self.local_node()?;
        let actors: Arc<dyn oxray_worker::ActorOwner> = Arc::new(self.submitter()?);
        let serving = oxray_worker::serve_objects(self.objects.clone(), actors, self.token.clone());
        let port = self.runtime.block_on(serving).map_err(to_py)?;
        let address = format!("{}:{port}", node.ip);
        self.submitter()?.set_object_address(address.clone());
        self.runtime.spawn(self.cluster.announce_process(&address, &node.id, &node.ip));
        Ok(self.object_address.get_or_init(|| address).clone())
    }
}
