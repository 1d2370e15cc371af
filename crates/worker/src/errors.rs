//! What the core's calls fail with. Each kind is told apart by its variant, never by its
//! text: the native module maps the variants to Python exceptions in one place.

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("could not find a running cluster: start one with `oxray start --head`, or pass an address")]
    NoCluster,
    #[error("{0}")]
    Connect(String),
    #[error("{0}")]
    VersionMismatch(String),
    #[error("cannot start a local cluster: {0}")]
    Start(String),
    #[error("the cluster sent a malformed node: {0}")]
    Malformed(String),
    /// The caller asked for what cannot be (a bad argument).
    #[error("{0}")]
    Invalid(String),
    /// What was named does not exist: a named actor, a placement group, an actor unknown here.
    #[error("{0}")]
    NotFound(String),
    /// The name is taken.
    #[error("{0}")]
    Exists(String),
    /// A process of the cluster could not be reached, or did not answer in time.
    #[error("{0}")]
    Unreachable(String),
    /// The actor is dead, or could never be placed: the reason.
    #[error("{0}")]
    ActorDead(String),
    /// Anything else a process of the cluster answered.
    #[error("{0}")]
    Failed(String),
}

impl From<tonic::Status> for WorkerError {
    fn from(status: tonic::Status) -> Self {
        use tonic::Code;
        let message = status.message().to_string();
        match status.code() {
            Code::InvalidArgument | Code::OutOfRange => Self::Invalid(message),
            Code::NotFound => Self::NotFound(message),
            Code::AlreadyExists => Self::Exists(message),
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
                Self::Unreachable(oxray_rpc::root_cause(&status))
            }
            _ => Self::Failed(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::{Code, Status};

    #[test]
    fn statuses_become_kinds_by_their_code() {
        assert!(matches!(Status::not_found("no actor").into(), WorkerError::NotFound(m) if m == "no actor"));
        assert!(matches!(Status::already_exists("taken").into(), WorkerError::Exists(_)));
        assert!(matches!(Status::invalid_argument("bad").into(), WorkerError::Invalid(_)));
        assert!(matches!(Status::new(Code::Unavailable, "down").into(), WorkerError::Unreachable(_)));
        assert!(matches!(Status::internal("boom").into(), WorkerError::Failed(_)));
    }
}
