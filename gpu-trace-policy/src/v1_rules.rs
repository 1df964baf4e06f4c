//! cgroup v1's devices controller: the rules of a devices.list and what they
//! say about one access. The kernel checks them after the cgroup BPF programs.

use crate::query::{access_bits, DeviceQuery};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    /// 'a' (all), 'b' or 'c'.
    kind: char,
    /// None is '*'.
    major: Option<u32>,
    minor: Option<u32>,
    access: u16,
}

/// The devices.list of one v1 devices cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicesList {
    /// The devices cgroup's path in the v1 hierarchy ("/docker/ID").
    pub cgroup: String,
    /// Its devices.list, line by line.
    pub lines: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum V1Answer {
    /// Allowed by this line.
    Allowed(String),
    /// The cgroup allows everything by default. Its devices.deny exceptions
    /// are not listed anywhere the kernel shows, so a denial is still possible.
    AllowedByDefault,
    Denied,
}

impl DevicesList {
    pub fn answer(&self, query: &DeviceQuery) -> V1Answer {
        let rules: Vec<(Rule, &String)> = self
            .lines
            .iter()
            .filter_map(|l| parse_rule(l).map(|r| (r, l)))
            .collect();
        let allow_all = rules
            .iter()
            .any(|(r, _)| r.kind == 'a' && r.major.is_none() && r.minor.is_none() && r.access == 7);
        if allow_all {
            return V1Answer::AllowedByDefault;
        }
        let kind = if query.dev_type == 1 { 'b' } else { 'c' };
        let matching = rules.iter().find(|(rule, _)| {
            (rule.kind == 'a' || rule.kind == kind)
                && rule.major.is_none_or(|m| m == query.major)
                && rule.minor.is_none_or(|m| m == query.minor)
                && query.access & !rule.access == 0
        });
        match matching {
            Some((_, line)) => V1Answer::Allowed((*line).clone()),
            None => V1Answer::Denied,
        }
    }
}

/// "c 195:* rwm" -> Rule.
fn parse_rule(line: &str) -> Option<Rule> {
    let mut parts = line.split_whitespace();
    let kind = parts.next()?.chars().next()?;
    let (major, minor) = parts.next()?.split_once(':')?;
    let number = |n: &str| {
        if n == "*" {
            Some(None)
        } else {
            n.parse().ok().map(Some)
        }
    };
    let access = access_bits(parts.next()?)?;
    matches!(kind, 'a' | 'b' | 'c').then_some(())?;
    Some(Rule {
        kind,
        major: number(major)?,
        minor: number(minor)?,
        access,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(lines: &[&str]) -> DevicesList {
        DevicesList {
            cgroup: "/docker/x".into(),
            lines: lines.iter().map(|l| l.to_string()).collect(),
        }
    }

    #[test]
    fn default_deny_lists_allow_only_what_they_name() {
        let l = list(&["c 1:3 rwm", "c 195:* rwm", "c 136:* rw", "b 7:0 r"]);
        assert_eq!(
            l.answer(&DeviceQuery::char_device(195, 255, 6)),
            V1Answer::Allowed("c 195:* rwm".into())
        );
        assert_eq!(
            l.answer(&DeviceQuery::char_device(511, 0, 6)),
            V1Answer::Denied
        );
        assert_eq!(
            l.answer(&DeviceQuery::char_device(136, 2, 1)),
            V1Answer::Denied,
            "mknod not in rw"
        );
        assert_eq!(
            l.answer(&DeviceQuery {
                dev_type: 1,
                major: 7,
                minor: 0,
                access: 2
            }),
            V1Answer::Allowed("b 7:0 r".into())
        );
        assert_eq!(
            l.answer(&DeviceQuery::char_device(7, 0, 2)),
            V1Answer::Denied,
            "b rule does not cover char"
        );
    }

    #[test]
    fn allow_all_may_hide_deny_exceptions() {
        assert_eq!(
            list(&["a *:* rwm"]).answer(&DeviceQuery::char_device(511, 0, 6)),
            V1Answer::AllowedByDefault
        );
    }

    #[test]
    fn rejects_malformed_rules() {
        assert_eq!(parse_rule("c 195:* rwx"), None);
        assert_eq!(parse_rule("x 1:1 r"), None);
    }
}
