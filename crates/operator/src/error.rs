use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("the head at {url}: {reason}")]
    Head { url: String, reason: String },
    #[error("{0}")]
    Spec(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
