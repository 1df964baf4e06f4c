//! One module per subcommand.

pub mod check;
pub mod run;
pub mod selftest;
pub mod summary;
pub mod watch;
