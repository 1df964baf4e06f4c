//! Folding repeats: an application retrying the same denied open in a loop
//! must not flood the log. The first occurrence is written at once; the
//! repeats within the window become one record with a count.

use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::model::record::Record;

/// What makes two denials "the same": cgroup, device, access and command.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FoldKey {
    cgroup_id: u64,
    device: (bool, u32, u32),
    access: u16,
    comm: Vec<u8>,
}

struct Pending {
    /// The latest repeat, written with the count when the window closes.
    latest: Option<Record>,
    window_started: Instant,
}

pub struct Folder {
    window: Duration,
    pending: FxHashMap<FoldKey, Pending>,
}

impl Folder {
    /// A zero window disables folding.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            pending: FxHashMap::default(),
        }
    }

    /// Takes one record; returns it when it must be written now (a first
    /// occurrence, or anything that is not a problem).
    pub fn admit(&mut self, record: Record) -> Option<Record> {
        if self.window.is_zero() || !record.access.verdict.is_problem() {
            return Some(record);
        }
        let a = &record.access;
        let key = FoldKey {
            cgroup_id: a.cgroup_id,
            device: (a.device_seen, a.major, a.minor),
            access: a.access,
            comm: a.comm.clone(),
        };
        match self.pending.get_mut(&key) {
            None => {
                self.pending.insert(
                    key,
                    Pending {
                        latest: None,
                        window_started: Instant::now(),
                    },
                );
                Some(record)
            }
            Some(pending) => {
                match &mut pending.latest {
                    Some(folded) => {
                        folded.count += 1;
                        folded.last_seen = record.time;
                    }
                    None => pending.latest = Some(record),
                }
                None
            }
        }
    }

    /// Folded records whose window has closed (all of them with `everything`,
    /// at shutdown). A key that saw no repeat is forgotten, so its next
    /// occurrence is written at once again.
    pub fn due(&mut self, everything: bool) -> Vec<Record> {
        let window = self.window;
        let mut out = Vec::new();
        self.pending.retain(|_, pending| {
            if !everything && pending.window_started.elapsed() < window {
                return true;
            }
            match pending.latest.take() {
                Some(folded) => {
                    out.push(folded);
                    pending.window_started = Instant::now();
                    !everything
                }
                None => false,
            }
        });
        out.sort_by_key(|r| r.first_seen);
        out
    }
}

/// "5s", "500ms", "2m", "0": the --fold window.
pub fn parse_window(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 5s, 500ms or 2m"))?;
    Ok(match unit {
        "" if number == 0 => Duration::ZERO,
        "ms" => Duration::from_millis(number),
        "s" => Duration::from_secs(number),
        "m" => Duration::from_secs(number * 60),
        _ => return Err(format!("{text:?} is not a duration like 5s, 500ms or 2m")),
    })
}

#[cfg(test)]
mod tests {
    use std::{rc::Rc, time::SystemTime};

    use super::*;
    use crate::{
        cgroup::identity::identify,
        model::{
            access::{DeviceAccess, Verdict, VerdictSource},
            rendered::Rendered,
        },
    };

    fn denial(comm: &[u8], at: u64) -> Record {
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(at);
        Record {
            access: DeviceAccess {
                boot_ns: 0,
                pid: 1,
                tid: 1,
                uid: 0,
                comm: comm.to_vec(),
                cgroup_id: 7,
                device_seen: true,
                block_device: false,
                major: 511,
                minor: 0,
                access: 6,
                verdict: Verdict::DeniedByBpfPolicy,
                bpf_retval: -1,
                verdict_from: VerdictSource::BpfRetval,
                open: None,
            },
            time,
            count: 1,
            first_seen: time,
            last_seen: time,
            cgroup: None,
            container: Rc::new(Rendered::new(identify("/", &Default::default()))),
            driver: None,
            device: None,
            node: None,
            denied_by: None,
            diagnosis: None,
        }
    }

    #[test]
    fn first_occurrence_at_once_repeats_folded_with_exact_counts() {
        let mut folder = Folder::new(Duration::from_secs(3600));
        assert!(
            folder.admit(denial(b"python3", 1)).is_some(),
            "the first is written at once"
        );
        for at in 2..=10 {
            assert!(folder.admit(denial(b"python3", at)).is_none());
        }
        assert!(
            folder.admit(denial(b"other", 5)).is_some(),
            "another command is another denial"
        );
        assert!(folder.due(false).is_empty(), "the window is still open");
        let folded = folder.due(true);
        assert_eq!(folded.len(), 1);
        assert_eq!(folded[0].count, 9);
        assert_eq!(
            folded[0].first_seen,
            SystemTime::UNIX_EPOCH + Duration::from_secs(2)
        );
        assert_eq!(
            folded[0].last_seen,
            SystemTime::UNIX_EPOCH + Duration::from_secs(10)
        );
    }

    #[test]
    fn a_quiet_window_forgets_the_key() {
        let mut folder = Folder::new(Duration::from_millis(1));
        assert!(folder.admit(denial(b"a", 1)).is_some());
        std::thread::sleep(Duration::from_millis(5));
        assert!(folder.due(false).is_empty(), "nothing was repeated");
        assert!(
            folder.admit(denial(b"a", 2)).is_some(),
            "written at once again"
        );
    }

    #[test]
    fn zero_window_writes_everything() {
        let mut folder = Folder::new(Duration::ZERO);
        assert!(folder.admit(denial(b"a", 1)).is_some());
        assert!(folder.admit(denial(b"a", 1)).is_some());
    }

    #[test]
    fn parses_windows() {
        assert_eq!(parse_window("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_window("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_window("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_window("0"), Ok(Duration::ZERO));
        assert!(parse_window("5").is_err() && parse_window("fast").is_err());
    }
}
