//! `cargo xtask bench --only guests`: the open-overhead benchmark inside the
//! matrix's kernels, where watch's default open route is fexit on the open function (this
//! build machine refuses trampolines, so only a guest can measure it).
//!
//! Each kernel boots in qemu with a busybox initramfs holding the static
//! bench binary, gpu-trace, a static open loop and strace. The guest runs
//! `bench --guest` and writes its JSON to the second serial port. Under
//! emulation absolute times mean little; ratios paired within one guest run
//! are what count.

use std::{
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{bail, ensure, Context};
use clap::ValueEnum;
use serde_json::Value;

use crate::{
    apt_install,
    guest::{
        binaries::{build_static, cargo_executable, static_c_program},
        init::GUEST_MOUNTS,
        initramfs::{
            copy_with_libraries, fresh_root, install_busybox, newer_than_all, pack_initramfs_tree,
            write_if_changed, BUSYBOX,
        },
        judge::{kernel_complaints, print_console_tail},
        kernels::{install_qemu, kernel_image, Series},
        qemu::Machine,
        vm_dir,
    },
};

/// How long one kernel's bench may take from boot to power-off.
const TIMEOUT: Duration = Duration::from_secs(1800);
/// The lines around the guest's JSON on its second serial port.
const JSON_BEGIN: &str = "gpu-trace-bench-json";
const JSON_END: &str = "gpu-trace-bench-end";

/// PID 1 of the bench guest, after GUEST_MOUNTS. @ARGS@ becomes the bench's
/// own options (`--quick`, `--only repeats`).
const INIT_TEMPLATE: &str = r#"
echo "gpu-trace-bench: kernel $(uname -r)"
GPU_TRACE_BIN=/bin/gpu-trace bench --guest @ARGS@ --open-loop /bin/open_loop --json /tmp/bench.json
status=$?
echo "gpu-trace-bench: bench exited $status"
if [ $status -eq 0 ]; then
    { echo gpu-trace-bench-json; cat /tmp/bench.json; echo; echo gpu-trace-bench-end; } >/dev/ttyS1
fi
poweroff -f
"#;

/// What the bench runs in each guest.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum GuestGroups {
    /// The open overhead and the repeated denial.
    All,
    /// The repeated denial alone (a third of the time), stored beside the
    /// guest's open overhead from an earlier run, with its own date.
    RepeatsOnly,
}

/// Boots each kernel (all three when `series` is empty), runs the bench in
/// it, and stores each guest's results under `guests` in `json`, keeping
/// what else the file holds. Fails when any kernel gave no results.
pub fn vm_bench(
    series: &[Series],
    quick: bool,
    groups: GuestGroups,
    json: &Path,
) -> anyhow::Result<()> {
    let series = if series.is_empty() {
        Series::value_variants()
    } else {
        series
    };
    apt_install(&["busybox-static", "strace"])?;
    install_qemu()?;
    let initramfs = bench_initramfs(quick, groups)?;
    let mut results: Value = match fs::read_to_string(json) {
        Ok(text) => serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", json.display()))?,
        Err(_) => serde_json::json!({}),
    };
    let mut failed = Vec::new();
    for &s in series {
        match boot(s, &kernel_image(s)?, &initramfs) {
            Ok(guest) if groups == GuestGroups::RepeatsOnly => {
                let mut repeated = guest["repeated_denial"].clone();
                repeated["date"] = guest["date"].clone();
                results["guests"][s.name()]["repeated_denial"] = repeated;
            }
            Ok(guest) => results["guests"][s.name()] = guest,
            Err(e) => {
                eprintln!("xtask: bench in the {} guest: {e:#}", s.name());
                failed.push(s.name());
            }
        }
    }
    fs::write(json, serde_json::to_string_pretty(&results)?)?;
    print_summary(&results["guests"]);
    println!("\nresults written to {}", json.display());
    ensure!(
        failed.is_empty(),
        "no bench results from {}",
        failed.join(", ")
    );
    Ok(())
}

/// The guest: busybox, strace with its libraries, and the three binaries.
/// Packed again only when one of them changed.
fn bench_initramfs(quick: bool, groups: GuestGroups) -> anyhow::Result<PathBuf> {
    let dir = vm_dir().join("bench");
    fs::create_dir_all(&dir)?;
    let messages = build_static(&["bench", "--package", "gpu-trace", "--bench", "gpu_trace"])?;
    let bench = cargo_executable(&messages, "bench", "gpu_trace")?;
    let gpu_trace = cargo_executable(&messages, "bin", "gpu-trace")?;
    let open_loop = static_open_loop(&dir)?;
    let init = dir.join("init");
    let script = format!(
        "#!/bin/sh\n# PID 1 of the gpu-trace bench guest, written by xtask/src/vm_bench.rs.\n{GUEST_MOUNTS}{}",
        INIT_TEMPLATE.replace("@ARGS@", &guest_bench_args(quick, groups))
    );
    write_if_changed(&init, &script)?;
    let initramfs = dir.join("initramfs.cpio.gz");
    let xtask = std::env::current_exe().context("finding xtask's own binary")?;
    let strace = Path::new("/usr/bin/strace");
    let inputs = [
        Path::new(BUSYBOX),
        &bench,
        &gpu_trace,
        &open_loop,
        &init,
        &xtask,
        strace,
    ];
    if newer_than_all(&initramfs, &inputs)? {
        return Ok(initramfs);
    }
    let root = dir.join("initramfs");
    fresh_root(&root, &["bin", "dev", "proc", "sys", "tmp"])?;
    install_busybox(&root)?;
    copy_with_libraries(strace, &root)?;
    fs::copy(&bench, root.join("bin/bench"))?;
    fs::copy(&gpu_trace, root.join("bin/gpu-trace"))?;
    fs::copy(&open_loop, root.join("bin/open_loop"))?;
    pack_initramfs_tree(&root, &init, &initramfs)?;
    Ok(initramfs)
}

