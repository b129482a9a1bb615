//! The component's compressed forms: zstd frames with a 128 MiB window and long-distance
//! matching, which reaches back across the component's 26 MB memory image. Shared by the build
//! script (the embedded copy) and the library (that copy inflated, and the engine's component
//! compiled ahead, a delta against the component).

use std::io::{Error, Result};

use zstd::zstd_safe::{self, CParameter};

fn failed(code: usize) -> Error {
    Error::other(zstd_safe::get_error_name(code))
}

/// `bytes` as one zstd frame at `level`, against `prefix` when given (a delta, as
/// `zstd --patch-from` makes: the frame inflates only with the same prefix).
pub fn compress(bytes: &[u8], prefix: Option<&[u8]>, level: i32) -> Result<Vec<u8>> {
    let mut compressor = zstd::bulk::Compressor::new(level)?;
    for parameter in [CParameter::EnableLongDistanceMatching(true), CParameter::WindowLog(27)] {
        compressor.set_parameter(parameter)?;
    }
    if let Some(prefix) = prefix {
        compressor.context_mut().ref_prefix(prefix).map_err(failed)?;
    }
    compressor.compress(bytes)
}

/// The most a frame may inflate to: the component is 32 MB and its compiled form 49 MB, so a
/// frame that says more is not one of theirs, and is refused before anything is allocated.
pub const MAX_INFLATED: u64 = 512 << 20;

/// Inflates a frame [`compress`] wrote, against the same `prefix`.
pub fn inflate(frame: &[u8], prefix: Option<&[u8]>) -> Result<Vec<u8>> {
    let size = zstd_safe::get_frame_content_size(frame)
        .ok()
        .flatten()
        .ok_or_else(|| Error::other("a zstd frame without its content size"))?;
    if size > MAX_INFLATED {
        return Err(Error::other(format!("a zstd frame of {size} bytes inflated, more than {MAX_INFLATED}")));
    }
    let mut context = zstd_safe::DCtx::create();
    if let Some(prefix) = prefix {
        context.ref_prefix(prefix).map_err(failed)?;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).map_err(Error::other)?);
    context.decompress(&mut bytes, frame).map_err(failed)?;
    Ok(bytes)
}
