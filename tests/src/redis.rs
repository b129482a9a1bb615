//! A real `redis-server` for the tests of a cluster's shared store (Debian's `redis-server`
//! package; `.ci/run` installs it).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::binary::{Process, free_port};

/// A `redis-server` in memory only, on `port` (a free one if `None`), answering PING.
pub fn start(port: Option<u16>) -> (Process, u16) {
    let port = port.unwrap_or_else(free_port);
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server (Debian package redis-server; .ci/run installs it)");
    let process = Process(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let mut reply = [0u8; 7];
            if s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n" {
                return (process, port);
            }
        }
        assert!(Instant::now() < deadline, "redis-server did not answer");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends one command (its words) in RESP and returns the raw reply.
pub fn command(port: u16, words: &[&str]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut out = format!("*{}\r\n", words.len());
    for w in words {
        out.push_str(&format!("${}\r\n{w}\r\n", w.len()));
    }
    s.write_all(out.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 65536];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Changes one byte in the middle of the first sealed execution image in the Redis at `port`:
/// a node must refuse to thaw it (and replay the journal instead).
pub fn alter_an_image(port: u16) {
    let keys = command(port, &["KEYS", "ptc:j:*:s"]);
    let key = keys.lines().find(|l| l.starts_with("ptc:j:")).unwrap().to_string();
    let flip = "local v = redis.call('HGET', KEYS[1], 'image') local i = math.floor(#v / 2) \
                redis.call('HSET', KEYS[1], 'image', string.sub(v, 1, i - 1) .. string.char((string.byte(v, i) + 1) % 256) .. string.sub(v, i + 1)) return 1";
    assert!(command(port, &["EVAL", flip, "1", &key]).starts_with(":1"));
}
