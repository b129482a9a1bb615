//! One python-data instance: its turns, and the runs, resumes, snapshots and restores that
//! are jobs of a turn.

use base64::Engine as _;
use serde::Deserialize;
use wasmtime::{Instance, Memory, Store, TypedFunc};

use super::door::MAX_FRAME;
use crate::instance::bindings;
use crate::instance::host::{HostState, TurnState};

/// What a turn runs: everything else crosses the door.
const TURN_SOURCE: &str = "__import__('ptc_data').turn()\n";

/// One tool as the door's job carries it: name, description, parameters, namespace, returns,
/// observed.
type ToolRow<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str, bool);

/// One instance: the exports a turn uses (in an execution's store, or pre-initialisation's).
pub(crate) struct DataInstance {
    memory: Memory,
    alloc: TypedFunc<i32, i32>,
    turn: TypedFunc<(i32, i32), i32>,
}

impl DataInstance {
    pub(super) fn new<T>(store: &mut Store<T>, instance: &Instance) -> wasmtime::Result<Self> {
        let memory = instance
            .get_memory(&mut *store, "memory")
            .ok_or_else(|| wasmtime::Error::msg("python-data exports no memory"))?;
        let alloc = instance.get_typed_func(&mut *store, "host_alloc")?;
        let turn = instance.get_typed_func(&mut *store, "turn")?;
        Ok(DataInstance { memory, alloc, turn })
    }

    /// Runs `source` as one `turn` (the guest's `__main__` of a session); its exit status.
    pub(super) async fn run_turn<T: Send>(&self, store: &mut Store<T>, source: &str) -> wasmtime::Result<i32> {
        let at = self.alloc.call_async(&mut *store, source.len() as i32).await? as u32 as usize;
        if at == 0 {
            return Err(wasmtime::Error::msg("python-data could not allocate a turn's source (its memory is full)"));
        }
        self.memory.write(&mut *store, at, source.as_bytes())?;
        self.turn.call_async(&mut *store, (at as i32, source.len() as i32)).await
    }

    /// Runs a snapshot or restore `job` (one `turn`) and returns what the guest answered: its
    /// fields on success, its words on failure (`what` names the job in words of our own).
    async fn answer<T: serde::de::DeserializeOwned>(
        &self,
        store: &mut Store<HostState>,
        job: serde_json::Value,
        max_frame: Option<usize>,
        what: &str,
    ) -> wasmtime::Result<Result<T, String>> {
        store.data_mut().turn = TurnState { job: Some(job.to_string()), max_frame, ..TurnState::default() };
        let status = self.run_turn(store, TURN_SOURCE).await?;
        let turn = std::mem::take(&mut store.data_mut().turn);
        let Some(answer) = turn.answer else {
            return Ok(Err(format!("the python-data runtime did not answer the {what} (status {status})")));
        };
        if answer["ok"] != true {
            let error = answer["error"].as_str().unwrap_or("the python-data runtime failed without saying why");
            return Ok(Err(error.to_string()));
        }
        Ok(serde_json::from_value(answer)
            .map_err(|e| format!("the python-data runtime answered a malformed {what}: {e}")))
    }

    /// The session's state, as the component's `snapshot` export gives it.
    pub(crate) async fn snapshot(
        &self,
        store: &mut Store<HostState>,
        max_bytes: u64,
    ) -> wasmtime::Result<Result<bindings::SessionState, String>> {
        // The state crosses as base64 (4 bytes per 3) inside a JSON frame.
        let base64_bytes = max_bytes.div_ceil(3).saturating_mul(4).saturating_add(1024 * 1024);
        let max_frame = usize::try_from(base64_bytes).unwrap_or(usize::MAX).max(MAX_FRAME);
        let job = serde_json::json!({"kind": "snapshot", "max_bytes": max_bytes});
        let answer: StateAnswer = match self.answer(store, job, Some(max_frame), "snapshot").await? {
            Ok(answer) => answer,
            Err(e) => return Ok(Err(e)),
        };
        Ok(base64::engine::general_purpose::STANDARD
            .decode(&answer.data)
            .map(|data| bindings::SessionState {
                data,
                kept: answer.kept,
                modules: answer.modules,
                dropped: dropped(answer.dropped),
            })
            .map_err(|e| format!("the python-data runtime answered a malformed snapshot: {e}")))
    }

    /// Rebuilds a snapshot's state, as the component's `restore` export does.
    pub(crate) async fn restore(
        &self,
        store: &mut Store<HostState>,
        data: &[u8],
    ) -> wasmtime::Result<Result<bindings::Restored, String>> {
        let job =
            serde_json::json!({"kind": "restore", "data": base64::engine::general_purpose::STANDARD.encode(data)});
        let answer: Result<RestoredAnswer, String> = self.answer(store, job, None, "restore").await?;
        Ok(answer.map(|a| bindings::Restored { kept: a.kept, dropped: dropped(a.dropped) }))
    }

    /// Runs one program (one `turn`): `session` keeps its globals for the next.
    pub(crate) async fn execute(
        &self,
        store: &mut Store<HostState>,
        code: &str,
        tools: Option<&[bindings::ToolDef]>,
        session: bool,
        env: &[(String, String)],
    ) -> wasmtime::Result<bindings::Outcome> {
        // `null`: the live session's previous tools.
        let tools = tools.map(|tools| {
            tools
                .iter()
                .map(|t| -> ToolRow<'_> {
                    (&t.name, &t.description, &t.parameters, &t.namespace, &t.returns, t.observed)
                })
                .collect::<Vec<_>>()
        });
        let job = serde_json::json!({"kind": "run", "code": code, "tools": tools, "session": session, "env": env});
        self.run(store, job).await
    }

    /// Carries on the program whose run (or last resume) reported `hibernated`, in this
    /// instance or in one its memory was thawed into.
    pub(crate) async fn resume(&self, store: &mut Store<HostState>) -> wasmtime::Result<bindings::Outcome> {
        self.run(store, serde_json::json!({"kind": "resume"})).await
    }

    /// The instance's linear memory (hibernation keeps and thaws it).
    pub(crate) fn memory(&self) -> Memory {
        self.memory
    }

    /// One turn running a program's `job` (a run or a resume), to its outcome.
    async fn run(&self, store: &mut Store<HostState>, job: serde_json::Value) -> wasmtime::Result<bindings::Outcome> {
        store.data_mut().turn = TurnState { job: Some(job.to_string()), ..TurnState::default() };
        let status = self.run_turn(store, TURN_SOURCE).await?;
        let turn = std::mem::take(&mut store.data_mut().turn);
        Ok(turn.outcome.unwrap_or_else(|| {
            bindings::Outcome::Failed(bindings::Failure {
                kind: bindings::FailureKind::Internal,
                message: format!("the python-data runtime ended the program without reporting how (status {status})"),
                traceback: String::new(),
                exit_code: None,
            })
        }))
    }
}

/// A snapshot job's answer.
#[derive(Deserialize)]
struct StateAnswer {
    data: String,
    kept: Vec<String>,
    modules: Vec<String>,
    dropped: Vec<(String, String)>,
}

/// A restore job's answer.
#[derive(Deserialize)]
struct RestoredAnswer {
    kept: Vec<String>,
    dropped: Vec<(String, String)>,
}

fn dropped(pairs: Vec<(String, String)>) -> Vec<bindings::Dropped> {
    pairs.into_iter().map(|(name, reason)| bindings::Dropped { name, reason }).collect()
}
