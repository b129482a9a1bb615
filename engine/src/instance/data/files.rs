//! The WASI context of a python-data store: the directories it preopens, in the order its
//! snapshot recorded them, its output and its clock.

use std::path::Path;

use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use crate::api::error::{Error, Result};
use crate::api::events::OutputStream;
use crate::api::request::DATA_DIR;
use crate::instance::clock::Monotonic;
use crate::instance::output::Output;

/// Where the guest finds the standard library zip (`python315.zip`), and matplotlib's data
/// beside the path inside it that matplotlib computes from its `__file__`.
const LIB_DIR: &str = "/usr/local/lib";
const MPL_DATA_DIR: &str = "/usr/local/lib/python315.zip/matplotlib/mpl-data";

/// How many directories [`preopens`] opens.
pub(crate) const PREOPENS: usize = 4;

/// `/usr/local/lib`, matplotlib's data, `/tmp` and `/mnt/data`, in this order in every store
/// (pre-initialisation adds `/ptc` after them).
pub(super) fn preopens(
    wasi: &mut WasiCtxBuilder,
    artifacts: &Path,
    (tmp, tmp_perms): (&Path, FsPerms),
    (data, data_perms): (&Path, FsPerms),
) -> Result<()> {
    let open = |wasi: &mut WasiCtxBuilder, host: &Path, guest: &str, perms| {
        wasi.preopened_dir(host, guest, perms)
            .map(|_| ())
            .map_err(|e| Error::engine(&format!("opening {}", host.display()), e))
    };
    open(wasi, &artifacts.join("lib"), LIB_DIR, FsPerms::ReadOnly)?;
    open(wasi, &artifacts.join("mpl-data"), MPL_DATA_DIR, FsPerms::ReadOnly)?;
    open(wasi, tmp, "/tmp", tmp_perms)?;
    open(wasi, data, DATA_DIR, data_perms)
}

/// The WASI context of one store of the runtime whose files are in `artifacts`: output
/// captured, the preopens of the snapshot, in its order, and the monotonic clock the host
/// reads (a thaw continues it).
pub(crate) fn wasi(artifacts: &Path, output: &Output, data_dir: Option<&Path>, clock: Monotonic) -> Result<WasiP1Ctx> {
    let mut wasi = WasiCtxBuilder::new();
    wasi.stdout(output.sink(OutputStream::Stdout)).stderr(output.sink(OutputStream::Stderr)).args(&["python"]);
    wasi.monotonic_clock(clock);
    let empty = artifacts.join("empty");
    let data = match data_dir {
        Some(dir) => (dir, FsPerms::ReadWrite),
        None => (empty.as_path(), FsPerms::ReadOnly),
    };
    preopens(&mut wasi, artifacts, (&empty, FsPerms::ReadOnly), data)?;
    Ok(wasi.build_p1())
}
