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

use crate::api::events::{Event, OutputStream};

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

    /// Empties both streams for the next execution of a live session, with its own cap and
    /// events channel.
    pub(crate) fn reset(&self, cap: u64, events: UnboundedSender<Event>) {
        *self.0.lock().unwrap() = Buffers { cap, events: Some(events), ..Default::default() };
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
        (String::from_utf8_lossy(&b.stdout).into_owned(), String::from_utf8_lossy(&b.stderr).into_owned(), b.truncated)
    }

    /// (stdout, stderr, truncated) as bytes, for a sealed image.
    pub(crate) fn kept(&self) -> (Vec<u8>, Vec<u8>, bool) {
        let b = self.0.lock().unwrap();
        (b.stdout.clone(), b.stderr.clone(), b.truncated)
    }

    /// What a thawed execution had printed, kept for its final result (it was sent before).
    pub(crate) fn restore(&self, stdout: Vec<u8>, stderr: Vec<u8>, truncated: bool) {
        let mut b = self.0.lock().unwrap();
        (b.stdout, b.stderr, b.truncated) = (stdout, stderr, truncated);
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

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;

    fn output(cap: u64) -> (Output, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Output::new(cap, tx), rx)
    }

    fn sent(rx: &mut mpsc::UnboundedReceiver<Event>) -> Vec<(OutputStream, String)> {
        let mut out = Vec::new();
        while let Ok(Event::Output { stream, data }) = rx.try_recv() {
            out.push((stream, String::from_utf8(data).unwrap()));
        }
        out
    }

    #[test]
    fn small_writes_are_coalesced_per_stream_until_a_flush() {
        let (out, mut rx) = output(1000);
        out.write(OutputStream::Stdout, b"a");
        out.write(OutputStream::Stdout, b"b\n");
        out.write(OutputStream::Stderr, b"oops\n");
        out.write(OutputStream::Stdout, b"c");
        assert!(sent(&mut rx).is_empty(), "nothing goes out before a flush");
        out.flush();
        let expected = [(OutputStream::Stdout, "ab\n"), (OutputStream::Stderr, "oops\n"), (OutputStream::Stdout, "c")];
        assert_eq!(sent(&mut rx), expected.map(|(s, t)| (s, t.to_string())));
        out.flush();
        assert!(sent(&mut rx).is_empty(), "a flush with nothing new sends nothing");
    }

    #[test]
    fn a_large_write_goes_out_without_waiting_for_a_flush() {
        let (out, mut rx) = output(1 << 20);
        out.write(OutputStream::Stdout, &vec![b'x'; FLUSH_AT]);
        assert_eq!(sent(&mut rx).len(), 1);
    }

    #[test]
    fn the_cap_covers_both_streams_and_flags_truncation() {
        let (out, mut rx) = output(10);
        out.write(OutputStream::Stdout, b"123456");
        out.write(OutputStream::Stderr, b"abcdef");
        out.write(OutputStream::Stdout, b"more");
        out.flush();
        assert_eq!(out.snapshot(), ("123456".into(), "abcd".into(), true));
        assert_eq!(out.sizes(), (6, 4));
        let streamed: String = sent(&mut rx).into_iter().map(|(_, t)| t).collect();
        assert_eq!(streamed, "123456abcd", "only what is kept is streamed");
    }
}
