//! What one run measured: a table for people and JSON for tools.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use crate::procfs::Memory;

/// One step: N executions paused at once, then all resumed.
pub struct Step {
    pub n: usize,
    pub launch: Duration,
    pub resume: Duration,
    pub first_call_p50: Duration,
    pub first_call_p99: Duration,
    pub round_trip_p50: Duration,
    pub round_trip_p99: Duration,
    /// The server before the step, with all N paused, and after all finished.
    pub idle: Memory,
    pub at_n: Memory,
    pub after: Memory,
    /// The server a while after the last execution ended (`--released-after-secs`): what it
    /// gave back.
    pub released: Option<(Duration, Memory)>,
    /// The server's own count of paused executions while all N waited.
    pub paused_gauge: Option<f64>,
    /// With a server that hibernates: its count of hibernated executions and their bytes,
    /// once all N had hibernated.
    pub hibernated: Option<(Option<f64>, Option<f64>)>,
    /// Live instances once every stream finished (0 unless something leaked).
    pub live_after: Option<f64>,
    /// Executions that paused, resumed and printed exactly what they were sent.
    pub correct: usize,
    pub errors: Vec<String>,
}

impl Step {
    fn per_exec(&self, f: impl Fn(&Memory) -> u64) -> u64 {
        f(&self.at_n).saturating_sub(f(&self.idle)) / self.n.max(1) as u64
    }

    pub fn pss_per_exec(&self) -> u64 {
        self.per_exec(|m| m.pss)
    }

    fn to_json(&self) -> Value {
        json!({
            "paused": self.n,
            "correct": self.correct,
            "launch_seconds": self.launch.as_secs_f64(),
            "resume_seconds": self.resume.as_secs_f64(),
            "first_tool_call_us": {"p50": us(self.first_call_p50), "p99": us(self.first_call_p99)},
            "round_trip_us": {"p50": us(self.round_trip_p50), "p99": us(self.round_trip_p99)},
            "per_execution_bytes": {
                "pss": self.pss_per_exec(),
                "pss_anon": self.per_exec(|m| m.pss_anon),
                "rss_anon": self.per_exec(|m| m.rss_anon),
                "vm_rss": self.per_exec(|m| m.rss),
                "vm_size": self.per_exec(|m| m.vm_size),
                "mappings": self.at_n.maps.saturating_sub(self.idle.maps) as f64 / self.n.max(1) as f64,
            },
            "server_idle": self.idle.to_json(),
            "server_at_n": self.at_n.to_json(),
            "server_after": self.after.to_json(),
            "server_released": self.released.map(|(after, m)| json!({"seconds_after_the_end": after.as_secs(), "memory": m.to_json()})),
            "fds_per_execution": self.at_n.fds.saturating_sub(self.idle.fds) as f64 / self.n.max(1) as f64,
            "paused_gauge": self.paused_gauge,
            "hibernated": self.hibernated.map(|(count, bytes)| json!({"executions": count, "bytes": bytes})),
            "live_instances_after": self.live_after,
            "errors": self.errors,
        })
    }
}

pub struct Throughput {
    pub clients: usize,
    pub elapsed: Duration,
    pub completed: usize,
    pub failed_errors: usize,
    pub latency_p50: Duration,
    pub latency_p99: Duration,
    pub errors: Vec<String>,
}

impl Throughput {
    fn per_second(&self) -> f64 {
        self.completed as f64 / self.elapsed.as_secs_f64()
    }
}

/// N live sessions left idle after one program each.
pub struct IdleSessions {
    pub n: usize,
    /// Sessions whose variable read back right.
    pub correct: usize,
    pub before: Memory,
    pub at_n: Memory,
    /// Opening all N and running their first program, one after another.
    pub open: Duration,
    /// Median of a session's first program (`v = i`) over gRPC, right after opening it.
    pub first_p50: Duration,
    /// The same as the engine timed it (its wall time, from the request to the end): what is
    /// not spent in gRPC, the server's bookkeeping or the client.
    pub first_engine_p50: Duration,
    /// Median of its next program (`print(v)`), once all N had been idle.
    pub next_p50: Duration,
    /// As [`Step::hibernated`].
    pub hibernated: Option<(Option<f64>, Option<f64>)>,
}

impl IdleSessions {
    pub fn pss_per_session(&self) -> u64 {
        self.at_n.pss.saturating_sub(self.before.pss) / self.n.max(1) as u64
    }

    fn to_json(&self) -> Value {
        json!({
            "sessions": self.n,
            "correct": self.correct,
            "pss_per_session_bytes": self.pss_per_session(),
            "pss_anon_per_session_bytes": self.at_n.pss_anon.saturating_sub(self.before.pss_anon) / self.n.max(1) as u64,
            "open_seconds": self.open.as_secs_f64(),
            "first_program_us_p50": us(self.first_p50),
            "first_program_engine_us_p50": us(self.first_engine_p50),
            "next_program_us_p50": us(self.next_p50),
            "hibernated": self.hibernated.map(|(count, bytes)| json!({"sessions": count, "bytes": bytes})),
        })
    }
}

pub struct Report {
    pub machine: Value,
    pub steps: Vec<Step>,
    pub throughput: Option<Throughput>,
    pub idle_sessions: Option<IdleSessions>,
    pub stopped: Option<String>,
    pub serve_flags: Vec<String>,
}

