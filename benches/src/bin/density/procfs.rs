//! What `/proc` says about a process's memory, and about the machine the harness runs on.
//!
//! PSS (proportional set size) divides each shared page among the processes mapping it, so the
//! compiled component's memory image, mapped by every instance, is not counted once per
//! instance the way VmRSS counts it. Within one process every instance maps the same file
//! pages, so for per-instance cost the anonymous part (Pss_Anon, RssAnon) is what grows.

use std::fs;

use serde_json::{Value, json};

/// One reading of a process's memory, in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub pss: u64,
    pub pss_anon: u64,
    pub pss_file: u64,
    /// VmRSS: shown only to show why it is the wrong measure.
    pub rss: u64,
    pub rss_anon: u64,
    /// Address space in use (VmSize): what a small per-instance reservation keeps in bounds.
    pub vm_size: u64,
    /// Mappings (lines of /proc/PID/maps); `vm.max_map_count` bounds them.
    pub maps: u64,
    /// Open descriptors (entries of /proc/PID/fd); the process's `nofile` limit bounds them.
    pub fds: u64,
}

impl Memory {
    pub fn read(pid: u32) -> std::io::Result<Memory> {
        let rollup = fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
        let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
        let maps = fs::read_to_string(format!("/proc/{pid}/maps"))?.lines().count() as u64;
        Ok(Memory {
            pss: kib_field(&rollup, "Pss:"),
            pss_anon: kib_field(&rollup, "Pss_Anon:"),
            pss_file: kib_field(&rollup, "Pss_File:"),
            rss: kib_field(&status, "VmRSS:"),
            rss_anon: kib_field(&status, "RssAnon:"),
            vm_size: kib_field(&status, "VmSize:"),
            maps,
            fds: fs::read_dir(format!("/proc/{pid}/fd"))?.count() as u64,
        })
    }

    pub fn to_json(self) -> Value {
        json!({
            "pss_bytes": self.pss, "pss_anon_bytes": self.pss_anon, "pss_file_bytes": self.pss_file,
            "vm_rss_bytes": self.rss, "rss_anon_bytes": self.rss_anon, "vm_size_bytes": self.vm_size,
            "mappings": self.maps, "fds": self.fds,
        })
    }
}

/// A `Name:   1234 kB` line, in bytes (0 when absent, as on kernels without the field).
fn kib_field(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Memory the kernel says new work can still get (MemAvailable), in bytes.
pub fn mem_available() -> u64 {
    fs::read_to_string("/proc/meminfo").map(|m| kib_field(&m, "MemAvailable:")).unwrap_or(0)
}

/// The machine, for the report: CPU model, cores, memory, kernel, map limit.
pub fn machine() -> Value {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown".into());
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let read = |p: &str| fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    json!({
        "cpu": model,
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "mem_total_bytes": kib_field(&meminfo, "MemTotal:"),
        "kernel": read("/proc/sys/kernel/osrelease"),
        "max_map_count": read("/proc/sys/vm/max_map_count").parse::<u64>().unwrap_or(0),
    })
}
