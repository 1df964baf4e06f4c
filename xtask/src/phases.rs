//! Where the time of `cargo xtask test` goes: each part says how long it
//! took as it ends, and the whole is summed up at the end, also when a part
//! failed. The run has a time budget; this is how to see what spends it.

use std::time::{Duration, Instant};

pub(crate) struct Phases {
    started: Instant,
    done: Vec<(&'static str, Duration)>,
}

impl Phases {
    pub(crate) fn new() -> Self {
        Self {
            started: Instant::now(),
            done: Vec::new(),
        }
    }

    /// Runs one part, timed.
    pub(crate) fn run<T>(
        &mut self,
        name: &'static str,
        part: impl FnOnce() -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let started = Instant::now();
        let result = part();
        let took = started.elapsed();
        eprintln!("xtask: {name} took {} s", took.as_secs());
        self.done.push((name, took));
        result
    }

    fn summary(&self) -> String {
        summary_line(self.started.elapsed(), &self.done)
    }
}

fn summary_line(total: Duration, done: &[(&str, Duration)]) -> String {
    let parts: Vec<String> = done
        .iter()
        .map(|(name, took)| format!("{name} {} s", took.as_secs()))
        .collect();
    format!(
        "xtask: the run took {} s: {}",
        total.as_secs(),
        parts.join(", ")
    )
}

impl Drop for Phases {
    fn drop(&mut self) {
        eprintln!("{}", self.summary());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_part_is_kept_in_order_and_an_error_passes_through() {
        let mut phases = Phases::new();
        assert_eq!(phases.run("first", || Ok(7)).unwrap(), 7);
        let failed = phases.run("second", || -> anyhow::Result<()> {
            anyhow::bail!("broke")
        });
        assert_eq!(failed.unwrap_err().to_string(), "broke");
        let names: Vec<&str> = phases.done.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["first", "second"]);
    }

    #[test]
    fn the_summary_gives_the_total_and_each_part_in_whole_seconds() {
        let done = [
            ("lint", Duration::from_millis(61_900)),
            ("vm matrix", Duration::from_secs(1_620)),
        ];
        assert_eq!(
            summary_line(Duration::from_millis(1_700_500), &done),
            "xtask: the run took 1700 s: lint 61 s, vm matrix 1620 s"
        );
    }
}
