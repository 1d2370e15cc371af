//! Delivers job reports to the head in order, retrying while the head is away (a restart
//! loses no final status).

use oxray_proto::v1;
use oxray_rpc::HeadClient;
use std::time::Duration;
use tokio::sync::mpsc;

#[derive(Clone)]
pub struct Reporter(mpsc::UnboundedSender<v1::JobReport>);

impl Reporter {
    pub fn start(client: HeadClient) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(deliver(client, rx));
        Self(tx)
    }

    pub fn send(&self, report: v1::JobReport) {
        // The delivery task lives as long as the runtime; a closed queue means shutdown.
        let _ = self.0.send(report);
    }
}

async fn deliver(mut client: HeadClient, mut rx: mpsc::UnboundedReceiver<v1::JobReport>) {
    while let Some(report) = rx.recv().await {
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
    }
}
