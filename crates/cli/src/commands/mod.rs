pub mod job;
pub mod list;
pub mod operator;
pub mod roles;
pub mod start;
pub mod status;
pub mod stop;
pub mod token;
