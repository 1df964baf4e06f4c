//! `check`'s report: the policy in force, the nodes each view sees and
//! the decision on each, as text or one JSON object.

use std::io::{self, Write};

use serde::Serialize;

use crate::{
    analysis::access_check::View, kernel::programs_in_force::PolicyProgram,
    model::container::Container,
};

#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub cgroup: String,
    pub container: Container,
    pub pid: Option<u32>,
    pub programs: Vec<PolicyProgram>,
    pub devices_list: Option<DevicesListReport>,
    pub views: Vec<View>,
    pub nvidia_uvm_loaded: bool,
    /// Every device CUDA needs is there, current and allowed, in the target's view.
    pub usable: bool,
    pub problems: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct DevicesListReport {
    pub cgroup: String,
    pub lines: Vec<String>,
}

pub fn write_human(out: &mut impl Write, report: &CheckReport) -> io::Result<()> {
    let pid = report.pid.map(|p| format!(", pid {p}")).unwrap_or_default();
    writeln!(
        out,
        "gpu-trace check: cgroup {} ({}){pid}",
        report.cgroup,
        report.container.label()
    )?;
    match report.programs.len() {
        0 => writeln!(out, "device programs in force: none")?,
        n => {
            writeln!(
                out,
                "device programs in force ({n}, in the order the kernel runs them):"
            )?;
            for p in &report.programs {
                writeln!(
                    out,
                    "  {} ({} attach, tag {})",
                    p.label(),
                    p.attach_mode,
                    p.tag
                )?;
            }
        }
    }
    if let Some(list) = &report.devices_list {
        writeln!(
            out,
            "cgroup v1 devices.list of {}: {}",
            list.cgroup,
            list.lines.join(", ")
        )?;
    }
    for view in &report.views {
        writeln!(out)?;
        writeln!(out, "{} nodes ({}):", view.name, view.dev_dir.display())?;
        if view.nodes.is_empty() {
            writeln!(out, "  (no NVIDIA nodes)")?;
        }
        for row in &view.nodes {
            writeln!(
                out,
                "  {:<32} {:<18} c {:>3}:{:<4} {:<4} {:<8} {}",
                row.path.display().to_string(),
                row.kind,
                row.major,
                row.minor,
                row.access,
                row.verdict,
                row.decided_by
            )?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "nvidia_uvm module: {}",
        if report.nvidia_uvm_loaded {
            "loaded"
        } else {
            "not loaded"
        }
    )?;
    for problem in &report.problems {
        writeln!(out, "problem: {problem}")?;
    }
    if report.usable {
        writeln!(
            out,
            "result: usable: nvidiactl, nvidia-uvm and a GPU node are present, current and allowed"
        )
    } else {
        writeln!(out, "result: NOT usable for CUDA (see the problems above)")
    }
}
