//! `check`'s report: the policy in force, the nodes each view sees and
//! the decision on each, as text or one JSON object.

use std::io::{self, Write};

use serde::Serialize;

use crate::{
    analysis::{
        access_check::{NodeRow, View},
        policy_age::{duration_text, WrittenAfterStart},
    },
    analysis::{cdi_check::StaleCdiEntry, neighbour_check::NeighbourNode, vendor_check::VendorSet},
    kernel::programs_in_force::PolicyProgram,
    model::container::Container,
    text::{style, terminal::TerminalLines},
};

#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub cgroup: String,
    pub container: Container,
    pub pid: Option<u32>,
    pub programs: Vec<PolicyProgram>,
    /// Programs in force loaded after the cgroup's first process started:
    /// rules rewritten while it ran.
    pub written_after_start: Vec<WrittenAfterStart>,
    pub devices_list: Option<DevicesListReport>,
    pub views: Vec<View>,
    pub nvidia_uvm_loaded: bool,
    /// Every device CUDA needs is there, current and allowed, in the target's view.
    pub usable: bool,
    pub problems: Vec<String>,
    /// Risks that do not stop CUDA now: missing /dev/char links, stale
    /// CDI specs.
    pub warnings: Vec<String>,
    pub cdi: CdiReport,
    /// The other vendors' node sets (NVIDIA's are `views`).
    pub vendors: Vec<VendorSet>,
    /// The stacks judged for `usable`: "CUDA", "ROCm", ...
    pub stacks: Vec<&'static str>,
    /// The devices next to the GPU (RDMA, IMEX, GPUDirect, VFIO): listed
    /// with their verdicts, not judged.
    pub neighbours: Vec<NeighbourNode>,
}

/// The CDI specs read and the entries that do not match the host.
#[derive(Debug, Serialize)]
pub struct CdiReport {
    pub dirs: Vec<String>,
    pub unreadable: Vec<String>,
    pub stale: Vec<StaleCdiEntry>,
}

#[derive(Debug, Serialize)]
pub struct DevicesListReport {
    pub cgroup: String,
    pub lines: Vec<String>,
}

/// `paint`: colour the problems and the result (text/style.rs).
pub fn write_human(out: &mut impl Write, report: &CheckReport, paint: bool) -> io::Result<()> {
    let mut out = TerminalLines::painted(out, paint);
    let pid = report.pid.map(|p| format!(", pid {p}")).unwrap_or_default();
    out.line(format_args!(
        "gpu-trace check: cgroup {} ({}){pid}",
        report.cgroup,
        crate::runtime::label(&report.container)
    ))?;
    write_policies(&mut out, report)?;
    write_views(&mut out, report)?;
    write_vendor_sets(&mut out, report)?;
    write_neighbours(&mut out, report)?;
    write_verdict(&mut out, report)
}

/// The programs in force, those written after the start, and v1's list.
fn write_policies<W: Write>(out: &mut TerminalLines<W>, report: &CheckReport) -> io::Result<()> {
    match report.programs.len() {
        0 => out.line(format_args!("device programs in force: none"))?,
        n => {
            out.line(format_args!(
                "device programs in force ({n}, in the order the kernel runs them):"
            ))?;
            for p in &report.programs {
                out.line(format_args!(
                    "  {} ({} attach, tag {})",
                    p.label(),
                    p.attach_mode,
                    p.tag
                ))?;
            }
        }
    }
    for late in &report.written_after_start {
        out.parts(&[
            (Some(style::FAILED), "rewritten:"),
            (
                None,
                &format!(
                    " prog {} ({}) at {} was written {} after the cgroup's first process (pid {}) started: its rules were rewritten while it ran, as `systemctl daemon-reload` or `docker update` do",
                    late.id,
                    late.name,
                    late.attached_at,
                    duration_text(late.seconds_after_start),
                    late.first_pid
                ),
            ),
        ])?;
    }
    if let Some(list) = &report.devices_list {
        out.line(format_args!(
            "cgroup v1 devices.list of {}: {}",
            list.cgroup,
            list.lines.join(", ")
        ))?;
    }
    Ok(())
}

