//! `GPU_TRACE_BENCH_CUT`: the benchmark's breakdown of what a denial costs
//! our programs. Named, it makes the device hook stop after that step
//! (gpu_trace_common::bench_cut), so that the kernel's run-time statistics
//! time the steps one by one; what the hook sees past the cut is not
//! reported, and the ready line's notes say so. Only with the device hook
//! alone (`--opens none`): an open route's exits report on their own,
//! and a cut would stop some of their reports and not others.

use gpu_trace_common::bench_cut;

use crate::kernel::open_route::OpensChoice;

pub const ENV: &str = "GPU_TRACE_BENCH_CUT";

/// The cut the environment names (`bench_cut::NONE` when unset), and a
/// note for the ready line when there is one.
pub fn from_env(opens: OpensChoice, notes: &mut Vec<String>) -> anyhow::Result<u8> {
    let Some(value) = std::env::var_os(ENV) else {
        return Ok(bench_cut::NONE);
    };
    let value = value.to_string_lossy();
    let cut = by_name(&value)?;
    anyhow::ensure!(
        opens == OpensChoice::None,
        "{ENV} cuts the device hook's own report: it needs the device hook alone (--device-hook-only)"
    );
    notes.push(format!(
        "{ENV}={value}: the device hook stops after its {value} step (a benchmark's breakdown); \
         what it sees is not reported"
    ));
    Ok(cut)
}

fn by_name(name: &str) -> anyhow::Result<u8> {
    bench_cut::NAMES
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, cut)| *cut)
        .ok_or_else(|| {
            let names: Vec<&str> = bench_cut::NAMES.iter().map(|(name, _)| *name).collect();
            anyhow::anyhow!("{ENV}={name:?}: no such step (one of {})", names.join(", "))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_is_found_by_its_name_and_an_unknown_one_is_an_error() {
        for (name, cut) in bench_cut::NAMES {
            assert_eq!(by_name(name).unwrap(), cut);
        }
        let error = by_name("lookup").unwrap_err().to_string();
        assert!(
            error.starts_with(
                "GPU_TRACE_BENCH_CUT=\"lookup\": no such step (one of entry, verdict,"
            ),
            "{error}"
        );
    }
}
