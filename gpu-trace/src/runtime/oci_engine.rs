//! What the engines that drive an OCI runtime share (Docker, containerd,
//! CRI-O, podman): their id format, how prose shows the id, and what keeps
//! a running container's device rules.

use crate::model::container::Runtime;

/// The ids Docker, containerd, CRI-O and podman give: 64 lowercase hex digits.
pub fn is_full_container_id(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// "docker 3f2a9c1b0d4e": the first 12 characters of the id, as
/// `docker ps` shows it.
pub(super) fn label(runtime: Runtime, id: &str) -> String {
    format!("{} {}", runtime.label(), id.get(..12).unwrap_or(id))
}

/// Devices passed as device specs survive systemd's reload; rules added
/// by hand do not.
pub(super) fn keep_rules() -> Vec<String> {
    vec![
        "give the container its GPUs as devices (`--gpus all` / `--device`, or CDI specs) so reloads keep them".to_string(),
        "or create the /dev/char symlinks systemd needs to keep the rules: `nvidia-ctk system create-dev-char-symlinks --create-all`".to_string(),
        "or let the engine manage cgroups itself: the cgroupfs driver (dockerd `\"exec-opts\": [\"native.cgroupdriver=cgroupfs\"]`, containerd `SystemdCgroup = false`), whose rules systemd never re-applies".to_string(),
        "restarting the container helps only until the next `systemctl daemon-reload`".to_string(),
    ]
}
