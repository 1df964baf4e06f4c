//! gpu-trace: shows denied GPU device accesses live, with the cgroup, the
//! process, the device and the policy that refused it.
//!
//! Layers, each importing only from those listed before it (see
//! `layers.rs`, which tests it, and docs/architecture.md):
//!
//! `text` (tenant strings made safe for shells, terminals, JSON) ->
//! `model` (data) -> `host` (files the host offers) -> `runtime` (one room
//! per container runtime: its cgroups, names, labels and fixes) -> `kernel`
//! (bpf(2), aya) and `cgroup` (names of cgroups) -> `analysis` (enrich, attribute,
//! diagnose) -> `render` (human, JSON, reports) -> `stream` (filter, fold,
//! sink, metrics) -> `scenario` (the incident rebuilt for selftest and
//! tests) -> `cli` -> `commands` (one per subcommand) -> main.rs.

pub mod text;

pub mod model;

pub mod host;

pub mod runtime;

pub mod cgroup;
pub mod kernel;

pub mod analysis;

pub mod render;

pub mod stream;

pub mod scenario;

pub mod cli;

pub mod commands;

#[cfg(test)]
mod layers;