/// The bench's options inside the guest.
fn guest_bench_args(quick: bool, groups: GuestGroups) -> String {
    let mut args = Vec::new();
    if quick {
        args.push("--quick");
    }
    if groups == GuestGroups::RepeatsOnly {
        args.extend(["--only", "repeats"]);
    }
    args.join(" ")
}

/// The bench's C open loop, linked statically: the guest has no compiler.
fn static_open_loop(dir: &Path) -> anyhow::Result<PathBuf> {
    static_c_program("gpu-trace/benches/open_loop.c", &dir.join("open_loop"), &[])
}

/// One kernel: boot, let the bench run, and take its JSON from the second
/// serial port. A kernel that warned on its console gives no results.
fn boot(series: Series, vmlinuz: &Path, initramfs: &Path) -> anyhow::Result<Value> {
    let run = Machine::busybox(vmlinuz, initramfs).boot(
        &vm_dir().join("bench").join(series.name()),
        &format!("[bench {}] ", series.name()),
        TIMEOUT,
    )?;
    eprintln!(
        "xtask: {} guest done in {:.0} s",
        series.name(),
        run.seconds
    );
    let complaints = kernel_complaints(&run.console);
    let results = guest_json(&run.result);
    let killed = run.ending.problem();
    if killed.is_some() || !complaints.is_empty() || results.is_none() {
        print_console_tail(&run.console, &run.console_log);
    }
    if let Some(problem) = killed {
        bail!(problem);
    }
    ensure!(complaints.is_empty(), "{}", complaints.join("; "));
    results.context("the guest wrote no results (the bench failed; see its console)")
}

/// The JSON between the guest's markers, if it wrote any.
fn guest_json(output: &str) -> Option<Value> {
    let start = output.find(JSON_BEGIN)? + JSON_BEGIN.len();
    let len = output[start..].find(JSON_END)?;
    serde_json::from_str(&output[start..start + len]).ok()
}

/// Per kernel and target: the default watch's ratio beside the full
/// picture, the physical limit and strace, and the programs' own cost.
fn print_summary(guests: &Value) {
    println!("\nInside the matrix's guests (qemu, TCG): median ratio to a paired baseline");
    println!(
        "  {:<6} {:<26} {:>8} {:>8} {:>8} {:>8} {:>8}  {:>9} {:>9}",
        "kernel", "target", "auto", "full", "tracepts", "none", "strace", "bpf auto", "bpf tp"
    );
    for (kernel, results) in guests.as_object().into_iter().flatten() {
        for row in results["open_overhead"].as_array().into_iter().flatten() {
            let ratio = |prefix: &str| {
                row["configs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["config"].as_str().is_some_and(|n| n.starts_with(prefix)))
                    .and_then(|c| c["ratio"].as_f64())
                    .map_or("-".to_string(), |r| format!("x{r:.3}"))
            };
            let bpf = |key: &str| row[key]["total"].as_f64().unwrap_or(0.0);
            println!(
                "  {:<6} {:<26} {:>8} {:>8} {:>8} {:>8} {:>8}  {:>6.0} ns {:>6.0} ns",
                kernel,
                row["target"].as_str().unwrap_or(""),
                ratio("gpu-trace watch > /dev/null (--opens auto)"),
                ratio("gpu-trace watch --opens full"),
                ratio("gpu-trace watch --opens tracepoints"),
                ratio("gpu-trace watch --opens none"),
                ratio("strace"),
                bpf("in_kernel_ns_per_open"),
                bpf("in_kernel_ns_per_open_tracepoints"),
            );
        }
    }
    println!("\nA repeated denial in the guests (default --fold 5s): our programs per repeat, per first sighting; two producers' flood ratio");
    for (kernel, results) in guests.as_object().into_iter().flatten() {
        let repeated = &results["repeated_denial"];
        let total = |key: &str| repeated[key]["total"].as_f64().unwrap_or(0.0);
        let flood = repeated["flood"][1]["ratio"]
            .as_f64()
            .map_or("-".to_string(), |r| format!("x{r:.3}"));
        println!(
            "  {:<6} {:>6.0} ns {:>6.0} ns  {:>8}",
            kernel,
            total("in_kernel_ns_per_repeat"),
            total("in_kernel_ns_per_first_sighting"),
            flood
        );
    }
}
