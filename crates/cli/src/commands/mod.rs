pub mod job;
pub mod list;
pub mod roles;
pub mod start;
pub mod status;
pub mod stop;
pub mod token;
