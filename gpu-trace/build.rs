//! Builds gpu-trace-ebpf for bpfel-unknown-none and leaves the objects in
//! OUT_DIR for `include_bytes_aligned!`.
//!
//! The kernel programs need Debian's rustc-web (it ships a precompiled `core`
//! for the BPF target) and bpf-linker built against the same LLVM; `cargo
//! xtask setup` installs both. See docs/building.md.
//!
//! `GPU_TRACE_BUILD_SKIP=1` skips the kernel programs: the objects are left
//! empty, so unit tests and clippy run without the BPF toolchain, and the
//! binary says at start-up that it cannot trace (like aya-build's
//! `AYA_BUILD_SKIP`).

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::{exit, Command},
};

const BPF_RUSTC: &str = "/usr/bin/rustc";
const TARGET: &str = "bpfel-unknown-none";
const OBJECTS: [&str; 1] = ["gpu-trace-tracer"];
/// Set (to anything but "0" or "") to build without the kernel programs.
const SKIP_ENV: &str = "GPU_TRACE_BUILD_SKIP";

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest_dir
        .parent()
        .expect("gpu-trace lives in the workspace");
    let ebpf_crate = workspace.join("gpu-trace-ebpf");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));

    for watched in [
        "gpu-trace-ebpf/src",
        "gpu-trace-ebpf/Cargo.toml",
        "gpu-trace-common/src",
        "Cargo.lock",
    ] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }

    println!("cargo:rerun-if-env-changed={SKIP_ENV}");
    println!("cargo:rustc-env=GPU_TRACE_COMMIT={}", commit(workspace));
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join(".git/HEAD").display()
    );

    if env::var(SKIP_ENV).is_ok_and(|v| !v.is_empty() && v != "0") {
        println!("cargo:warning={SKIP_ENV} is set: gpu-trace is built without its kernel programs and cannot trace");
        println!("cargo:rustc-env=GPU_TRACE_EBPF_SKIPPED=1");
        for object in OBJECTS {
            fs::write(out_dir.join(object), b"")
                .unwrap_or_else(|e| fail(&format!("writing an empty {object}: {e}")));
        }
        return;
    }
    build_ebpf(workspace, &ebpf_crate, &out_dir);
}

/// For --version and the build-info metric.
fn commit(workspace: &Path) -> String {
    Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(workspace)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// Builds gpu-trace-ebpf with Debian's compiler and copies its objects to `out_dir`.
fn build_ebpf(workspace: &Path, ebpf_crate: &Path, out_dir: &Path) {
    if !Path::new(BPF_RUSTC).exists() {
        fail(&format!("{BPF_RUSTC} (Debian's rustc-web) is missing"));
    }
    // A separate target dir: the outer cargo holds the lock on its own.
    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"))
        .join("ebpf");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(ebpf_crate)
        .args([
            "build",
            "--release",
            "--package",
            "gpu-trace-ebpf",
            "--bins",
            "--target",
            TARGET,
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    // What the outer build set for its own compiler must not leak in.
    for var in [
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
    ] {
        command.env_remove(var);
    }
    command
        .env("RUSTC", BPF_RUSTC)
        // aya-ebpf uses a few nightly features; Debian's stable compiler allows them with this.
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_TARGET_BPFEL_UNKNOWN_NONE_LINKER", "bpf-linker")
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            [
                "-C",
                "debuginfo=2",
                "-C",
                "link-arg=--btf",
                "-C",
                "panic=abort",
            ]
            .join("\x1f"),
        );
    let status = command
        .status()
        .unwrap_or_else(|e| fail(&format!("running cargo for gpu-trace-ebpf: {e}")));
    if !status.success() {
        fail("building gpu-trace-ebpf failed (see above)");
    }
    for object in OBJECTS {
        let built = target_dir.join(TARGET).join("release").join(object);
        fs::copy(&built, out_dir.join(object))
            .unwrap_or_else(|e| fail(&format!("copying {}: {e}", built.display())));
    }
}

fn fail(why: &str) -> ! {
    eprintln!("error: {why}");
    eprintln!("The eBPF toolchain is installed by `cargo xtask setup` (Debian's rustc-web, libstd-rust-web-dev-bpf, llvm-22-dev, bpf-linker 0.13.0).");
    exit(1)
}
