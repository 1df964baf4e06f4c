//! One module per subcommand.

pub mod run;
pub mod selftest;
pub mod watch;
