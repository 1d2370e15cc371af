//! The runtime of a worker's task server. The worker's main thread drives it whenever it
//! waits for its next task, so a pushed task reaches Python, and its reply the network,
//! with no hand-off between threads. While the main thread runs a task for longer than
//! `GRACE`, a helper thread drives it instead, so cancels and other callers are still
//! served; it hands the runtime back as soon as the main thread waits again. Both live as
//! long as the worker process.

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
    /// Since when the main thread has not been driving the runtime.
    main_away_since: Option<Instant>,
    helper_driving: bool,
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
            state.main_away_since = None;
            if state.helper_driving {
                self.give_back.notify_one();
            }
        }
        // Waits for the helper to let go of the runtime, or completes through its driving.
        let out = self.runtime.block_on(future);
        self.state.lock().expect("driver lock").main_away_since = Some(Instant::now());
        self.busy.notify_one();
        out
    }

    /// The helper thread: drives the runtime while the main thread has been away too long.
    fn help(&self) {
        loop {
            let mut state = self.state.lock().expect("driver lock");
            loop {
                match state.main_away_since.map(|t| t.elapsed()) {
                    Some(away) if away >= GRACE => break,
                    Some(away) => state = self.busy.wait_timeout(state, GRACE - away).expect("driver lock").0,
                    None => state = self.busy.wait(state).expect("driver lock"),
                }
            }
            state.helper_driving = true;
            drop(state);
            self.runtime.block_on(self.give_back.notified());
            self.state.lock().expect("driver lock").helper_driving = false;
        }
    }
}
