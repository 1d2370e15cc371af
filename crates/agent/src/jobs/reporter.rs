//! Delivers job reports to the head in order, retrying while the head is away (a restart
//! loses no final status).

use oxray_proto::v1;
use oxray_rpc::HeadClient;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

type Queued = (v1::JobReport, Option<oneshot::Sender<()>>);

#[derive(Clone)]
pub struct Reporter(mpsc::UnboundedSender<Queued>, HeadClient);

impl Reporter {
    pub fn start(client: HeadClient) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(deliver(client.clone(), rx));
        Self(tx, client)
    }

    /// The head the reports go to, for what else a job sends it (its log's copy).
    pub fn head(&self) -> HeadClient {
        self.1.clone()
    }

    pub fn send(&self, report: v1::JobReport) {
        // The delivery task lives as long as the runtime; a closed queue means shutdown.
        let _ = self.0.send((report, None));
    }

    /// Sends a report and waits (at most `patience`) until the head has it.
    pub async fn send_and_wait(&self, report: v1::JobReport, patience: Duration) {
        let (tx, rx) = oneshot::channel();
        let _ = self.0.send((report, Some(tx)));
        let _ = tokio::time::timeout(patience, rx).await;
    }
}

async fn deliver(mut client: HeadClient, mut rx: mpsc::UnboundedReceiver<Queued>) {
    while let Some((report, delivered)) = rx.recv().await {
        let mut backoff = Duration::from_millis(100);
        loop {
            match client.report_job(report.clone()).await {
                Ok(_) => break,
                Err(status) if status.code() == tonic::Code::InvalidArgument => {
                    tracing::error!(job = %report.submission_id, "the head refused a job report: {}", status.message());
                    break;
                }
                Err(status) => {
                    tracing::debug!(job = %report.submission_id, "job report not delivered yet: {}", status.message());
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
        if let Some(tx) = delivered {
            let _ = tx.send(());
        }
    }
}
