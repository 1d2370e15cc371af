//! The runtime of a worker's task server, driven by the worker's main thread whenever it
//! waits for its next task: a pushed task reaches Python, and its reply the network, with
//! no hand-off between threads. Once no thread has waited on the runtime for `GRACE` (Python
//! runs a long task, or an async actor's loop runs), a helper thread drives it instead, so
//! cancels and other callers are still served; it hands the runtime back as soon as a
//! thread waits again. Both live as long as the worker process.
//!
//! (The core's runtime, which Python threads submit work to while they run other code,
//! keeps a thread of its own: work submitted there starts at once, beside Python.)

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How long the runtime may go undriven while a task runs.
const GRACE: Duration = Duration::from_millis(10);

pub struct SharedDriver {
    runtime: tokio::runtime::Runtime,
    state: Mutex<State>,
    busy: Condvar,
    give_back: Notify,
}

#[derive(Default)]
struct State {
    /// Threads in `block_on` now, and since when none has been.
    inside: usize,
    main_away_since: Option<Instant>,
    helper_driving: bool,
    /// The helper waits with no deadline: only a notification wakes it.
    helper_idle: bool,
}

impl SharedDriver {
    pub fn new() -> std::io::Result<Arc<Self>> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let driver = Arc::new(Self {
            runtime,
            state: Mutex::new(State::default()),
            busy: Condvar::new(),
            give_back: Notify::new(),
        });
        let helper = driver.clone();
        std::thread::Builder::new().name("oxray-task-io".into()).spawn(move || helper.help())?;
        Ok(driver)
    }

    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.handle()
    }

    /// Runs `future` to completion on the calling thread, driving the runtime meanwhile.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        {
            let mut state = self.state.lock().expect("driver lock");
            state.inside += 1;
            state.main_away_since = None;
            if state.helper_driving {
                self.give_back.notify_one();
            }
        }
        // Counted out even if the future panics, so the helper is not shut out for good.
        let _inside = Inside(self);
        // Waits for the helper to let go of the runtime, or completes through its driving.
        self.runtime.block_on(future)
    }

    /// The helper thread: drives the runtime while the main thread has been away too long.
    fn help(&self) {
        loop {
            let mut state = self.state.lock().expect("driver lock");
            loop {
                match state.main_away_since.map(|t| t.elapsed()) {
                    Some(away) if away >= GRACE => break,
                    Some(away) => state = self.busy.wait_timeout(state, GRACE - away).expect("driver lock").0,
                    None => {
                        state.helper_idle = true;
                        state = self.busy.wait(state).expect("driver lock");
                        state.helper_idle = false;
                    }
                }
            }
            state.helper_driving = true;
            drop(state);
            self.runtime.block_on(self.give_back.notified());
            self.state.lock().expect("driver lock").helper_driving = false;
        }
    }
}

/// A thread inside `SharedDriver::block_on`.
struct Inside<'a>(&'a SharedDriver);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        let driver = self.0;
        let mut state = driver.state.lock().unwrap_or_else(|e| e.into_inner());
        state.inside -= 1;
        if state.inside > 0 {
            return;
        }
        state.main_away_since = Some(Instant::now());
        // A helper waiting with a deadline looks again by itself: waking it on every call
        // would cost a thread wake-up each.
        if state.helper_idle {
            driver.busy.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_spawned_while_no_thread_waits_is_driven_by_the_helper() {
        let driver = SharedDriver::new().unwrap();
        assert_eq!(driver.block_on(async { 7 }), 7);
        let (tx, rx) = std::sync::mpsc::channel();
        driver.handle().spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            tx.send(1).unwrap();
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(1), "the helper drove it");
        let waited = driver.block_on(async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            8
        });
        assert_eq!(waited, 8, "a waiting thread takes the runtime back");
    }
}
