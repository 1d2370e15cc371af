//! The task loop's side of a worker process (`TaskExecutor`).

use crate::errors::parse_token;
use crate::records::Task;
use oxray_worker::Executor;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::sync::Arc;

/// The task loop's side of a worker process.
#[pyclass(module = "oxray._native")]
pub struct TaskExecutor {
    runtime: Arc<oxray_worker::SharedDriver>,
    executor: Arc<Executor>,
}

#[pymethods]
impl TaskExecutor {
    #[new]
    fn new(py: Python<'_>, agent: String, worker_id: String, token: String) -> PyResult<Self> {
        let token = parse_token(&token)?;
        py.detach(|| {
            let runtime = oxray_worker::SharedDriver::new().map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
            let executor =
                runtime.block_on(Executor::start(&agent, &worker_id, token)).map_err(crate::errors::to_py)?;
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

    /// The next task, or None. `concurrent`: taken by one of a threaded actor's threads,
    /// so not the one task that `cancel` interrupts.
    #[pyo3(signature = (concurrent=false))]
    fn next_task(&self, py: Python<'_>, concurrent: bool) -> PyResult<Option<Task>> {
        let task = py.detach(|| {
            if concurrent {
                self.runtime.block_on(self.executor.next_concurrent())
            } else {
                self.runtime.block_on(self.executor.next())
            }
        });
        task.map(|t| Task::new(py, t)).transpose()
    }

    /// A waiting task (as `next_task`) or None, without waiting; EOFError once no more can
    /// come. For a Python event loop that watches `fd`: a byte is written to it whenever
    /// tasks arrive (see `notify_fd`).
    fn try_next_task(&self, py: Python<'_>) -> PyResult<Option<Task>> {
        match self.executor.try_next() {
            Ok(task) => Task::new(py, task).map(Some),
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
