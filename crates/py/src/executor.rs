//! The task loop's side of a worker process (`TaskExecutor`).

use crate::errors::parse_token;
use oxray_worker::Executor;
use pyo3::exceptions::{PyConnectionError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Arc;

/// The task loop's side of a worker process.
#[pyclass(module = "oxray._native")]
pub struct TaskExecutor {
    runtime: Arc<oxray_worker::SharedDriver>,
    executor: Arc<Executor>,
}

/// `(task_id, name, function, args, [(object_id, data)], actor_creation, actor_method,
/// num_returns, result_store, streaming, gpu_ids, restarts)`; `gpu_ids` is "0,1" for the
/// lease's GPUs; `restarts` how often an actor being created was restarted before.
type TaskTuple<'py> = (
    String,
    String,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Vec<(String, Bound<'py, PyBytes>)>,
    bool,
    String,
    u32,
    String,
    bool,
    String,
    u32,
);

fn task_tuple(py: Python<'_>, task: oxray_worker::Incoming) -> TaskTuple<'_> {
    let deps = task.dependencies.iter().map(|(id, data)| (id.clone(), PyBytes::new(py, data))).collect();
    let (function, args) = (PyBytes::new(py, &task.function), PyBytes::new(py, &task.args));
    let t = task;
    (
        t.task_id,
        t.name,
        function,
        args,
        deps,
        t.actor_creation,
        t.actor_method,
        t.num_returns,
        t.result_store,
        t.streaming,
        t.gpu_ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
        t.restarts,
    )
}

#[pymethods]
impl TaskExecutor {
    #[new]
    fn new(py: Python<'_>, agent: String, worker_id: String, token: String) -> PyResult<Self> {
        let token = parse_token(&token)?;
        py.detach(|| {
            let runtime = oxray_worker::SharedDriver::new().map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
            let executor =
                runtime.block_on(Executor::start(&agent, &worker_id, token)).map_err(PyConnectionError::new_err)?;
            // The worker's stdout and stderr are its log files: they rotate at their size cap.
            oxray_config::log_rotation::watch_stdout_and_stderr();
            // SIGINT to the thread that runs tasks (this one, the worker's main thread): Python
            // raises KeyboardInterrupt there, even out of a blocking sleep or read.
            let main = nix::sys::pthread::pthread_self();
            executor.on_interrupt(Box::new(move || {
                let _ = nix::sys::pthread::pthread_kill(main, nix::sys::signal::Signal::SIGINT);
            }));
            Ok(Self { runtime, executor })
        })
    }

    /// The next task, or None: `(task_id, name, function, args, [(object_id, data)], actor_creation,
    /// actor_method, num_returns)`. `concurrent`: taken by one of a threaded actor's threads,
    /// so not the one task that `cancel` interrupts.
    #[pyo3(signature = (concurrent=false))]
    fn next_task<'py>(&self, py: Python<'py>, concurrent: bool) -> Option<TaskTuple<'py>> {
        let task = py.detach(|| {
            if concurrent {
                self.runtime.block_on(self.executor.next_concurrent())
            } else {
                self.runtime.block_on(self.executor.next())
            }
        })?;
        Some(task_tuple(py, task))
    }

    /// A waiting task (as `next_task`) or None, without waiting; EOFError once no more can
    /// come. For a Python event loop that watches `fd`: a byte is written to it whenever
    /// tasks arrive (see `notify_fd`).
    fn try_next_task<'py>(&self, py: Python<'py>) -> PyResult<Option<TaskTuple<'py>>> {
        match self.executor.try_next() {
            Ok(task) => Ok(Some(task_tuple(py, task))),
            Err(tokio::sync::mpsc::error::TryRecvError::Empty) => Ok(None),
            Err(_) => Err(pyo3::exceptions::PyEOFError::new_err("the worker is shutting down")),
        }
    }

    /// Writes a byte to `fd` (non-blocking, owned by the caller) whenever tasks arrive.
    fn notify_fd(&self, fd: i32) {
        self.executor.on_arrival(Box::new(move || {
            // SAFETY: the caller keeps the descriptor open for the worker's life.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            // A full pipe already holds a wake-up.
            let _ = nix::unistd::write(fd, &[1]);
        }));
    }

    /// Sends the `index`-th value a streaming task yielded, with the refs inside it as
    /// `(object_id, owner)`.
    fn report_item(&self, task_id: &str, index: u64, data: &[u8], contained: Vec<(String, String)>) {
        let contained = contained
            .into_iter()
            .map(|(object_id, owner)| oxray_worker::ContainedRef { object_id, owner, return_index: 0 })
            .collect();
        let reply = oxray_worker::PushTaskReply { result: data.to_vec(), contained, ..Default::default() };
        self.executor.item(task_id, index, reply);
    }

    /// `contained`: `(object_id, owner, return_index)` of the ObjectRefs inside the results,
    /// each already held at its owner for the caller.
    /// `exits`: this process ends after the reply (`max_calls`).
    /// `error_text`: with `is_error`, the error as text, for the state API.
    /// `log_offsets`: where the task's output lies in this worker's log files.
    #[pyo3(signature = (task_id, result, is_error, returns=Vec::new(), output=String::new(), contained=Vec::new(), exits=false, error_text=String::new(), log_offsets=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        task_id: &str,
        result: &[u8],
        is_error: bool,
        returns: Vec<Vec<u8>>,
        output: String,
        contained: Vec<(String, String, u32)>,
        exits: bool,
        error_text: String,
        log_offsets: Vec<u64>,
    ) {
        let contained = contained
            .into_iter()
            .map(|(object_id, owner, return_index)| oxray_worker::ContainedRef { object_id, owner, return_index })
            .collect();
        let reply = oxray_worker::PushTaskReply {
            result: result.to_vec(),
            is_error,
            returns,
            output,
            contained,
            worker_exits: exits,
            error_text,
            log_offsets,
            ..Default::default()
        };
        self.executor.finish(task_id, reply);
    }
}
