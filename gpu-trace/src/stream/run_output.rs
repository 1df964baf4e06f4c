//! Where `run`'s records go: each problem of the traced tree written to
//! stderr as it happens, and kept for the closing report.

use std::io::{self, Write};

use crate::{
    model::{record::Record, vendor::Vendor},
    render::{
        output::{write_record, Format},
        run_report::Report,
    },
    stream::{
        filter::vendor_shown,
        session::{Counted, Output},
    },
};

pub struct RunOutput<'a> {
    pub format: Format,
    pub paint: bool,
    /// `--vendor`: the vendors whose problems are shown (all when empty).
    pub vendors: &'a [Vendor],
    pub report: Report,
    line: Vec<u8>,
}

impl<'a> RunOutput<'a> {
    pub fn new(format: Format, paint: bool, vendors: &'a [Vendor]) -> Self {
        Self {
            format,
            paint,
            vendors,
            report: Report::default(),
            line: Vec::new(),
        }
    }
}

impl Output for RunOutput<'_> {
    fn record(&mut self, record: Record, _counted: Counted) {
        if !record.access.verdict.is_problem() || !vendor_shown(self.vendors, &record) {
            return;
        }
        self.line.clear();
        let _ = write_record(&mut self.line, self.format, self.paint, &record);
        let _ = io::stderr().lock().write_all(&self.line);
        self.report.add(&record);
    }
}
