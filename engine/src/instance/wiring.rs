//! An instance's WASI context and what it was made from ([`Wiring`]), so that a hibernated
//! execution can let its context go, and with it the descriptors the context holds
//! (`/mnt/data`, the data runtime's four preopens), and make it again at its thaw. A held-out
//! run found 3 server descriptors per paused HTTP execution even while hibernated: 12,149 at
//! 20,000 paused, so a server with a limit of 20,000 stopped near 6,600. A hibernated
//! execution now holds none of its own.
//!
//! The directory is opened again by its path at the thaw, and only if it is still the
//! directory the execution was given (the same device and inode, not a link): a path that was
//! removed or swapped meanwhile fails the thaw in words rather than being followed.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};

use crate::api::error::{Error, Result};
use crate::api::events::OutputStream;
use crate::api::journal::Recorder;
use crate::api::request::DATA_DIR;
use crate::instance::clock::Monotonic;
use crate::instance::data::files;
use crate::instance::output::Output;

/// What an execution's WASI context is made from.
pub(crate) struct Wiring {
    output: Output,
    dir: Option<DataDir>,
    kind: Kind,
}

enum Kind {
    /// The component's: its clocks and random sources are a journal's, or its own clock.
    Component { journal: Option<Arc<Recorder>>, monotonic: Option<Monotonic> },
    /// The data runtime's: its preopens, and its own clock.
    Data { artifacts: Arc<Path>, monotonic: Monotonic },
}

/// `/mnt/data` on the host, and which directory it was when the execution got it.
struct DataDir {
    path: PathBuf,
    id: (u64, u64),
}

impl DataDir {
    fn of(path: &Path) -> Result<DataDir> {
        let meta = std::fs::metadata(path).map_err(|e| Error::engine(&format!("opening {}", path.display()), e))?;
        Ok(DataDir { path: path.to_path_buf(), id: (meta.dev(), meta.ino()) })
    }

    /// Refused unless the path is still the same directory, and not a link to it.
    fn check(&self) -> std::result::Result<(), String> {
        let same = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.is_dir() && !m.file_type().is_symlink() && (m.dev(), m.ino()) == self.id);
        if same {
            Ok(())
        } else {
            Err(format!(
                "its {DATA_DIR} directory was removed or replaced while it was hibernated, so it cannot go on; run \
                 the program again"
            ))
        }
    }
}

/// WASI as each runtime links it: preview 2 for the component, preview 1 for the data
/// runtime's core module. A store only ever sees its own kind (each runtime's linker links one).
pub(crate) enum Wasi {
    P2 { ctx: WasiCtx, table: ResourceTable },
    P1(WasiP1Ctx),
}

impl Wasi {
    pub(crate) fn p2(ctx: WasiCtx) -> Self {
        Wasi::P2 { ctx, table: ResourceTable::new() }
    }

    pub(crate) fn p1(&mut self) -> &mut WasiP1Ctx {
        match self {
            Wasi::P1(ctx) => ctx,
            Wasi::P2 { .. } => unreachable!("preview 1 is linked only for the data runtime, whose stores have it"),
        }
    }
}

impl Wiring {
    /// The component's context: stdout and stderr to `output`, `data_dir` as `/mnt/data`, the
    /// journal's clocks and random sources, or a monotonic clock reading `monotonic_from` now.
    /// Also returns that clock, when it is the context's own.
    pub(crate) fn component(
        output: &Output,
        data_dir: Option<&Path>,
        journal: Option<&Arc<Recorder>>,
        monotonic_from: u64,
    ) -> Result<(Wiring, Wasi, Option<Monotonic>)> {
        let monotonic = journal.is_none().then(|| Monotonic::continuing(monotonic_from));
        let dir = data_dir.map(DataDir::of).transpose()?;
        let wiring =
            Wiring { output: output.clone(), dir, kind: Kind::Component { journal: journal.cloned(), monotonic } };
        let wasi = wiring.wire()?;
        Ok((wiring, wasi, monotonic))
    }

    /// The data runtime's context, with its clock reading `monotonic_from` now.
    pub(crate) fn data(
        artifacts: Arc<Path>,
        output: &Output,
        data_dir: Option<&Path>,
        monotonic_from: u64,
    ) -> Result<(Wiring, Wasi, Monotonic)> {
        let monotonic = Monotonic::continuing(monotonic_from);
        let dir = data_dir.map(DataDir::of).transpose()?;
        let wiring = Wiring { output: output.clone(), dir, kind: Kind::Data { artifacts, monotonic } };
        let wasi = wiring.wire()?;
        Ok((wiring, wasi, monotonic))
    }

    /// The context made again, for a thaw: refused when `/mnt/data` is not the directory it
    /// was.
    pub(crate) fn rewire(&self) -> std::result::Result<Wasi, String> {
        if let Some(dir) = &self.dir {
            dir.check()?;
        }
        let wasi = self.wire().map_err(|e| e.message().to_string())?;
        // Checked again once opened: a swap between the check and the open is caught too.
        match &self.dir {
            Some(dir) => dir.check().map(|()| wasi),
            None => Ok(wasi),
        }
    }

    /// A context that holds no descriptor, for a hibernated instance's store (nothing runs
    /// in it until the thaw rewires it).
    pub(crate) fn unwired(&self) -> Wasi {
        let mut builder = WasiCtxBuilder::new();
        match self.kind {
            Kind::Component { .. } => Wasi::p2(builder.build()),
            Kind::Data { .. } => Wasi::P1(builder.build_p1()),
        }
    }

    fn wire(&self) -> Result<Wasi> {
        let path = self.dir.as_ref().map(|d| d.path.as_path());
        match &self.kind {
            Kind::Component { journal, monotonic } => {
                let mut wasi = WasiCtxBuilder::new();
                wasi.stdout(self.output.sink(OutputStream::Stdout)).stderr(self.output.sink(OutputStream::Stderr));
                if let Some(dir) = path {
                    wasi.preopened_dir(dir, DATA_DIR, FsPerms::ReadWrite)
                        .map_err(|e| Error::engine(&format!("opening {}", dir.display()), e))?;
                }
                match (journal, monotonic) {
                    (Some(journal), _) => journal.apply(&mut wasi),
                    (None, Some(clock)) => {
                        wasi.monotonic_clock(*clock);
                    }
                    (None, None) => {}
                }
                Ok(Wasi::p2(wasi.build()))
            }
            Kind::Data { artifacts, monotonic } => {
                Ok(Wasi::P1(files::wasi(artifacts, &self.output, path, *monotonic)?))
            }
        }
    }
}
