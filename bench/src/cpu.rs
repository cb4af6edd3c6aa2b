//! CPU time per thread of this process, from `/proc/self/task/*/schedstat` (nanoseconds on a
//! CPU, kept by the scheduler): where a flow's work goes, per row, when throughput alone is
//! too noisy on a shared VM to tell what limits it.

use std::collections::HashMap;
use std::fs;

/// What each thread has run so far, by thread id, with its name.
pub struct Snapshot(HashMap<u32, (String, u64)>);

/// Takes a snapshot of every thread alive now.
pub fn snapshot() -> Snapshot {
    let mut threads = HashMap::new();
    let Ok(tasks) = fs::read_dir("/proc/self/task") else {
        return Snapshot(threads);
    };
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let path = task.path();
        let ran = fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok());
        let name = fs::read_to_string(path.join("comm")).unwrap_or_default();
        if let Some(ran) = ran {
            threads.insert(tid, (name.trim().to_string(), ran));
        }
    }
    Snapshot(threads)
}

/// CPU time between two snapshots, in µs per row, grouped: the writer (relayq's commit
/// thread), the far end (the no-op server), the actix thread (this process's main thread:
/// actors, channels, the HTTP client, the producers), the send threads (the other actix
/// arbiters: outbound runs, `claimer.send_threads`) and everything else. A thread that
/// exited between the two is not counted; one born between them counts from zero.
pub fn per_row(before: &Snapshot, after: &Snapshot, rows: usize) -> Vec<(&'static str, f64)> {
    let main = std::process::id();
    let mut groups = [
        ("writer", 0u64),
        ("actix thread", 0),
        ("far end", 0),
        ("send threads", 0),
        ("other", 0),
    ];
    for (tid, (name, ran)) in &after.0 {
        let spent = ran.saturating_sub(before.0.get(tid).map_or(0, |(_, r)| *r));
        let group = match name.as_str() {
            _ if *tid == main => 1,
            "relayq-commit" => 0,
            FAR_END => 2,
            // actix names its arbiters `actix-rt|system:N|arbiter:M` (cut to 15 characters).
            n if n.starts_with("actix-rt") => 3,
            _ => 4,
        };
        groups[group].1 += spent;
    }
    groups
        .into_iter()
        .map(|(name, ns)| (name, ns as f64 / 1000.0 / rows.max(1) as f64))
        .collect()
}

/// Prints each thread's CPU per row between two snapshots, by thread name (for finding where
/// a flow's time goes; `RELAYQ_BENCH_THREADS=1`).
pub fn print_threads(before: &Snapshot, after: &Snapshot, rows: usize) {
    let mut by_name: HashMap<&str, u64> = HashMap::new();
    for (tid, (name, ran)) in &after.0 {
        let spent = ran.saturating_sub(before.0.get(tid).map_or(0, |(_, r)| *r));
        *by_name.entry(name.as_str()).or_default() += spent;
    }
    let mut rows_by: Vec<_> = by_name.into_iter().collect();
    rows_by.sort_by_key(|(_, ns)| std::cmp::Reverse(*ns));
    for (name, ns) in rows_by {
        eprintln!(
            "  {name:<24} {:8.1} µs/row",
            ns as f64 / 1000.0 / rows.max(1) as f64
        );
    }
}

/// The name of the no-op server's thread, so its time is told apart.
pub const FAR_END: &str = "noop-server";

/// Per-row CPU figures of several runs, by group, in the order first seen.
#[derive(Default)]
pub struct Runs(Vec<(&'static str, Vec<f64>)>);

impl Runs {
    pub fn push(&mut self, run: &[(&'static str, f64)]) {
        for &(group, us) in run {
            match self.0.iter_mut().find(|(g, _)| *g == group) {
                Some((_, runs)) => runs.push(us),
                None => self.0.push((group, vec![us])),
            }
        }
    }

    /// One figure per group, labelled `<flow>: <group>`.
    pub fn figures(&self, flow: &str) -> Vec<crate::report::Figure> {
        self.0
            .iter()
            .map(|(group, runs)| {
                crate::report::Figure::new(
                    format!("CPU per row, {flow}: {group}"),
                    "µs",
                    runs.clone(),
                )
            })
            .collect()
    }

    /// `writer 14.1, actix thread 9.8, …, total 27.0 µs` (medians).
    pub fn summary(&self) -> String {
        let medians: Vec<(&str, f64)> = self
            .0
            .iter()
            .map(|(g, runs)| (*g, crate::stats::percentile(runs, 50.0)))
            .collect();
        let total: f64 = medians.iter().map(|(_, us)| us).sum();
        let parts: Vec<String> = medians
            .iter()
            .map(|(g, us)| format!("{g} {us:.1}"))
            .collect();
        format!("{}, total {total:.1} µs", parts.join(", "))
    }
}

/// User and system clock ticks (10 ms each) process `pid` ("self" for this one) has run.
pub fn process_ticks(pid: &str) -> u64 {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Fields after the command's closing parenthesis: state is the 3rd field, utime the 14th.
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok());
    field(14).unwrap_or(0) + field(15).unwrap_or(0)
}

/// The clock ticks every `postgres` process on this machine has run (the benchmark's server:
/// stop other servers to read it alone). A process that exited between two reads is lost.
pub fn server_ticks() -> u64 {
    let Ok(procs) = fs::read_dir("/proc") else {
        return 0;
    };
    procs
        .flatten()
        .filter_map(|p| p.file_name().to_str().map(str::to_string))
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postgres")
        })
        .map(|pid| process_ticks(&pid))
        .sum()
}