impl Report {
    pub fn table(&self) -> String {
        let m = &self.machine;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\nmachine: {}, {} cores, {:.1} GiB, Linux {}",
            m["cpu"].as_str().unwrap_or("?"),
            m["cores"],
            m["mem_total_bytes"].as_u64().unwrap_or(0) as f64 / (1u64 << 30) as f64,
            m["kernel"].as_str().unwrap_or("?")
        );
        let _ = writeln!(
            out,
            "\n| paused | correct | first call p50 / p99 | round trip p50 / p99 | PSS / exec | Pss_Anon / exec | RssAnon / exec | VmRSS / exec | server PSS idle / at N / after | mappings at N | fds idle / at N |"
        );
        let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for s in &self.steps {
            let _ = writeln!(
                out,
                "| {} | {} | {} / {} | {} / {} | {} | {} | {} | {} | {} / {} / {} | {} | {} / {} |",
                s.n,
                s.correct,
                ms(s.first_call_p50),
                ms(s.first_call_p99),
                ms(s.round_trip_p50),
                ms(s.round_trip_p99),
                mib(s.pss_per_exec()),
                mib(s.per_exec(|m| m.pss_anon)),
                mib(s.per_exec(|m| m.rss_anon)),
                mib(s.per_exec(|m| m.rss)),
                mib(s.idle.pss),
                mib(s.at_n.pss),
                mib(s.after.pss),
                s.at_n.maps,
                s.idle.fds,
                s.at_n.fds,
            );
        }
        for s in &self.steps {
            if let Some((after, m)) = s.released {
                let _ = writeln!(
                    out,
                    "server PSS {} s after the last of N = {} ended: {} (idle before: {}, at N: {})",
                    after.as_secs(),
                    s.n,
                    mib(m.pss),
                    mib(s.idle.pss),
                    mib(s.at_n.pss)
                );
            }
        }
        for s in &self.steps {
            if let Some((count, bytes)) = s.hibernated {
                let (count, bytes) = (count.unwrap_or(0.0), bytes.unwrap_or(0.0));
                let _ = writeln!(
                    out,
                    "hibernated at N = {}: {count}, {:.1} KiB each at rest ({:.1} MiB in all)",
                    s.n,
                    bytes / count.max(1.0) / 1024.0,
                    bytes / (1u64 << 20) as f64
                );
            }
        }
        if let Some(s) = self.steps.last() {
            let _ = writeln!(
                out,
                "\naddress space reserved by the server (VmSize, idle, N = {}): {:.1} TiB of 128 TiB",
                s.n,
                s.idle.vm_size as f64 / (1u64 << 40) as f64
            );
        }
        if let Some(t) = &self.throughput {
            let _ = writeln!(
                out,
                "\nthroughput: {:.0} trivial executions/s ({} clients, {} completed in {:.1} s, {} failed; latency p50 {} p99 {})",
                t.per_second(),
                t.clients,
                t.completed,
                t.elapsed.as_secs_f64(),
                t.failed_errors,
                ms(t.latency_p50),
                ms(t.latency_p99)
            );
        }
        if let Some(s) = &self.idle_sessions {
            let _ = writeln!(
                out,
                "\nidle sessions: {} open ({} read back right), {} PSS each (Pss_Anon {}); over gRPC, a session's first program p50 {} (engine's wall time {}), its next {}",
                s.n,
                s.correct,
                mib(s.pss_per_session()),
                mib(s.at_n.pss_anon.saturating_sub(s.before.pss_anon) / s.n.max(1) as u64),
                ms(s.first_p50),
                ms(s.first_engine_p50),
                ms(s.next_p50)
            );
            if let Some((count, bytes)) = s.hibernated {
                let (count, bytes) = (count.unwrap_or(0.0), bytes.unwrap_or(0.0));
                let _ = writeln!(
                    out,
                    "idle sessions hibernated: {count}, {:.1} KiB each at rest",
                    bytes / count.max(1.0) / 1024.0
                );
            }
        }
        if let Some(why) = &self.stopped {
            let _ = writeln!(out, "stopped early: {why}");
        }
        for s in self.steps.iter().filter(|s| !s.errors.is_empty()) {
            let _ = writeln!(out, "errors at N = {}: {:?}", s.n, s.errors);
        }
        out
    }

    pub fn to_json(&self) -> Value {
        json!({
            "machine": self.machine,
            "serve_flags": self.serve_flags,
            "steps": self.steps.iter().map(Step::to_json).collect::<Vec<_>>(),
            "throughput": self.throughput.as_ref().map(|t| json!({
                "clients": t.clients,
                "seconds": t.elapsed.as_secs_f64(),
                "completed": t.completed,
                "failed": t.failed_errors,
                "executions_per_second": t.per_second(),
                "latency_us": {"p50": us(t.latency_p50), "p99": us(t.latency_p99)},
                "errors": t.errors,
            })),
            "idle_sessions": self.idle_sessions.as_ref().map(IdleSessions::to_json),
            "stopped_early": self.stopped,
        })
    }
}

/// One line of progress on stderr while the run goes on.
pub fn step_line(s: &Step) -> String {
    format!(
        "density: N = {}: {} correct, PSS {} / exec, first call p50 {}, round trip p50 {}, launch {:.1} s",
        s.n,
        s.correct,
        mib(s.pss_per_exec()),
        ms(s.first_call_p50),
        ms(s.round_trip_p50),
        s.launch.as_secs_f64()
    )
}

/// Nearest-rank percentile of sorted samples (zero when there are none).
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
}
