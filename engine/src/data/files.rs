//! The directories every python-data store preopens, in the order its snapshot recorded them.

use std::path::Path;

use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use crate::error::{Error, Result};
use crate::request::DATA_DIR;

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
