//! `file-permissions`: EACCES before the device check, from the node's file
//! mode or group. Not the device policy.

use super::prelude::*;
use crate::analysis::diagnose::host::NodeGroup;

pub(super) fn find(facts: &Facts, cx: &Context) -> Option<Finding> {
    if facts.verdict != Verdict::FailedBeforeDeviceCheck || facts.errno() != Some(libc::EACCES) {
        return None;
    }
    let path = facts.path_text();
    let shown = prose(&path);
    let uid = facts.uid;
    let path_word = command_word(&path, NODE_PATH);
    let group = facts
        .process
        .zip(facts.path.as_deref())
        .and_then(|(process, path)| (cx.host.node_group)(process, path));
    // Its groups are read from /proc after the event: a process gone by
    // then (its pid perhaps another's) is not read, and the line says so.
    let gone = group.is_none() && facts.process.is_some_and(|p| !(cx.host.still_there)(p));
    Some(match group.filter(lacks_the_only_group) {
        Some(g) => Finding {
            explanation: format!(
                "{shown} refused uid {uid} with EACCES: it is mode {:o}, open to group {} only, and the process is not in that group (its groups: {}); this is not the device policy",
                g.mode & 0o7777,
                g.gid,
                g.process_groups
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            fix: vec![
                format!(
                    "give the container group {}: `--group-add {}` (Docker, podman), `securityContext.supplementalGroups: [{}]` (Kubernetes); with a user namespace, map that host gid into it",
                    g.gid, g.gid, g.gid
                ),
                format!("or check `ls -ln -- {path_word}`: the driver's NVreg_DeviceFileGID / NVreg_DeviceFileMode set the group and mode"),
            ],
        },
        None => Finding {
            explanation: format!(
                "{shown} refused uid {uid} with EACCES: its file mode or group does not let this user in; this is not the device policy{}",
                if gone { " (the process exited before its groups could be read, so which group it lacked is not known)" } else { "" }
            ),
            fix: vec![
                format!("check `ls -l -- {path_word}`: NVIDIA's nodes are normally crw-rw-rw-"),
                "add the user to the node's group (video or render), or set the driver's NVreg_DeviceFileMode / NVreg_DeviceFileGID module options".to_string(),
            ],
        },
    })
}

/// The group may open it, others may not, and the process is not in it.
fn lacks_the_only_group(g: &NodeGroup) -> bool {
    let group_rw = g.mode & 0o060 == 0o060;
    let other_rw = g.mode & 0o006 == 0o006;
    group_rw && !other_rw && !g.process_groups.contains(&g.gid)
}

#[cfg(test)]
mod tests {
    use crate::{
        analysis::diagnose::{host::NodeGroup, testing::*},
        model::record::Record,
        scenario::pasted::assert_paste_safe,
    };

    /// A render node of mode 660 open to group 109, opened by a process
    /// in `process_groups`.
    fn open_to_group_109(process_groups: Vec<u32>) -> Option<NodeGroup> {
        Some(NodeGroup {
            mode: 0o20660,
            gid: 109,
            process_groups,
        })
    }

    /// An open of that node from a Docker container, refused by its mode.
    fn refused_by_the_nodes_mode() -> Record {
        failed_before_check(
            "/system.slice/docker-ab.scope",
            "/dev/dri/renderD128",
            226,
            128,
            libc::EACCES,
        )
    }

    #[test]
    fn a_node_open_to_a_group_the_process_lacks_names_the_group() {
        let mut d = Diagnoser::default();
        d.host.node_group = |_, _| open_to_group_109(vec![1000, 44]);
        let diag = diagnosed_as(&mut d, &refused_by_the_nodes_mode(), Cause::FilePermissions);
        assert_has(&diag.explanation, "mode 660, open to group 109 only");
        assert_starts(
            &diag.hint,
            "give the container group 109: `--group-add 109`",
        );
    }

    #[test]
    fn a_process_gone_before_its_groups_are_read_is_said_so_not_guessed() {
        let mut d = Diagnoser::default();
        d.host.node_group = |_, _| None;
        d.host.still_there = |_| false;
        let diag = diagnose(&mut d, &refused_by_the_nodes_mode()).expect("diagnosis");
        assert_has(
            &diag.explanation,
            "the process exited before its groups could be read",
        );
        assert_starts(&diag.hint, "check `ls -l");
        d.host.still_there = |_| true;
        let mut other = refused_by_the_nodes_mode();
        other.access.pid += 1;
        let diag = diagnose(&mut d, &other).expect("diagnosis");
        assert!(!diag.explanation.contains("exited"), "{}", diag.explanation);
    }

    #[test]
    fn a_process_in_the_nodes_group_already_gets_the_general_advice() {
        let mut d = Diagnoser::default();
        d.host.node_group = |_, _| open_to_group_109(vec![109]);
        let diag = diagnose(&mut d, &refused_by_the_nodes_mode()).expect("diagnosis");
        assert_starts(&diag.hint, "check `ls -l");
    }

    #[test]
    fn eacces_before_the_device_check_is_not_a_policy_problem() {
        let eacces = failed_before_check("/", "/dev/nvidia0", 0, 0, libc::EACCES);
        let diag = diagnosis_naming(&eacces, Cause::FilePermissions);
        assert_has(&diag.explanation, "not the device policy");
    }

    #[test]
    fn hostile_paths_reach_the_ls_hint_as_literal_words() {
        for name in HOSTILE {
            let path = format!("/tmp/{name}/nvidia-uvm");
            let eacces = failed_before_check("/", &path, 0, 0, libc::EACCES);
            assert_paste_safe(&diagnosis_of(&eacces).hint, &path);
        }
    }
}
