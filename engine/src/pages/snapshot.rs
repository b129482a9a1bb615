//! A JavaScript session's snapshot: its instance's memory, as the pages that differ from a
//! fresh instance's (what hibernation keeps), bound to the component build they were taken
//! from. Every global is kept this way, closures and classes included; a Python session's
//! snapshot is instead what its guest pickles (`session.py`).
//!
//! The layout: `PTCJ`, a version byte, the component's SHA-256, and the pages (postcard). The
//! bytes are the caller's to keep (the server seals them); whatever they hold, a restore only
//! writes pages into the sandbox's own memory, within its limit (`thaw` checks the sizes and
//! offsets).

use super::Frozen;

const MAGIC: &[u8; 4] = b"PTCJ";
const VERSION: u8 = 1;
const HEADER: usize = MAGIC.len() + 1 + 32;

/// The snapshot of pages `frozen`, taken from the component built as `build`.
pub(crate) fn encode(frozen: &Frozen, build: &[u8; 32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + frozen.packed.len() + frozen.pages.len() * 4 + 16);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(build);
    postcard::to_extend(frozen, out).expect("pages serialise")
}

/// The pages of a snapshot, if it is one of the component built as `build`; else why not.
pub(crate) fn decode(bytes: &[u8], build: &[u8; 32]) -> Result<Frozen, String> {
    if bytes.len() < HEADER || &bytes[..MAGIC.len()] != MAGIC || bytes[MAGIC.len()] != VERSION {
        return Err("it is not a snapshot of a javascript session".into());
    }
    if &bytes[MAGIC.len() + 1..HEADER] != build {
        return Err("it was taken with another build of the javascript runtime, whose memory it holds; take a new \
                    snapshot with this one"
            .into());
    }
    postcard::from_bytes(&bytes[HEADER..]).map_err(|e| format!("it is malformed: {e}"))
}
