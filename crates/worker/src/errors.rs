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
            // The client's own error (no answer came) names its cause; else the answer does.
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
                Self::Unreachable(std::error::Error::source(&status).map(oxray_rpc::root_cause).unwrap_or(message))
            }
            _ => Self::Failed(message),
        }
    }
}

/// How a failure is answered to another process, so it becomes the same kind there.
impl From<WorkerError> for tonic::Status {
    fn from(e: WorkerError) -> Self {
        let message = e.to_string();
        match e {
            WorkerError::Invalid(_) => Self::invalid_argument(message),
            WorkerError::NotFound(_) => Self::not_found(message),
            WorkerError::Exists(_) => Self::already_exists(message),
            WorkerError::NoCluster | WorkerError::Connect(_) | WorkerError::Unreachable(_) => {
                Self::unavailable(message)
            }
            WorkerError::ActorDead(_) => Self::failed_precondition(message),
            WorkerError::VersionMismatch(_)
            | WorkerError::Start(_)
            | WorkerError::Malformed(_)
            | WorkerError::Failed(_) => Self::internal(message),
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
        let unreachable: WorkerError = Status::new(Code::Unavailable, "down").into();
        assert_eq!(unreachable.to_string(), "down", "the message, not the status's whole text");
    }

    #[test]
    fn a_kind_answered_to_another_process_is_the_same_kind_there() {
        for e in [
            WorkerError::Invalid("a".into()),
            WorkerError::NotFound("b".into()),
            WorkerError::Exists("c".into()),
            WorkerError::Failed("d".into()),
        ] {
            let kind = std::mem::discriminant(&e);
            assert_eq!(std::mem::discriminant(&WorkerError::from(Status::from(e))), kind);
        }
    }
}
