//! Waiting from Python: with the GIL released, yet stoppable by Ctrl-C and alarms, and, in a
//! task's worker, with the task's CPUs lent to the node while it waits.

use oxray_worker::BlockedNotice;
use pyo3::prelude::*;
use std::future::Future;
use std::time::Duration;

/// How often a wait looks for signals: Python runs its handlers only when asked to.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Runs `fut` to its end on `runtime`; a signal handler that raises (KeyboardInterrupt)
/// ends the wait with its exception. `notice` is told when the wait does not end at once.
pub(crate) fn wait_for<F>(
    py: Python<'_>,
    runtime: &tokio::runtime::Runtime,
    notice: Option<&BlockedNotice>,
    fut: F,
) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let mut fut = std::pin::pin!(fut);
    // Most waits end at once: nothing to tell, no timer to arm.
    if let Ok(done) = py.detach(|| runtime.block_on(async { tokio::time::timeout(Duration::ZERO, &mut fut).await })) {
        return Ok(done);
    }
    let told = notice.map(|n| runtime.spawn(n.clone().tell(true)));
    let result = loop {
        match py.detach(|| runtime.block_on(async { tokio::time::timeout(SIGNAL_CHECK, &mut fut).await })) {
            Ok(done) => break Ok(done),
            Err(_) => {
                if let Err(raised) = py.check_signals() {
                    break Err(raised);
                }
            }
        }
    };
    if let (Some(notice), Some(told)) = (notice, told) {
        // After the first notice, so the agent never sees them out of order.
        let back = notice.clone().tell(false);
        py.detach(|| {
            runtime.block_on(async move {
                let _ = told.await;
                back.await;
            })
        });
    }
    result
}
