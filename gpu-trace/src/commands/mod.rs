//! One module per subcommand.

pub mod selftest;
pub mod watch;
