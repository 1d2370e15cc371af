//! Actors: creation, calls, the named-actor directory, kills.

use super::*;
use crate::records::{ActorPlacement, NamedActor};

#[pymethods]
impl Client {
    /// Creates an actor (`actor_id` chosen by the caller) without waiting for a node: it is
    /// placed, and its creation call sent, in the background; calls wait for it. Returns
    /// the creation call's object. With `ends_with_handles`, the actor ends once that
    /// object goes: when no handle to it is left in any process. `namespace`: the one it is
    /// made in.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (actor_id, name, class, args, dependencies, contained, resources, env_vars, strategy, detached, max_restarts, max_task_retries, ends_with_handles, namespace=String::new()))]
    fn create_actor(
        &self,
        py: Python<'_>,
        actor_id: String,
        name: String,
        class: &[u8],
        args: &[u8],
        dependencies: Vec<String>,
        contained: Vec<String>,
        resources: BTreeMap<String, f64>,
        env_vars: BTreeMap<String, String>,
        strategy: StrategyArg,
        detached: bool,
        max_restarts: i64,
        max_task_retries: i64,
        ends_with_handles: bool,
        namespace: String,
    ) -> PyResult<String> {
        let resources =
            oxray_types::ResourceSet::try_from(resources).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let strategy = parse_strategy(strategy)?;
        let submitter = py.detach(|| self.submitter())?;
        // The agent tells this process's object server when the actor's worker dies.
        self.owner_address(py)?;
        let plan = RestartPlan { resources, env: env_vars, strategy, detached, restarts_left: max_restarts };
        let call = actor_call(&actor_id, "", None, String::new(), true, max_task_retries);
        let spec = TaskSpec::actor(name, class.to_vec(), args.to_vec(), dependencies, contained, call);
        let created = submitter.create_actor(self.runtime.handle(), &actor_id, spec, plan, &namespace);
        self.objects.mark_actor_handle(&created);
        if ends_with_handles {
            let (owner, runtime) = (Arc::downgrade(&submitter), self.runtime.handle().clone());
            let end = move || {
                if let Some(submitter) = owner.upgrade() {
                    runtime.spawn(submitter.end_out_of_scope(actor_id));
                }
            };
            self.objects.on_free(&created, Box::new(end));
        }
        Ok(created)
    }

    /// Where an actor this process created runs, once it is placed; an error if it never can be.
    fn actor_placement(&self, py: Python<'_>, actor_id: String) -> PyResult<ActorPlacement> {
        let submitter = py.detach(|| self.submitter())?;
        let placed = waiting::wait_for(py, &self.runtime, None, submitter.actor_placement(&actor_id))?;
        placed.map(ActorPlacement::from).map_err(to_py)
    }

    /// Ends the actors this process created that do not outlive it.
    fn end_owned_actors(&self, py: Python<'_>) -> PyResult<()> {
        let submitter = py.detach(|| self.submitter())?;
        py.detach(|| self.runtime.block_on(submitter.end_owned_actors()));
        Ok(())
    }

    /// Calls a method; calls from this process run in the order they are made. `owner` is
    /// the creator's object server when another process created the actor. Returns the
    /// ids of its `num_returns` results.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (actor_id, address, owner, method, args, dependencies, contained, max_task_retries=0, num_returns=1, streaming=false))]
    fn call_actor(
        &self,
        py: Python<'_>,
        actor_id: String,
        address: String,
        owner: Option<String>,
        method: String,
        args: &[u8],
        dependencies: Vec<String>,
        contained: Vec<String>,
        max_task_retries: i64,
        num_returns: u32,
        streaming: bool,
    ) -> PyResult<Vec<String>> {
        let submitter = py.detach(|| self.submitter())?;
        self.take_results_in_store(py);
        let call = actor_call(&actor_id, &address, owner, method.clone(), false, max_task_retries);
        let spec = TaskSpec {
            num_returns,
            streaming,
            ..TaskSpec::actor(method, Vec::new(), args.to_vec(), dependencies, contained, call)
        };
        Ok(submitter.submit(self.runtime.handle(), spec))
    }

    /// Records a named actor in the head's directory; fails if the name is taken.
    #[allow(clippy::too_many_arguments)]
    fn register_actor(
        &self,
        py: Python<'_>,
        name: String,
        namespace: String,
        actor_id: String,
        worker_address: String,
        agent_address: String,
        lease_id: String,
        class_name: String,
        methods: Vec<String>,
        detached: bool,
        max_task_retries: i64,
    ) -> PyResult<()> {
        let owner = self.owner_address(py)?;
        let actor = oxray_worker::NamedActor {
            name,
            namespace,
            actor_id,
            worker_address,
            agent_address,
            lease_id,
            class_name,
            methods,
            detached,
            owner,
            max_task_retries,
        };
        py.detach(|| self.cluster.register_actor(actor)).map_err(to_py)
    }

    /// A named actor; ValueError if there is none of that name.
    fn get_actor(&self, py: Python<'_>, name: String, namespace: String) -> PyResult<NamedActor> {
        py.detach(|| self.cluster.get_actor(&name, &namespace)).map(NamedActor::from).map_err(to_py)
    }

    /// `(name, namespace)` of the named actors of `namespace` (of every one when empty).
    fn list_actors(&self, py: Python<'_>, namespace: String) -> PyResult<Vec<(String, String)>> {
        let actors = py.detach(|| self.cluster.list_actors(&namespace)).map_err(to_py)?;
        Ok(actors.into_iter().map(|a| (a.name, a.namespace)).collect())
    }

    fn remove_actor(&self, py: Python<'_>, name: String, namespace: String) -> PyResult<()> {
        py.detach(|| self.cluster.remove_actor(&name, &namespace)).map_err(to_py)
    }

    /// Retires an actor's worker through the agent that leased it (an actor whose owner is
    /// not known).
    fn kill_actor_at(&self, py: Python<'_>, agent_address: String, lease_id: String) -> PyResult<()> {
        let submitter = py.detach(|| self.submitter())?;
        py.detach(|| self.runtime.block_on(submitter.retire(&agent_address, &lease_id))).map_err(to_py)
    }

    /// Ends an actor through its owner (this process, or the one named by `owner`); with
    /// `no_restart` it stays dead.
    #[pyo3(signature = (actor_id, address, owner, no_restart=true))]
    fn kill_actor(
        &self,
        py: Python<'_>,
        actor_id: String,
        address: String,
        owner: Option<String>,
        no_restart: bool,
    ) -> PyResult<()> {
        let submitter = py.detach(|| self.submitter())?;
        py.detach(|| {
            // An actor first seen here is known by its owner, which ends it; one still
            // waiting for its worker (here or there) is ended without waiting for it.
            submitter.know_actor(&actor_id, &address, owner.as_deref());
            self.runtime.block_on(submitter.kill_actor(&actor_id, no_restart))
        })
        .map_err(to_py)
    }
}
