//! Submitting tasks, cancelling them, and the items of streaming ones.

use super::*;

#[pymethods]
impl Client {
    /// Starts a task; returns the ids of the objects that will hold its results.
    #[pyo3(signature = (name, function, args, dependencies, contained, resources, max_retries=3, retry_exceptions=false, num_returns=1, env_vars=BTreeMap::new(), strategy=(String::from("DEFAULT"), String::new(), false, -1), streaming=false))]
    #[allow(clippy::too_many_arguments)]
    fn submit_task(
        &self,
        py: Python<'_>,
        name: String,
        function: &[u8],
        args: &[u8],
        dependencies: Vec<String>,
        contained: Vec<String>,
        resources: BTreeMap<String, f64>,
        max_retries: u32,
        retry_exceptions: bool,
        num_returns: u32,
        env_vars: BTreeMap<String, String>,
        strategy: StrategyArg,
        streaming: bool,
    ) -> PyResult<Vec<String>> {
        let resources =
            oxray_types::ResourceSet::try_from(resources).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let submitter = py.detach(|| self.submitter())?;
        self.take_results_in_store(py);
        let (function, args) = (function.to_vec(), args.to_vec());
        let route = Route::Lease(resources, env_vars, parse_strategy(strategy)?);
        let spec = TaskSpec {
            name,
            function,
            args,
            dependencies,
            contained,
            route,
            max_retries,
            retry_exceptions,
            num_returns,
            streaming,
            job: Default::default(),
        };
        Ok(submitter.submit(self.runtime.handle(), spec))
    }

    /// Cancels the task that makes this object; see `Submitter::cancel`.
    fn cancel(&self, py: Python<'_>, object_id: String, force: bool) -> PyResult<bool> {
        let submitter = py.detach(|| self.submitter())?;
        Ok(py.detach(|| self.runtime.block_on(submitter.cancel(&object_id, force))))
    }

    /// The id of the `index`-th value the streaming task `task_id` yielded, waiting for it
    /// (its reference is the caller's to hold); `None` once the task ended without it.
    #[pyo3(signature = (task_id, index, timeout=None))]
    fn stream_next(
        &self,
        py: Python<'_>,
        task_id: String,
        index: usize,
        timeout: Option<f64>,
    ) -> PyResult<Option<String>> {
        let submitter = py.detach(|| self.submitter())?;
        let next = submitter.next_item(&task_id, index, deadline(timeout));
        waiting::wait_for(py, &self.runtime, self.blocked_notice(), next)?.map_err(get_error)
    }

    /// The generator of a streaming task let go of it.
    fn stream_drop(&self, py: Python<'_>, task_id: String) -> PyResult<()> {
        py.detach(|| self.submitter())?.drop_items(&task_id);
        Ok(())
    }
}
