//! A cgroup no runtime claims: its policy is whatever manages that cgroup.

use crate::{
    model::container::{Container, Runtime},
    runtime::{ContainerRuntime, DeviceToAllow, PathStep},
    text::shell_word::prose,
};

pub struct PlainCgroup;

impl ContainerRuntime for PlainCgroup {
    fn runtime(&self) -> Runtime {
        Runtime::Cgroup
    }

    /// What no runtime recognises, not a pattern of its own.
    fn recognise(&self, _: &PathStep) -> Option<String> {
        None
    }

    fn label(&self, id: &str) -> String {
        format!("cgroup {id}")
    }

    fn is_container(&self) -> bool {
        false
    }

    fn allow_device(&self, container: &Container, device: &DeviceToAllow) -> Vec<String> {
        vec![format!(
            "allow {} rwm in the device policy attached to {} or an ancestor (`bpftool cgroup tree` lists it), i.e. in whatever manages that cgroup",
            device.rule(),
            prose(&container.cgroup)
        )]
    }
}
