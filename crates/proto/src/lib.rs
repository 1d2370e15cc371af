//! Generated gRPC code for the control plane, and conversions to and from `oxray-types`.

pub mod v1 {
    tonic::include_proto!("oxray.v1");
}

pub mod convert;

pub use convert::ConvertError;
