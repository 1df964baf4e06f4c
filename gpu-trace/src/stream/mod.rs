//! The event loops of `watch` and `run`: waiting for the ring buffer, the
//! drivers that come and go meanwhile, and what `watch` does with the
//! records of a long run: narrow them down (filter), fold repeats, write
//! them (sink) and count them (metrics).

pub mod driver_majors;
pub mod filter;
pub mod fold;
pub mod metrics;
pub mod metrics_format;
pub mod metrics_server;
pub mod open_route_upgrade;
pub mod pacing;
pub mod ring_events;
pub mod sink;
