//! A kernel in lockdown (confidentiality), which cannot be lowered once
//! raised: only the qemu matrix's guests raise it, after everything else.
//! Elsewhere the tests say why they do not run.

// Each test binary uses a part of the shared helpers.
#[allow(dead_code)]
#[path = "../support/common.rs"]
mod common;
mod lockdown;
#[path = "../support/skip.rs"]
mod skip;
