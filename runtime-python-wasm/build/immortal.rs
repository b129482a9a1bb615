//! Makes the pre-initialisation snapshot's objects immortal in the component's memory image,
//! so that no instance writes their reference counts (why, and which objects:
//! `python/ptc_runtime/immortal.py`, which leaves their addresses in the snapshot).
//!
//! The image is the CPython module's active data segments. Each count is rewritten in place,
//! same length, so nothing else in the component moves.

use base64::Engine as _;
use wasmparser::{DataKind, Operator, Parser, Payload};

const MARKER: &[u8] = b"<<PTC-IMMORTAL:";
const END: &[u8] = b">>";
/// `_Py_IMMORTAL_INITIAL_REFCNT` of 32-bit CPython 3.14 (`Include/refcount.h`): a count of at
/// least `1 << 30` is immortal; `6 << 28` and up would claim static allocation.
const IMMORTAL: u32 = 5 << 28;
const MORTAL_MAX: u32 = 1 << 30;

/// One active data segment: where it goes in linear memory and where its bytes are in the file.
struct Segment {
    addr: u32,
    file: usize,
    len: usize,
}

/// Rewrites the counts of the objects whose addresses the snapshot lists.
pub fn patch(component: &mut [u8]) -> Result<(), String> {
    let segments = data_segments(component)?;
    for addr in listed_addresses(component, &segments)? {
        make_immortal(component, &segments, addr)?;
    }
    Ok(())
}

fn data_segments(bytes: &[u8]) -> Result<Vec<Segment>, String> {
    let mut segments = Vec::new();
    let mut modules_with_data = 0;
    for payload in Parser::new(0).parse_all(bytes) {
        let Payload::DataSection(reader) = payload.map_err(|e| e.to_string())? else { continue };
        let before = segments.len();
        for data in reader {
            let data = data.map_err(|e| e.to_string())?;
            let DataKind::Active { memory_index, offset_expr } = data.kind else { continue };
            if memory_index != 0 {
                return Err(format!("a data segment for memory {memory_index}"));
            }
            let Ok(Operator::I32Const { value }) = offset_expr.get_operators_reader().read() else {
                return Err("a data segment whose offset is not a constant".into());
            };
            let file = data.data.as_ptr() as usize - bytes.as_ptr() as usize;
            segments.push(Segment { addr: value as u32, file, len: data.data.len() });
        }
        modules_with_data += usize::from(segments.len() > before);
    }
    if modules_with_data != 1 {
        return Err(format!("{modules_with_data} core modules have memory data; expected CPython's alone"));
    }
    segments.sort_by_key(|s| s.addr);
    Ok(segments)
}

/// The file offset of linear-memory byte `addr`, if the image holds it (bytes between
/// segments are zero).
fn locate(segments: &[Segment], addr: u32) -> Option<usize> {
    let i = segments.partition_point(|s| s.addr <= addr).checked_sub(1)?;
    let s = &segments[i];
    let off = (addr - s.addr) as usize;
    (off < s.len).then_some(s.file + off)
}

fn read_u32(bytes: &[u8], segments: &[Segment], addr: u32) -> u32 {
    let mut word = [0u8; 4];
    for (k, b) in word.iter_mut().enumerate() {
        if let Some(at) = locate(segments, addr + k as u32) {
            *b = bytes[at];
        }
    }
    u32::from_le_bytes(word)
}

/// The addresses in the one live bytes object `MARKER base64 END` (its header's size field
/// says it is that object, not a stale copy in freed memory).
fn listed_addresses(bytes: &[u8], segments: &[Segment]) -> Result<Vec<u32>, String> {
    let mut found = Vec::new();
    for s in segments {
        let data = &bytes[s.file..s.file + s.len];
        let mut from = 0;
        while let Some(at) = find(&data[from..], MARKER).map(|i| i + from) {
            from = at + 1;
            let text = &data[at + MARKER.len()..];
            let n = text.iter().take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')).count();
            if n == 0 || !text[n..].starts_with(END) {
                continue;
            }
            // PyBytesObject on 32-bit: refcount, type, size, hash, then the bytes.
            let object = s.addr + at as u32 - 16;
            if read_u32(bytes, segments, object + 8) as usize != MARKER.len() + n + END.len() {
                continue;
            }
            found.push(text[..n].to_vec());
        }
    }
    let [text] = found.as_slice() else {
        return Err(format!("{} address lists in the snapshot; expected one", found.len()));
    };
    let raw = base64::engine::general_purpose::STANDARD.decode(text).map_err(|e| e.to_string())?;
    let (mut addresses, mut addr, mut delta, mut shift) = (Vec::new(), 0u32, 0u32, 0);
    for b in raw {
        delta |= u32::from(b & 0x7f) << shift;
        shift += 7;
        if b < 0x80 {
            addr = addr.checked_add(delta).ok_or("an address past 4 GiB")?;
            addresses.push(addr);
            (delta, shift) = (0, 0);
        }
    }
    Ok(addresses)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn make_immortal(bytes: &mut [u8], segments: &[Segment], addr: u32) -> Result<(), String> {
    let count = read_u32(bytes, segments, addr);
    let ty = read_u32(bytes, segments, addr + 4);
    if count == 0 || count >= MORTAL_MAX || ty == 0 {
        return Err(format!("no live mortal object at {addr:#x} (count {count:#x}, type {ty:#x})"));
    }
    for (k, b) in IMMORTAL.to_le_bytes().into_iter().enumerate() {
        match locate(segments, addr + k as u32) {
            Some(at) => bytes[at] = b,
            // A byte between segments is zero; it must stay so.
            None if b == 0 => {}
            None => return Err(format!("the count at {addr:#x} is not in the image")),
        }
    }
    Ok(())
}
