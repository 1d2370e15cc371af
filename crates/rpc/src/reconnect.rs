//! Calls to a head that cannot be reached are made again for a while, as Ray's clients of
//! its GCS do (`gcs_rpc_server_reconnect_timeout_s`): a head restarted by its supervisor is
//! back within seconds, and the work under way must not fail for it.

use std::future::Future;
use std::time::Duration;
use tonic::Status;

/// How long calls wait for an unreachable head: `OXRAY_HEAD_RECONNECT_TIMEOUT_S`, 60 s
/// (Ray's default) when unset.
pub fn window() -> Duration {
    window_from(std::env::var("OXRAY_HEAD_RECONNECT_TIMEOUT_S").ok().as_deref())
}

fn window_from(value: Option<&str>) -> Duration {
    value
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(Duration::from_secs(60), Duration::from_secs_f64)
}

/// Whether a failed call got no answer: the error is the client's own (no connection, or
/// one that broke), not the head's. Only a call that changes nothing may be made again then.
pub fn unanswered(status: &Status) -> bool {
    std::error::Error::source(status).is_some()
}

/// Whether a failed call never left this process: its connection was refused, so making it
/// again cannot do it twice.
pub fn never_sent(status: &Status) -> bool {
    let mut cause = std::error::Error::source(status);
    while let Some(error) = cause {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if matches!(io.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound) {
                return true;
            }
        }
        cause = error.source();
    }
    false
}

/// Makes `call` until it is answered, or until its failure is not one `may_repeat`, or the
/// window (from the first such failure: a call may wait long for its answer) closed; waits
/// a little longer between tries each time (at most 1 s).
pub async fn retried<T, F>(mut call: impl FnMut() -> F, may_repeat: fn(&Status) -> bool) -> Result<T, Status>
where
    F: Future<Output = Result<T, Status>>,
{
    let mut deadline = None;
    let mut pause = Duration::from_millis(50);
    loop {
        match call().await {
            Err(status)
                if may_repeat(&status)
                    && tokio::time::Instant::now()
                        < *deadline.get_or_insert_with(|| tokio::time::Instant::now() + window()) =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn refused() -> Status {
        Status::from_error(Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)))
    }

    #[test]
    fn the_window_is_rays_default_unless_set() {
        assert_eq!(window_from(None), Duration::from_secs(60));
        assert_eq!(window_from(Some("2.5")), Duration::from_millis(2500));
        assert_eq!(window_from(Some("-1")), Duration::from_secs(60));
        assert_eq!(window_from(Some("soon")), Duration::from_secs(60));
    }

    #[test]
    fn a_refused_connection_is_never_sent_and_an_answer_is_an_answer() {
        assert!(never_sent(&refused()) && unanswered(&refused()));
        let answered = Status::unavailable("the head is shutting down");
        assert!(!never_sent(&answered) && !unanswered(&answered));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_is_made_again_until_answered() {
        let tries = AtomicU32::new(0);
        let got = retried(
            || {
                let n = tries.fetch_add(1, Ordering::Relaxed);
                async move {
                    if n < 5 {
                        Err(refused())
                    } else {
                        Ok(n)
                    }
                }
            },
            never_sent,
        )
        .await;
        assert_eq!(got.unwrap(), 5);
        let refusal = retried(|| async { Err::<(), _>(Status::permission_denied("no")) }, unanswered).await;
        assert_eq!(refusal.unwrap_err().code(), tonic::Code::PermissionDenied, "the head's own answer, at once");
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_starts_at_the_first_failure_not_at_the_call() {
        let tries = AtomicU32::new(0);
        let got = retried(
            || {
                let n = tries.fetch_add(1, Ordering::Relaxed);
                async move {
                    match n {
                        // An answer awaited longer than the window, then the head went away.
                        0 => {
                            tokio::time::sleep(window() * 2).await;
                            Err(refused())
                        }
                        1 => Err(refused()),
                        _ => Ok(n),
                    }
                }
            },
            unanswered,
        )
        .await;
        assert_eq!(got.unwrap(), 2);
        let given_up = retried(|| async { Err::<(), _>(refused()) }, never_sent).await;
        assert!(given_up.is_err(), "a head that never comes back is given up on");
    }
}
