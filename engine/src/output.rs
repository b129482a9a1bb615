//! The guest's stdout and stderr: kept for the final result, streamed as `Output` events, and
//! capped (stdout + stderr together) so a print loop cannot eat memory.
//!
//! `print` makes several small writes, so writes are coalesced and sent as events when the
//! guest blocks for tools, at every epoch tick (every few ms while it runs), once 32 KiB are
//! waiting, and when the execution ends.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::mpsc::UnboundedSender;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream as WasiOutputStream, Pollable, StreamResult};

use crate::events::{Event, OutputStream};

#[derive(Default)]
struct Buffers {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    cap: u64,
    truncated: bool,
    unsent: Vec<(OutputStream, Vec<u8>)>,
    unsent_bytes: usize,
    events: Option<UnboundedSender<Event>>,
}

const FLUSH_AT: usize = 32 * 1024;

impl Buffers {
    fn flush(&mut self) {
        self.unsent_bytes = 0;
        let unsent = std::mem::take(&mut self.unsent);
        if let Some(tx) = &self.events {
            for (stream, data) in unsent {
                let _ = tx.send(Event::Output { stream, data });
            }
        }
    }
}

/// Both streams of one execution.
#[derive(Clone)]
pub(crate) struct Output(Arc<Mutex<Buffers>>);

impl Output {
    pub(crate) fn new(cap: u64, events: UnboundedSender<Event>) -> Self {
        Output(Arc::new(Mutex::new(Buffers { cap, events: Some(events), ..Default::default() })))
    }

    pub(crate) fn sink(&self, stream: OutputStream) -> Sink {
        Sink { output: self.clone(), stream }
    }

    pub(crate) fn write(&self, stream: OutputStream, data: &[u8]) {
        let mut b = self.0.lock().unwrap();
        let used = (b.stdout.len() + b.stderr.len()) as u64;
        let room = b.cap.saturating_sub(used) as usize;
        let kept = &data[..data.len().min(room)];
        if kept.len() < data.len() {
            b.truncated = true;
        }
        if kept.is_empty() {
            return;
        }
        match stream {
            OutputStream::Stdout => b.stdout.extend_from_slice(kept),
            OutputStream::Stderr => b.stderr.extend_from_slice(kept),
        }
        match b.unsent.last_mut() {
            Some((last, data)) if *last == stream => data.extend_from_slice(kept),
            _ => b.unsent.push((stream, kept.to_vec())),
        }
        b.unsent_bytes += kept.len();
        if b.unsent_bytes >= FLUSH_AT {
            b.flush();
        }
    }

    /// Sends what was written since the last flush as `Output` events.
    pub(crate) fn flush(&self) {
        let mut b = self.0.lock().unwrap();
        if b.unsent_bytes > 0 {
            b.flush();
        }
    }

    /// (stdout, stderr, truncated) so far, as text (invalid UTF-8 replaced).
    pub(crate) fn snapshot(&self) -> (String, String, bool) {
        let b = self.0.lock().unwrap();
        (
            String::from_utf8_lossy(&b.stdout).into_owned(),
            String::from_utf8_lossy(&b.stderr).into_owned(),
            b.truncated,
        )
    }

    pub(crate) fn sizes(&self) -> (u64, u64) {
        let b = self.0.lock().unwrap();
        (b.stdout.len() as u64, b.stderr.len() as u64)
    }
}

/// One stream as WASI sees it. Writes never block: the guest is never slowed by a slow reader.
#[derive(Clone)]
pub(crate) struct Sink {
    output: Output,
    stream: OutputStream,
}

impl IsTerminal for Sink {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Sink {
    fn p2_stream(&self) -> Box<dyn WasiOutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Sink {
    async fn ready(&mut self) {}
}

impl WasiOutputStream for Sink {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.output.write(self.stream, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for Sink {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.output.write(self.stream, buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
