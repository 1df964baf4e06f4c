//! The DeviceAllow= lists of the systemd units whose programs deny
//! accesses: asked of systemctl on a unit's first denial, again only after
//! a while (a daemon-reload or `systemctl set-property` changes them).

use std::{
    rc::Rc,
    time::{Duration, Instant},
};

use rustc_hash::FxHashMap;

use crate::{
    host::systemd_units::{device_allow_of, unit_of_cgroup},
    model::{denied_by::DeniedBy, policy_writer::Manager, record::Record},
};

const RECHECK_AFTER: Duration = Duration::from_secs(10);
/// Units remembered; only units systemd itself holds programs for get here.
const UNITS_CAPACITY: usize = 1024;

/// A unit's DeviceAllow= entries (None: systemctl gave no answer) and
/// when they were asked for.
type Asked = (Instant, Option<Rc<[String]>>);

/// At most this many `systemctl` runs per RECHECK_AFTER, host-wide: with
/// the systemd cgroup driver every container is a unit, and each run may
/// hold the event loop for up to a second.
const ASKS_PER_WINDOW: usize = 8;

#[derive(Default)]
pub struct UnitRules {
    by_unit: FxHashMap<String, Asked>,
    /// When systemctl was last run, newest last.
    asks: std::collections::VecDeque<Instant>,
}

impl UnitRules {
    /// The DeviceAllow= list of the unit whose systemd-written program
    /// denied `record`; None for any other culprit.
    pub fn of_culprit(&mut self, record: &Record) -> Option<Rc<[String]>> {
        let DeniedBy::Program {
            attached_at,
            writer: Some(writer),
            ..
        } = &**record.denied_by.as_deref()?
        else {
            return None;
        };
        if writer.manager != Manager::Systemd {
            return None;
        }
        let unit = unit_of_cgroup(attached_at)?;
        if let Some((asked, rules)) = self.by_unit.get(unit) {
            if asked.elapsed() < RECHECK_AFTER {
                return rules.clone();
            }
        }
        while self
            .asks
            .front()
            .is_some_and(|at| at.elapsed() >= RECHECK_AFTER)
        {
            self.asks.pop_front();
        }
        if self.asks.len() >= ASKS_PER_WINDOW {
            return None;
        }
        self.asks.push_back(Instant::now());
        let rules: Option<Rc<[String]>> = device_allow_of(unit).map(Rc::from);
        if self.by_unit.len() >= UNITS_CAPACITY {
            self.by_unit.clear();
        }
        self.by_unit
            .insert(unit.to_string(), (Instant::now(), rules.clone()));
        rules
    }
}
