//! Where hibernated instances' pages are kept, and what they may take. A held-out run kept
//! 1,500 executions of one tenant paused, each holding ~1 MB of incompressible data: 1,544 MiB
//! of images in the server's memory, bounded only by the memory budget that every running
//! program shares (3/4 of the machine), so one tenant's paused programs could starve every
//! tenant's running ones. Now:
//! - **in memory**, all images together take at most [`crate::api::config::EngineConfig::hibernated_memory`]
//!   (and are charged to the memory budget, as before, while they are there);
//! - **on disk**, past that: one file per image in a directory of this engine's own under
//!   [`crate::api::config::EngineConfig::hibernated_disk`], bounded in total, read back and removed at the
//!   thaw (~1 ms more for a 45 KiB image);
//! - **per tenant**, memory and disk together take at most
//!   [`crate::api::config::EngineConfig::tenant_hibernated`]; a tenant past it starts nothing new
//!   (`Engine::start` says why) until some of its paused executions end.
//!
//! An image that fits nowhere is not kept: its execution stays live, as one that cannot be
//! hibernated does, and holds its instance and slot until it is answered or ends.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::Frozen;
use crate::api::config::MIB;
use crate::calls::shares::MemoryClaim;

/// The engine's hibernated images: their bounds and what they take now.
pub(crate) struct Images {
    memory_bound: u64,
    tenant_bound: Option<u64>,
    disk: Option<Disk>,
    counts: Mutex<Counts>,
}

/// The directory images past the memory bound go to, this engine's own.
struct Disk {
    dir: PathBuf,
    bound: u64,
    next: AtomicU64,
}

#[derive(Default)]
struct Counts {
    memory: u64,
    disk: u64,
    tenants: HashMap<String, u64>,
    /// Tenants one of whose images was refused for their bound, until one of theirs goes.
    full: std::collections::HashSet<String>,
}

/// One hibernated instance's pages, where they are kept, and their charge.
pub(crate) struct Kept {
    place: Place,
    charge: Charge,
}

enum Place {
    Memory(Frozen),
    Disk(PathBuf),
    Taken,
}

/// What a kept image takes from the bounds, given back when it is dropped or taken.
struct Charge {
    images: Arc<Images>,
    tenant: Option<String>,
    bytes: u64,
    disk: bool,
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut counts = self.images.counts.lock().unwrap_or_else(|e| e.into_inner());
        if self.disk {
            counts.disk = counts.disk.saturating_sub(self.bytes);
            metrics::gauge!("ptc_hibernated_disk_bytes").decrement(self.bytes as f64);
        } else {
            counts.memory = counts.memory.saturating_sub(self.bytes);
        }
        if let Some(tenant) = &self.tenant {
            counts.full.remove(tenant);
            if let Some(t) = counts.tenants.get_mut(tenant) {
                *t = t.saturating_sub(self.bytes);
                if *t == 0 {
                    counts.tenants.remove(tenant);
                }
            }
        }
    }
}

impl Images {
    /// `disk`: the directory under which this engine makes one of its own for images past
    /// `memory_bound`, and how much they may take there.
    pub(crate) fn new(memory_bound: u64, disk: Option<(&Path, u64)>, tenant_bound: Option<u64>) -> Arc<Images> {
        let disk = disk.and_then(|(parent, bound)| match Disk::make(parent, bound) {
            Ok(disk) => Some(disk),
            Err(e) => {
                tracing::warn!(
                    "hibernated images will not go to disk: making a directory under {}: {e}",
                    parent.display()
                );
                None
            }
        });
        Arc::new(Images { memory_bound, tenant_bound, disk, counts: Mutex::default() })
    }

    /// Bytes of images `tenant`'s executions have kept.
    pub(crate) fn of_tenant(&self, tenant: &str) -> u64 {
        self.lock().tenants.get(tenant).copied().unwrap_or(0)
    }

    /// Why `tenant` may start nothing new: its images are at its bound (one of them did not
    /// fit, and none has gone since).
    pub(crate) fn refusal(&self, tenant: &str) -> Option<String> {
        let bound = self.tenant_bound?;
        let counts = self.lock();
        let held = counts.tenants.get(tenant).copied().unwrap_or(0);
        (held >= bound || counts.full.contains(tenant)).then(|| {
            format!(
                "this tenant's paused executions hold {} of hibernated state, its limit on this server ({}): \
                 answer or cancel some of them before starting another",
                mib(held),
                mib(bound)
            )
        })
    }

