//! Generated gRPC code for the control plane, and conversions to and from `oxray-types`.

pub mod v1 {
    tonic::include_proto!("oxray.v1");
}

/// The few messages of Ray's own GCS protocol the head answers (see `ray/rpc/gcs_compat.proto`).
pub mod ray_rpc {
    tonic::include_proto!("ray.rpc");
}

pub mod convert;

pub use convert::ConvertError;
