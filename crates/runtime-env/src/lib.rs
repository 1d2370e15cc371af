//! Runtime environments of jobs: the `runtime_env` object (checked), package names, and
//! archives (checked for entries that escape their target before anything is written).

mod archive;
mod pack;
mod spec;

pub use archive::{stem, unpack, unpack_within, validate, ArchiveError, ArchiveKind, Limits};
pub use pack::{pack_dir, PackError};
pub use spec::{package_name, PipSpec, RuntimeEnv, SpecError};
