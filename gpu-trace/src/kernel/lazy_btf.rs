//! The kernel's BTF for aya, read when first needed and then kept: fexit on
//! the device check and fexit on the open function both need it,
//! and it is 5 MB to parse.

use anyhow::Context;
use aya::Btf;

#[derive(Default)]
pub struct LazyBtf(Option<Result<Btf, String>>);

impl LazyBtf {
    pub fn get(&mut self) -> anyhow::Result<&Btf> {
        let read = self.0.get_or_insert_with(|| {
            Btf::from_sys_fs()
                .context("reading the kernel's BTF (/sys/kernel/btf/vmlinux)")
                .map_err(|e| format!("{e:#}"))
        });
        read.as_ref().map_err(|e| anyhow::anyhow!("{e}"))
    }
}