    /// Bytes of images kept in memory and on disk now.
    pub(crate) fn totals(&self) -> (u64, u64) {
        let counts = self.lock();
        (counts.memory, counts.disk)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `frozen`, `tenant`'s: in memory (charged to `claim`) while that bound allows, on
    /// disk past it; or says why it fits nowhere. `thawing`: an image opened for a thaw that
    /// follows at once, kept in memory past the bounds (it is gone again in a moment).
    pub(crate) async fn keep(
        self: &Arc<Self>,
        tenant: Option<&str>,
        frozen: Frozen,
        claim: &mut MemoryClaim,
        thawing: bool,
    ) -> Result<Kept, String> {
        let bytes = frozen.size();
        let disk = {
            let mut counts = self.lock();
            let held = tenant.map_or(0, |t| counts.tenants.get(t).copied().unwrap_or(0));
            if let (Some(bound), false) = (self.tenant_bound, thawing)
                && held + bytes > bound
            {
                if let Some(t) = tenant {
                    counts.full.insert(t.to_string());
                }
                return Err(format!("the tenant's hibernated images would pass its bound ({})", mib(bound)));
            }
            let in_memory = thawing || counts.memory + bytes <= self.memory_bound;
            let disk = match &self.disk {
                _ if in_memory && claim.grow(bytes).is_ok() => false,
                Some(disk) if counts.disk + bytes <= disk.bound => true,
                _ => {
                    return Err(format!(
                        "hibernated images fill the memory kept for them ({}){}",
                        mib(self.memory_bound),
                        if self.disk.is_some() { " and the disk" } else { "" }
                    ));
                }
            };
            if disk {
                counts.disk += bytes;
            } else {
                counts.memory += bytes;
            }
            if let Some(t) = tenant {
                *counts.tenants.entry(t.to_string()).or_default() += bytes;
            }
            disk
        };
        let charge = Charge { images: self.clone(), tenant: tenant.map(str::to_string), bytes, disk };
        if !disk {
            return Ok(Kept { place: Place::Memory(frozen), charge });
        }
        metrics::gauge!("ptc_hibernated_disk_bytes").increment(bytes as f64);
        let path = self.disk.as_ref().expect("chosen only with a disk").path();
        let written = path.clone();
        tokio::task::spawn_blocking(move || write(&written, &frozen))
            .await
            .map_err(|e| format!("writing the image failed: {e}"))?
            .map_err(|e| format!("writing the image to {} failed: {e}", path.display()))?;
        Ok(Kept { place: Place::Disk(path), charge })
    }
}

/// `bytes` in MiB, with a decimal where it is not whole.
fn mib(bytes: u64) -> String {
    match bytes % MIB {
        0 => format!("{} MiB", bytes / MIB),
        _ => format!("{:.1} MiB", bytes as f64 / MIB as f64),
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        if let Some(disk) = &self.disk {
            let _ = std::fs::remove_dir_all(&disk.dir);
        }
    }
}

impl Disk {
    /// A directory of this process's own under `parent`; those that processes no longer
    /// running left there are removed (their images died with them).
    fn make(parent: &Path, bound: u64) -> std::io::Result<Disk> {
        std::fs::create_dir_all(parent)?;
        for entry in std::fs::read_dir(parent)?.flatten() {
            let name = entry.file_name();
            let pid = name.to_str().and_then(|n| n.split('-').next()).and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let mut suffix = [0u8; 8];
        getrandom::fill(&mut suffix).map_err(|e| std::io::Error::other(e.to_string()))?;
        let dir = parent.join(format!("{}-{}", std::process::id(), hex::encode(suffix)));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(Disk { dir, bound, next: AtomicU64::new(0) })
    }

    fn path(&self) -> PathBuf {
        self.dir.join(self.next.fetch_add(1, Ordering::Relaxed).to_string())
    }
}

fn write(path: &Path, frozen: &Frozen) -> std::io::Result<()> {
    let bytes = postcard::to_allocvec(frozen).map_err(std::io::Error::other)?;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(&bytes)
}

impl Kept {
    /// What it takes from the bounds.
    pub(crate) fn size(&self) -> u64 {
        self.charge.bytes
    }

    /// Whether it is in memory (charged to its execution's memory claim).
    pub(crate) fn in_memory(&self) -> bool {
        !self.charge.disk
    }

    /// The pages, read back from disk if they went there (the file goes).
    pub(crate) async fn take(mut self) -> Result<Frozen, String> {
        match std::mem::replace(&mut self.place, Place::Taken) {
            Place::Memory(frozen) => Ok(frozen),
            Place::Disk(path) => tokio::task::spawn_blocking(move || {
                let bytes = std::fs::read(&path);
                let _ = std::fs::remove_file(&path);
                let bytes = bytes.map_err(|e| format!("reading its image from {} failed: {e}", path.display()))?;
                postcard::from_bytes(&bytes).map_err(|e| format!("its image on disk is malformed: {e}"))
            })
            .await
            .map_err(|e| format!("reading its image failed: {e}"))?,
            Place::Taken => Err("its image was taken already".into()),
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        if let Place::Disk(path) = &self.place {
            let _ = std::fs::remove_file(path);
        }
    }
}
