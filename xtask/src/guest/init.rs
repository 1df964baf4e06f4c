//! What every guest's init shares: the mounts of the busybox guests'
//! PID 1, and the shell functions that run the recipe's steps and report
//! their statuses for `judge`.

/// The start of PID 1 in the busybox guests (vm-test's and the bench's):
/// the file systems the kernel tests and gpu-trace need, pure cgroup2.
pub(crate) const GUEST_MOUNTS: &str = r#"export PATH=/bin HOME=/tmp NO_COLOR=1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# Pseudo-terminals, for the colour test's `script`.
mkdir -p /dev/pts
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
# Pure cgroup2, as on Proxmox, Debian and Ubuntu hosts.
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
# The metrics test serves HTTP on 127.0.0.1.
ip link set lo up
"#;

/// Shell functions: `step NAME CMD...` runs one step and says so on the
/// console, with `prefix` and the guest's uptime around it; `report` writes
/// every step's status after `marker` to the second serial port.
pub(crate) fn step_functions(prefix: &str, marker: &str) -> String {
    format!(
        r#"result=""
step() {{
    name=$1
    shift
    echo "{prefix}step $name: $*"
    started=$(cut -d' ' -f1 /proc/uptime)
    "$@"
    status=$?
    echo "{prefix}step $name exited $status ($started -> $(cut -d' ' -f1 /proc/uptime) s)"
    result="$result $name=$status"
}}
report() {{
    echo "{marker}$result" >/dev/ttyS1
}}
"#
    )
}
