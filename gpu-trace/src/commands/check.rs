//! `gpu-trace check`: before anything fails, which NVIDIA devices a cgroup
//! may open, decided by evaluating the device policies actually in force on
//! it, plus node, major and module sanity.

use std::{
    io::{self, Write},
    path::{Path, PathBuf},
};

use anyhow::Context;

use crate::{
    analysis::{
        access_check::{
            cuda_usable, mark_allocations, missing_char_links, problems, same_root, view, View,
        },
        cdi_check::stale_entries,
        neighbour_check::neighbour_nodes,
        policy_age::written_after_start,
        policy_writer::writer_of_program,
        vendor_check::{vendor_sets, VendorSet},
    },
    cgroup::{
        first_process::first_process, identity::identify, resolver::CgroupResolver,
        target::check_target,
    },
    cli::CheckArgs,
    host::{
        cdi_specs::{read_spec_nodes, DEFAULT_CDI_DIRS},
        nvidia_gpus::NvidiaGpus,
        pod_resources::{self, ContainerAllocation, ContainerKey},
        preflight::check_host,
        proc_devices::{nvidia_uvm_loaded, CharMajors},
    },
    kernel::programs_in_force::{CgroupPolicy, ProgramCache},
    model::{container::Container, exit_status, node::NVIDIA_FRONTEND_MAJOR, vendor::Vendor},
    render::{
        check_report::{write_human, CdiReport, CheckReport, DevicesListReport},
        output::Format,
    },
    runtime::NameSources,
    text::{json, shell_word::prose, style},
};

/// Returns the exit status: 0 usable, 1 not (2, on error, is the caller's).
pub fn run(args: CheckArgs) -> anyhow::Result<u8> {
    let host = check_host()?;
    let mount = &host.cgroup2_mount;
    let mut cgroups = CgroupResolver::new(mount);
    let (dir, pid) = check_target(
        mount,
        &mut cgroups,
        args.cgroup.as_deref(),
        args.pid,
        args.container.as_deref(),
        args.pod.as_ref(),
    )?;
    let relative = Path::new("/").join(dir.strip_prefix(mount).unwrap_or(&dir));
    let majors = CharMajors::read().context("reading /proc/devices")?;
    let container = identify(&relative.to_string_lossy(), &NameSources::default());
    let policy = policy_with_writers(mount, &relative, &container)?;
    let v1 = match pid {
        Some(pid) => crate::host::proc_pid::devices_list_of(pid)
            .with_context(|| format!("reading the v1 devices cgroup of pid {pid}"))?,
        None => None,
    };

    // The nodes as the host sees them, and as the target does when its
    // root is another.
    let target_root = pid
        .map(|p| PathBuf::from(format!("/proc/{p}/root")))
        .filter(|r| !same_root(r));
    let mut views: Vec<View> = std::iter::once(("host", Path::new("/")))
        .chain(target_root.as_deref().map(|root| ("target", root)))
        .map(|(name, root)| view(name, root, &policy, v1.as_ref(), &majors))
        .collect();
    let mut allocation_warning = None;
    if let Some(socket) = args.pod_resources.socket() {
        match allocation_of_container(&socket, &container) {
            Ok(Some(allocation)) => mark_allocations(&mut views, &NvidiaGpus::read(), &allocation),
            Ok(None) => {}
            Err(e) => {
                allocation_warning = Some(format!(
                "the kubelet's PodResources API: {e:#}; GPUs are not told apart as allocated or not"
            ))
            }
        }
    }
    let target_view = views.last().expect("the host view is always there");
    let nvidia_uvm_loaded = nvidia_uvm_loaded();
    let vendors = vendor_sets(
        target_root.as_deref().unwrap_or(Path::new("/")),
        &policy,
        v1.as_ref(),
        &majors,
        &args.vendors,
    );
    let neighbours = neighbour_nodes(
        target_root.as_deref().unwrap_or(Path::new("/")),
        &policy,
        v1.as_ref(),
        &majors,
    );
    let nvidia_present = majors.driver(NVIDIA_FRONTEND_MAJOR).is_some()
        || views.iter().any(|v| !v.nodes.is_empty())
        || nvidia_uvm_loaded;
    let judge_nvidia = judges_nvidia(&args.vendors, nvidia_present, &vendors);
    let mut problems = if judge_nvidia {
        problems(&views, nvidia_uvm_loaded)
    } else {
        Vec::new()
    };
    problems.extend(vendor_problems(&vendors));
    let cdi = cdi_report(&args.cdi_dirs, &majors);
    let mut warnings = warnings(&views[0], &cdi);
    warnings.extend(allocation_warning);
    let usable =
        (!judge_nvidia || cuda_usable(target_view)) && vendors.iter().all(|set| set.usable);
    let report = CheckReport {
        container,
        cgroup: relative.to_string_lossy().into_owned(),
        pid,
        programs: policy.programs.clone(),
        written_after_start: written_after_start(&policy.programs, first_process(&dir)),
        devices_list: v1.map(|l| DevicesListReport {
            cgroup: l.cgroup,
            lines: l.lines,
        }),
        views,
        nvidia_uvm_loaded,
        usable,
        problems,
        warnings,
        cdi,
        stacks: stacks(judge_nvidia, &vendors),
        vendors,
        neighbours,
    };
    print(&report, args.format)?;
    Ok(if usable {
        exit_status::OK
    } else {
        exit_status::FAILURE
    })
}

