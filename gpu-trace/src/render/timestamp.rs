//! Event times in JSON lines: RFC 3339, UTC, microseconds. The date and
//! time of day change once a second while a flood writes hundreds of
//! thousands of lines in it, so that part is formatted once and reused.

use std::{
    cell::RefCell,
    time::{SystemTime, UNIX_EPOCH},
};

use chrono::{DateTime, SecondsFormat, Utc};

thread_local! {
    /// The second last formatted, and its "YYYY-MM-DDTHH:MM:SS".
    static LAST_SECOND: RefCell<(u64, String)> =
        const { RefCell::new((u64::MAX, String::new())) };
}

/// Appends `time` as `2026-12-02T14:54:01.210256Z`.
pub fn write_rfc3339_micros(out: &mut Vec<u8>, time: SystemTime) {
    let Ok(since_epoch) = time.duration_since(UNIX_EPOCH) else {
        // Before 1970: never a kernel's event time; format it plainly.
        out.extend_from_slice(rfc3339_micros(time).as_bytes());
        return;
    };
    let second = since_epoch.as_secs();
    LAST_SECOND.with_borrow_mut(|(cached, prefix)| {
        if *cached != second {
            let whole = UNIX_EPOCH + std::time::Duration::from_secs(second);
            *prefix = DateTime::<Utc>::from(whole).to_rfc3339_opts(SecondsFormat::Secs, true);
            prefix.pop(); // the 'Z', which comes after the fraction
            *cached = second;
        }
        out.extend_from_slice(prefix.as_bytes());
    });
    let micros = since_epoch.subsec_micros();
    let mut fraction = *b".000000Z";
    let mut rest = micros;
    for digit in fraction[1..7].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    out.extend_from_slice(&fraction);
}

fn rfc3339_micros(time: SystemTime) -> String {
    DateTime::<Utc>::from(time).to_rfc3339_opts(SecondsFormat::Micros, true)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn matches_chrono_across_seconds_and_fractions() {
        let times = [
            UNIX_EPOCH,
            UNIX_EPOCH + Duration::new(1_764_686_041, 210_256_999),
            UNIX_EPOCH + Duration::new(1_764_686_041, 999_999_000),
            UNIX_EPOCH + Duration::new(1_764_686_042, 7_000),
            UNIX_EPOCH + Duration::new(1_764_686_041, 1_000),
            UNIX_EPOCH + Duration::new(4_102_444_800, 500_000_000),
            UNIX_EPOCH - Duration::new(86_400, 250_000_000),
        ];
        for time in times {
            let mut ours = Vec::new();
            write_rfc3339_micros(&mut ours, time);
            assert_eq!(String::from_utf8(ours).unwrap(), rfc3339_micros(time));
        }
    }
}
