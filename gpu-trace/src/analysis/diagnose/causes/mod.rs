//! The catalogue of root causes, one file each, in the order they are
//! tried: the first that fits is the one named. docs/root-causes.md lists
//! them in this order, and a test below keeps the two together.

use crate::{
    analysis::diagnose::{
        facts::{Context, Facts},
        phrasing::Finding,
        symptoms,
    },
    model::diagnosis::{Cause, Diagnosis},
};

mod ancestor_policy;
mod device_allow_name_unresolved;
mod device_denied;
mod driver_not_loaded;
mod dynamic_major_not_allowed;
mod file_permissions;
mod lsm_denied;
mod no_cgroups_hook;
mod node_missing;
mod not_allocated;
mod prelude;
mod rules_rewritten;
mod stacked_programs;
mod stale_cdi_spec;
mod stale_major;
mod v1_devices_list;

/// A cause and how to tell whether it fits; `find` checks the verdicts it
/// applies to itself.
struct Rule {
    cause: Cause,
    find: fn(&Facts, &Context) -> Option<Finding>,
}

/// The priority. The four failures that are not a BPF policy's refusal
/// come first (each fits one verdict only; a GPU the pod was not given
/// before the v1 list that refused it, as its denial is expected), then
/// the BPF denials from the most specific story to the most general.
const CAUSES: [Rule; 15] = [
    rule(Cause::FilePermissions, file_permissions::find),
    rule(Cause::NodeMissing, node_missing::find),
    rule(Cause::NotAllocated, not_allocated::find),
    rule(Cause::V1DevicesList, v1_devices_list::find),
    rule(Cause::LsmDenied, lsm_denied::find),
    rule(Cause::RulesRewritten, rules_rewritten::find),
    rule(Cause::StaleCdiSpec, stale_cdi_spec::find),
    rule(
        Cause::DeviceAllowNameUnresolved,
        device_allow_name_unresolved::find,
    ),
    rule(Cause::StaleMajor, stale_major::find),
    rule(Cause::DriverNotLoaded, driver_not_loaded::find),
    rule(Cause::AncestorPolicy, ancestor_policy::find),
    rule(Cause::NoCgroupsHook, no_cgroups_hook::find),
    rule(Cause::StackedPrograms, stacked_programs::find),
    rule(
        Cause::DynamicMajorNotAllowed,
        dynamic_major_not_allowed::find,
    ),
    rule(Cause::DeviceDenied, device_denied::find),
];

const fn rule(cause: Cause, find: fn(&Facts, &Context) -> Option<Finding>) -> Rule {
    Rule { cause, find }
}

/// The first cause in the table that fits; None for an access that is fine.
pub(super) fn first_fitting(facts: &Facts, cx: &Context) -> Option<Diagnosis> {
    CAUSES.iter().find_map(|rule| {
        let mut finding = (rule.find)(facts, cx)?;
        if let Some(symptom) = facts.role.and_then(symptoms::of) {
            finding.explanation =
                format!("{}. {symptom}", finding.explanation.trim_end_matches('.'));
        }
        Some(finding.into_diagnosis(rule.cause))
    })
}

#[cfg(test)]
mod tests {
    use super::CAUSES;

    /// The names in the first column of docs/root-causes.md's catalogue.
    fn documented_causes() -> Vec<String> {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/root-causes.md"),
        )
        .expect("read docs/root-causes.md");
        let table = doc
            .split("\n\n")
            .find(|block| block.starts_with("| cause |"));
        table
            .expect("the catalogue's table")
            .lines()
            .skip(2)
            .map(|row| {
                row.split('|')
                    .nth(1)
                    .expect("a first column")
                    .trim()
                    .trim_matches('`')
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn the_documented_catalogue_is_the_table_in_its_order() {
        let in_code: Vec<&str> = CAUSES.iter().map(|rule| rule.cause.id()).collect();
        assert_eq!(documented_causes(), in_code);
    }

    #[test]
    fn each_cause_has_one_rule() {
        let mut ids: Vec<&str> = CAUSES.iter().map(|rule| rule.cause.id()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), CAUSES.len());
    }
}
