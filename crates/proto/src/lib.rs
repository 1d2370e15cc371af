//! Generated gRPC code for the control plane, and conversions to and from `oxray-types`.

pub mod v1 {
    tonic::include_proto!("oxray.v1");
}

/// The few messages of Ray's own GCS protocol the head answers (see `ray/rpc/gcs_compat.proto`).
pub mod ray_rpc {
    tonic::include_proto!("ray.rpc");
}

pub mod convert;

/// The details of an agent's refusal of a lease whose runtime_env could not be prepared:
/// how the asker tells that failure (RuntimeEnvSetupError) from the others, not by its words.
pub const RUNTIME_ENV_SETUP_FAILED: &[u8] = b"oxray.runtime_env_setup_failed";

pub use convert::ConvertError;
