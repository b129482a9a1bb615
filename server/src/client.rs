//! `ptc-engine run`: a small gRPC client that runs a file and answers tool calls by running a
//! command per call (all calls of a batch in parallel).

use std::path::{Component, Path};
use std::process::Stdio;

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cli::RunArgs;
use crate::execute::ExecuteStream;
use crate::proto::{self, sandbox_client::SandboxClient, server_message::Message};

/// Runs the program; returns the process exit code.
pub async fn run(args: RunArgs) -> anyhow::Result<i32> {
    let code = read_code(&args.file).await?;
    let tools = match &args.tools {
        None => vec![],
        Some(path) => {
            parse_tools(&std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?)?
        }
    };
    let (server, local) = server(&args).await?;

    let mut client = SandboxClient::connect(server.clone()).await.with_context(|| format!("connecting to {server}"))?;
    let start = proto::Start {
        code,
        tools,
        limits: Some(proto::Limits { timeout_ms: args.timeout_ms, ..Default::default() }),
        runtime: args.runtime().as_str().into(),
        return_files: args.files_out.is_some(),
        ..Default::default()
    };
    let mut stream = ExecuteStream::open(&mut client, start, args.api_key.as_deref()).await?;

    let mut exit = 1;
    while let Some(message) = stream.message().await? {
        if let Some(code) = handle(message, &stream, &args).await? {
            exit = code;
        }
    }
    drop(stream);
    if let Some(server) = local {
        server.shutdown();
        server.wait().await;
    }
    Ok(exit)
}

/// The program's code: the file, or stdin for `-`.
async fn read_code(file: &Path) -> anyhow::Result<String> {
    if file.as_os_str() == "-" {
        let mut s = String::new();
        tokio::io::stdin().read_to_string(&mut s).await?;
        Ok(s)
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))
    }
}

/// The server's URL: `--server`, or with `--local` an embedded one started here (returned too,
/// to be stopped at the end).
async fn server(args: &RunArgs) -> anyhow::Result<(String, Option<crate::RunningServer>)> {
    if !args.local {
        return Ok((args.server.clone(), None));
    }
    let mut config = crate::ServerConfig::ephemeral();
    if args.runtime() == ptc_engine::Runtime::PythonData {
        config.engine.python_data = Some(ptc_engine::python_data_artifacts());
    }
    let running = crate::start(config).await?;
    let url = format!("http://{}", running.grpc_addr);
    Ok((url, Some(running)))
}

/// Acts on one message of the execution: shows its output, answers its tool calls, saves its
/// files. Returns the exit code once it has ended.
async fn handle(message: Message, stream: &ExecuteStream, args: &RunArgs) -> anyhow::Result<Option<i32>> {
    match message {
        Message::Output(o) => {
            // Plain blocking writes: small, and they keep output in stream order.
            use std::io::Write;
            if o.stream == proto::OutputStream::Stderr as i32 {
                std::io::stderr().write_all(&o.data)?;
            } else {
                let mut out = std::io::stdout().lock();
                out.write_all(&o.data)?;
                out.flush()?;
            }
        }
        Message::ToolCalls(batch) => {
            let handler = args.tool_handler.clone();
            let results = futures_join(batch.calls.into_iter().map(|c| answer(handler.clone(), c))).await;
            stream.send_results(results).await?;
        }
        Message::Completed(c) => {
            if c.return_value_json != "null" {
                println!("{}", c.return_value_json);
            }
            save_files(args.files_out.as_deref(), &c.files)?;
            return Ok(Some(0));
        }
        Message::Failed(f) => {
            save_files(args.files_out.as_deref(), &f.files)?;
            let kind = proto::FailureKind::try_from(f.kind).unwrap_or(proto::FailureKind::Internal);
            if kind != proto::FailureKind::PythonError {
                eprintln!("ptc-engine: {} ({})", f.message, kind.as_str_name());
            }
            return Ok(Some(f.exit_code.unwrap_or(1)));
        }
        Message::Error(e) => eprintln!("ptc-engine: {}: {}", e.code, e.message),
        Message::Started(_) => {}
    }
    Ok(None)
}

/// Writes returned files under `dir` (names are the server's; only plain relative paths are
/// written), and says on stderr which ones came back without their bytes.
fn save_files(dir: Option<&Path>, files: &[proto::File]) -> anyhow::Result<()> {
    let Some(dir) = dir else { return Ok(()) };
    for file in files {
        let rel = Path::new(&file.name);
        if file.name.is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            eprintln!("ptc-engine: skipped a returned file with an unsafe name: {:?}", file.name);
            continue;
        }
        if file.omitted {
            eprintln!("ptc-engine: {} ({} bytes) was too large to return", file.name, file.size);
            continue;
        }
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, &file.content).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

async fn futures_join<F: std::future::Future<Output = proto::ToolResult> + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<proto::ToolResult> {
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("tool handler task"));
    }
    out
}

fn parse_tools(text: &str) -> anyhow::Result<Vec<proto::Tool>> {
    let value: serde_json::Value = serde_json::from_str(text).context("tools file is not JSON")?;
    let Some(items) = value.as_array() else { bail!("tools file must hold a JSON array") };
    items
        .iter()
        .map(|t| {
            let name = t["name"].as_str().context("every tool needs a \"name\"")?.to_string();
            Ok(proto::Tool {
                name,
                description: t["description"].as_str().unwrap_or_default().to_string(),
                parameters_json: if t["parameters"].is_null() { String::new() } else { t["parameters"].to_string() },
                namespace: t["namespace"].as_str().unwrap_or_default().to_string(),
                ..Default::default()
            })
        })
        .collect()
}

async fn answer(handler: Option<String>, call: proto::ToolCall) -> proto::ToolResult {
    let outcome = match handler {
        None => Err(format!("no --tool-handler given to answer {:?}", call.name)),
        Some(cmd) => run_handler(&cmd, &call).await.map(|text| {
            let trimmed = text.trim();
            if serde_json::from_str::<serde::de::IgnoredAny>(trimmed).is_ok() && !trimmed.is_empty() {
                trimmed.to_string()
            } else {
                serde_json::Value::String(text).to_string()
            }
        }),
    };
    ptc_engine::ToolResult { id: call.id, outcome }.into()
}

async fn run_handler(cmd: &str, call: &proto::ToolCall) -> Result<String, String> {
    let input: serde_json::Value = serde_json::from_str(&call.input_json).unwrap_or(serde_json::Value::Null);
    let request = serde_json::json!({"id": call.id, "name": call.name, "input": input}).to_string();
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run the tool handler: {e}"))?;
    let mut stdin = child.stdin.take().expect("piped");
    let _ = stdin.write_all(request.as_bytes()).await;
    drop(stdin);
    let out = child.wait_with_output().await.map_err(|e| format!("tool handler failed: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        Err(if stderr.is_empty() { format!("tool handler exited with {}", out.status) } else { stderr })
    }
}
