//! The second half of the data path: a `session` (tracer and pipeline),
//! the one `event_loop` of `watch` and `run` (the ring buffer, the drivers
//! that come and go meanwhile, the caller's own events), and where their
//! records go: `watch`'s log (filter, fold, sink, metrics) and `run`'s
//! problems and report.

pub mod driver_majors;
pub mod event_loop;
pub mod filter;
pub mod fold;
pub mod log_output;
pub mod metrics;
pub mod metrics_format;
pub mod metrics_server;
pub mod open_route_upgrade;
pub mod otlp;
pub mod pacing;
pub mod ring_events;
pub mod run_output;
pub mod session;
pub mod sink;
pub mod stop_signals;