/// The device nodes as the cgroup's processes see them, each judged.
fn write_views<W: Write>(out: &mut TerminalLines<W>, report: &CheckReport) -> io::Result<()> {
    for view in &report.views {
        let heading = format!("{} nodes ({}):", view.name, view.dev_dir.display());
        let rows = view.nodes.iter().map(|row| {
            let NodeRow {
                kind,
                major,
                minor,
                access,
                verdict,
                decided_by,
                ..
            } = row;
            let path = row.path.display().to_string();
            let device = format!("c {major:>3}:{minor:<4}");
            let allocated = match (&row.gpu, row.allocated) {
                (Some(gpu), Some(true)) => format!(" [{gpu}, allocated to the container]"),
                (Some(gpu), Some(false)) => {
                    format!(" [{gpu}, not allocated to the container: its denial is expected]")
                }
                _ => String::new(),
            };
            format!(
                "{path:<32} {kind:<18} {device} {access:<4} {verdict:<8} {decided_by}{allocated}"
            )
        });
        write_node_list(out, &heading, "(no NVIDIA nodes)", rows.collect())?;
    }
    Ok(())
}

/// Each vendor's node set, and whether its stack can use it.
fn write_vendor_sets<W: Write>(out: &mut TerminalLines<W>, report: &CheckReport) -> io::Result<()> {
    for set in &report.vendors {
        let usable = if set.usable { "usable" } else { "NOT usable" };
        let heading = format!("{} nodes for {} ({usable}):", set.vendor.name(), set.stack);
        let rows = set.nodes.iter().map(|node| {
            format!(
                "{:<32} c {:>3}:{:<4} {:<8} {}",
                node.path.display().to_string(),
                node.major,
                node.minor,
                node.verdict,
                node.decided_by
            )
        });
        write_node_list(out, &heading, "(none)", rows.collect())?;
    }
    Ok(())
}

/// The devices next to the GPU, where the target's view has any: what
/// each denial would cost is in docs/root-causes.md.
fn write_neighbours<W: Write>(out: &mut TerminalLines<W>, report: &CheckReport) -> io::Result<()> {
    if report.neighbours.is_empty() {
        return Ok(());
    }
    let rows = report.neighbours.iter().map(|node| {
        let nic = node
            .nic
            .as_ref()
            .map(|nic| format!(" [NIC {nic}]"))
            .unwrap_or_default();
        format!(
            "{:<32} c {:>3}:{:<4} {:<9} {:<8} {}{nic}",
            node.path.display().to_string(),
            node.major,
            node.minor,
            node.role.name(),
            node.verdict,
            node.decided_by
        )
    });
    write_node_list(
        out,
        "Devices next to the GPU (listed, not judged: a container may need none of them):",
        "(none)",
        rows.collect(),
    )
}

/// A heading and its nodes one to a line, indented, or `empty` in their
/// place: the shape the views and the vendor sets share.
fn write_node_list<W: Write>(
    out: &mut TerminalLines<W>,
    heading: &str,
    empty: &str,
    rows: Vec<String>,
) -> io::Result<()> {
    out.blank()?;
    out.line(format_args!("{heading}"))?;
    if rows.is_empty() {
        out.line(format_args!("  {empty}"))?;
    }
    for row in rows {
        out.line(format_args!("  {row}"))?;
    }
    Ok(())
}

/// Each of `lines` behind `label` in the failure colour (problems, warnings).
fn write_flagged<W: Write>(
    out: &mut TerminalLines<W>,
    label: &str,
    lines: &[String],
) -> io::Result<()> {
    for line in lines {
        out.parts(&[(Some(style::FAILED), label), (None, " "), (None, line)])?;
    }
    Ok(())
}

/// The uvm module, the problems and warnings, and the result.
fn write_verdict<W: Write>(out: &mut TerminalLines<W>, report: &CheckReport) -> io::Result<()> {
    out.blank()?;
    out.line(format_args!(
        "nvidia_uvm module: {}",
        if report.nvidia_uvm_loaded {
            "loaded"
        } else {
            "not loaded"
        }
    ))?;
    write_flagged(out, "problem:", &report.problems)?;
    write_flagged(out, "warning:", &report.warnings)?;
    let stacks = report.stacks.join(", ");
    if report.usable {
        out.parts(&[
            (None, "result: "),
            (Some(style::ALLOWED), "usable"),
            (
                None,
                &format!(" for {stacks}: every node it needs is present, current and allowed"),
            ),
        ])
    } else {
        out.parts(&[
            (None, "result: "),
            (Some(style::DENIED), "NOT usable"),
            (None, &format!(" for {stacks} (see the problems above)")),
        ])
    }
}
