//! Which properties of a systemd unit were set at a given moment, from the
//! drop-ins systemd writes when asked to set them (SetUnitProperties over
//! D-Bus, as `systemctl set-property` and runc's update through the
//! systemd cgroup driver ask): `50-<Property>.conf` in the unit's
//! `.d` folder, under /run/systemd/transient for a transient unit (every
//! container's scope), /run/systemd/system.control for a runtime-only
//! change, /etc/systemd/system.control for a lasting one. Setting a
//! property makes systemd apply the unit's cgroup settings again, device
//! rules included: the file's time says when.
//!
//! A transient unit is made with its properties, each in such a drop-in
//! (a container's scope with its DeviceAllow=, CPUWeight=, ...): those
//! written with the unit file itself are its making, not a change.
//!
//! The folders are systemd's, written by pid 1 alone; still read with
//! bounds (so many entries, only names and times, never contents).

use std::{
    fs,
    path::Path,
    time::{Duration, SystemTime},
};

/// Where systemd keeps the drop-ins of property changes.
const DROP_IN_ROOTS: [&str; 3] = [
    "/run/systemd/transient",
    "/run/systemd/system.control",
    "/etc/systemd/system.control",
];
/// A scope's folder holds a drop-in per property ever set: a dozen.
const MAX_ENTRIES: usize = 64;
/// Properties named in one answer.
const MAX_PROPERTIES: usize = 8;
/// How far a drop-in's time may be from the moment asked about: systemd
/// writes it before it applies the settings, within the same call.
pub const NEAR: Duration = Duration::from_secs(2);

/// Properties of one unit set together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropertiesSet {
    /// Sorted, each a systemd property name (letters and digits).
    pub properties: Vec<String>,
    /// The folder of their drop-ins.
    pub drop_ins: String,
    /// The newest drop-in's time.
    pub at: SystemTime,
}

/// The properties of `unit` whose drop-ins were written within NEAR of
/// `moment`; None when none was, or `unit` is not a unit's name.
pub fn set_near(unit: &str, moment: SystemTime) -> Option<PropertiesSet> {
    set_near_under(&DROP_IN_ROOTS.map(Path::new), unit, moment)
}

fn set_near_under(roots: &[&Path], unit: &str, moment: SystemTime) -> Option<PropertiesSet> {
    if !is_unit_name(unit) {
        return None;
    }
    roots.iter().find_map(|root| {
        let made = fs::metadata(root.join(unit))
            .and_then(|m| m.modified())
            .ok();
        set_in(&root.join(format!("{unit}.d")), moment, made)
    })
}

/// The drop-ins in `dir` written within NEAR of `moment`, leaving out
/// those written within NEAR of the unit's making (`made`).
fn set_in(dir: &Path, moment: SystemTime, made: Option<SystemTime>) -> Option<PropertiesSet> {
    let mut properties = Vec::new();
    let mut newest = None;
    for entry in fs::read_dir(dir).ok()?.take(MAX_ENTRIES).flatten() {
        let name = entry.file_name();
        let Some(property) = name.to_str().and_then(property_of_drop_in) else {
            continue;
        };
        let Ok(modified) = entry.metadata().and_then(|m| m.modified()) else {
            continue;
        };
        let with_making = made.is_some_and(|made| apart(modified, made) <= NEAR);
        if apart(modified, moment) <= NEAR && !with_making {
            properties.push(property.to_string());
            newest = newest.max(Some(modified));
        }
    }
    properties.sort();
    properties.truncate(MAX_PROPERTIES);
    Some(PropertiesSet {
        properties,
        drop_ins: dir.display().to_string(),
        at: newest?,
    })
}

fn apart(a: SystemTime, b: SystemTime) -> Duration {
    a.duration_since(b)
        .or_else(|_| b.duration_since(a))
        .unwrap_or(Duration::MAX)
}

/// "CPUWeight" of "50-CPUWeight.conf", the name systemd gives the drop-in
/// of a property it was asked to set.
fn property_of_drop_in(file: &str) -> Option<&str> {
    let property = file.strip_prefix("50-")?.strip_suffix(".conf")?;
    (!property.is_empty() && property.bytes().all(|b| b.is_ascii_alphanumeric()))
        .then_some(property)
}

/// A unit's name as systemd makes them: no path, no dot-only name.
fn is_unit_name(unit: &str) -> bool {
    !unit.is_empty()
        && !unit.starts_with('.')
        && unit
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:@\\".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCOPE: &str =
        "cri-containerd-e316e263806974a3e6a6eb96a70cd1b3d9ca319ec03ee6b53cf02d3a1cfc8383.scope";

    fn drop_in(dir: &Path, name: &str, at: SystemTime) {
        let path = dir.join(name);
        fs::write(&path, "[Scope]\n").unwrap();
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(at)
            .unwrap();
    }

    #[test]
    fn names_the_properties_set_at_the_moment_and_not_those_of_the_start() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(format!("{SCOPE}.d"));
        fs::create_dir(&dir).unwrap();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let update = start + Duration::from_secs(4);
        drop_in(&dir, "50-DeviceAllow.conf", start);
        drop_in(&dir, "50-DevicePolicy.conf", start);
        drop_in(&dir, "50-CPUWeight.conf", update);
        drop_in(&dir, "50-AllowedCPUs.conf", update);
        drop_in(&dir, "README", update);
        let moment = update + Duration::from_millis(300);
        let set = set_near_under(&[root.path()], SCOPE, moment).expect("set");
        assert_eq!(set.properties, ["AllowedCPUs", "CPUWeight"]);
        assert_eq!(set.at, update);
        assert_eq!(set.drop_ins, dir.display().to_string());
        // Nothing set near a later moment (a daemon-reload's).
        let later = update + Duration::from_secs(60);
        assert_eq!(set_near_under(&[root.path()], SCOPE, later), None);
    }

    #[test]
    fn properties_the_unit_was_made_with_are_no_trigger() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(format!("{SCOPE}.d"));
        fs::create_dir(&dir).unwrap();
        let made = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        drop_in(root.path(), SCOPE, made);
        drop_in(&dir, "50-DeviceAllow.conf", made);
        drop_in(&dir, "50-CPUWeight.conf", made + Duration::from_millis(200));
        // A program loaded just past the start's grace meets only the
        // unit's making: no change of its properties.
        let moment = made + Duration::from_millis(2100);
        assert_eq!(set_near_under(&[root.path()], SCOPE, moment), None);
    }

    #[test]
    fn a_unit_name_never_leaves_the_drop_in_folders() {
        let root = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        for unit in ["..", "../etc", "a/b.scope", "", ".scope"] {
            assert_eq!(set_near_under(&[root.path()], unit, now), None, "{unit}");
        }
        assert_eq!(property_of_drop_in("50-../x.conf"), None);
        assert_eq!(property_of_drop_in("50-.conf"), None);
        assert_eq!(property_of_drop_in("50-MemoryMax.conf"), Some("MemoryMax"));
    }
}
