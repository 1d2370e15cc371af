//! A runtime driven by the Python threads that wait on it, with a helper thread for when
//! none does. A worker's main thread drives its task server's runtime whenever it waits for
//! its next task, and a driver's thread drives the core's runtime while it waits in `get`:
//! a pushed task reaches Python, its reply the network, and the reply the waiting caller,
//! with no hand-off between threads. Once no thread has waited on the runtime for `GRACE`
//! (Python runs a long task or other code), the helper drives it instead, so servers and
//! submitted work keep going; it hands the runtime back as soon as a thread waits again.

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
    stopped: bool,
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

    /// Ends the helper thread; the runtime goes with the last reference to it.
    pub fn stop(&self) {
        self.state.lock().expect("driver lock").stopped = true;
        self.busy.notify_one();
        self.give_back.notify_one();
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
                if state.stopped {
                    return;
                }
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
