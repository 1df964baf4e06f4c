//! Records written out for people and scripts: human lines, JSON lines,
//! and `run`'s closing report.

pub mod announce;
pub mod check_report;
pub mod output;
pub mod run_report;
pub mod summary_report;
pub mod timestamp;