/// What the kubelet lists for a Kubernetes container; None for another
/// container, or one the kubelet does not list.
fn allocation_of_container(
    socket: &Path,
    container: &Container,
) -> anyhow::Result<Option<ContainerAllocation>> {
    let (Some(namespace), Some(pod), Some(name)) =
        (&container.namespace, &container.pod, &container.name)
    else {
        return Ok(None);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let allocations = runtime.block_on(pod_resources::list(socket))?;
    let key = ContainerKey {
        namespace: namespace.clone(),
        pod: pod.clone(),
        container: name.clone(),
    };
    Ok(allocations.by_container.get(&key).cloned())
}

/// NVIDIA's set is judged when asked for, or when present, or when no
/// other vendor is (a host with no accelerator fails on CUDA's nodes).
fn judges_nvidia(asked: &[Vendor], nvidia_present: bool, others: &[VendorSet]) -> bool {
    if asked.is_empty() {
        nvidia_present || others.is_empty()
    } else {
        asked.contains(&Vendor::Nvidia)
    }
}

/// The stacks judged: CUDA's when NVIDIA's set is, then each vendor's.
fn stacks(judge_nvidia: bool, vendors: &[VendorSet]) -> Vec<&'static str> {
    judge_nvidia
        .then_some("CUDA")
        .into_iter()
        .chain(vendors.iter().map(|set| set.stack))
        .collect()
}

/// What each vendor's unusable set lacks.
fn vendor_problems(vendors: &[VendorSet]) -> impl Iterator<Item = String> + '_ {
    vendors.iter().filter(|s| !s.usable).flat_map(|set| {
        set.missing
            .iter()
            .map(|missing| format!("{} ({}): {missing}", set.vendor.name(), set.stack))
    })
}

fn print(report: &CheckReport, format: Format) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match format {
        Format::Json => writeln!(out, "{}", json::to_string(report)),
        Format::Human => write_human(&mut out, report, style::paints(&io::stdout())),
    }
}

/// The programs in force on the cgroup, each with who wrote it.
fn policy_with_writers(
    mount: &Path,
    relative: &Path,
    container: &Container,
) -> anyhow::Result<CgroupPolicy> {
    let mut policy = CgroupPolicy::read(mount, relative, &mut ProgramCache::default())?;
    for p in &mut policy.programs {
        p.writer = Some(writer_of_program(
            p.id,
            &p.name,
            &p.attached_at,
            &p.loaded_at,
            p.loaded_boot_ns,
            container,
        ));
    }
    Ok(policy)
}

/// What is worth knowing but does not make the nodes unusable: missing
/// /dev/char links (systemd's reload needs them), CDI specs stale or unread.
fn warnings(host_view: &View, cdi: &CdiReport) -> Vec<String> {
    let mut warnings = missing_char_links(host_view, Path::new("/dev/char"));
    warnings.extend(cdi.stale.iter().map(|e| {
        format!(
            "stale CDI spec {} ({}): {}; {}",
            prose(&e.file),
            prose(&e.device),
            e.problem,
            e.fix
        )
    }));
    warnings.extend(
        cdi.unreadable
            .iter()
            .map(|u| format!("CDI spec not read: {}", prose(u))),
    );
    warnings
}

/// The CDI specs in `dirs` (the default directories when none), checked
/// against the host's nodes and /proc/devices.
fn cdi_report(dirs: &[PathBuf], majors: &CharMajors) -> CdiReport {
    let dirs: Vec<PathBuf> = if dirs.is_empty() {
        DEFAULT_CDI_DIRS.iter().map(PathBuf::from).collect()
    } else {
        dirs.to_vec()
    };
    let (nodes, unreadable) = read_spec_nodes(&dirs);
    CdiReport {
        dirs: dirs.iter().map(|d| d.display().to_string()).collect(),
        unreadable,
        stale: stale_entries(&nodes, majors),
    }
}
