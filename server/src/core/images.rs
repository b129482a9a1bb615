//! A single server's hibernated HTTP executions, on disk under the files directory
//! (`.hibernated/`), so that a restart keeps them: a continuation that finds no paused
//! execution thaws its image instead (`core/continuations/replay.rs`). A cluster keeps them in its
//! shared store instead (`cluster/keeper.rs`).
//!
//! One file per execution (named by the hex of its id), replaced at each hibernation: the
//! round it waits on, the header of its request (`JournalHeader`, without a seed) and the
//! sealed image. Bounded per tenant and in total as the cluster's journals are
//! (`JournalLimits`); an image past a bound is refused, and the execution stays live. Files
//! are read and written on the blocking pool; a file past its execution's deadline is removed
//! when the server starts and when it is found.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};

use ptc_engine::{Hibernated, Keeper};

use super::token::now_ms;
use crate::cluster::{JournalHeader, JournalLimits};

/// The directory beneath the files directory (no tenant's directory has a `.` in its name).
const DIR: &str = ".hibernated";

/// The images kept, and what each takes.
pub struct DiskImages {
    dir: PathBuf,
    limits: JournalLimits,
    kept: Mutex<Accounts>,
}

/// What the kept images take: each one, each tenant's, all of them.
#[derive(Default)]
struct Accounts {
    /// Execution id → (tenant, bytes, the keep that wrote it).
    images: HashMap<String, (String, u64, u64)>,
    tenants: HashMap<String, u64>,
    total: u64,
    /// Numbers each keep, so that a write finding its execution forgotten (or kept again)
    /// meanwhile leaves no file behind.
    keeps: u64,
}

impl Accounts {
    /// Counts `id`'s image in place of any earlier one; the number of this keep.
    fn add(&mut self, id: String, tenant: String, bytes: u64) -> u64 {
        self.remove(&id);
        *self.tenants.entry(tenant.clone()).or_default() += bytes;
        self.total += bytes;
        self.keeps += 1;
        self.images.insert(id, (tenant, bytes, self.keeps));
        self.keeps
    }

    /// Whether `id`'s image is still the one keep `number` counted.
    fn current(&self, id: &str, number: u64) -> bool {
        self.images.get(id).is_some_and(|(_, _, n)| *n == number)
    }

    fn remove(&mut self, id: &str) -> bool {
        let Some((tenant, bytes, _)) = self.images.remove(id) else { return false };
        if let Some(t) = self.tenants.get_mut(&tenant) {
            *t = t.saturating_sub(bytes);
            if *t == 0 {
                self.tenants.remove(&tenant);
            }
        }
        self.total = self.total.saturating_sub(bytes);
        true
    }
}

/// A kept image: the round it waits on, its request's header, the sealed bytes.
pub struct Kept {
    pub round: u32,
    pub header: JournalHeader,
    pub image: Vec<u8>,
}

impl DiskImages {
    /// The images under `files_dir`, as an earlier run of the server left them (expired and
    /// unreadable ones removed).
    pub fn open(files_dir: &Path, limits: JournalLimits) -> std::io::Result<Arc<Self>> {
        let dir = files_dir.join(DIR);
        std::fs::create_dir_all(&dir)?;
        let images = DiskImages { dir, limits, kept: Mutex::default() };
        let now = now_ms();
        let mut kept = Accounts::default();
        for entry in std::fs::read_dir(&images.dir)?.flatten() {
            let path = entry.path();
            let id = entry
                .file_name()
                .to_str()
                .and_then(|name| hex::decode(name).ok())
                .and_then(|b| String::from_utf8(b).ok());
            match (id, read_header(&path)) {
                (Some(id), Some(header)) if header.expires_at_ms > now => {
                    let size = entry.metadata().map_or(0, |m| m.len());
                    kept.add(id, header.tenant, size);
                }
                _ => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        if !kept.images.is_empty() {
            tracing::info!(count = kept.images.len(), "hibernated executions kept on disk from an earlier run");
        }
        *images.kept.lock().unwrap() = kept;
        Ok(Arc::new(images))
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(hex::encode(id))
    }

    /// Keeps execution `id`'s image of `round`, in place of any earlier one, within the bounds.
    pub async fn keep(
        self: &Arc<Self>,
        id: &str,
        tenant: &str,
        round: u32,
        header: &[u8],
        image: &[u8],
    ) -> Result<(), String> {
        let size = (8 + header.len() + image.len()) as u64;
        // Counted before it is written, so that keeps at once cannot pass a bound together.
        let (number, old) = {
            let mut kept = self.kept.lock().unwrap();
            let old = kept.images.get(id).map(|(tenant, bytes, _)| (tenant.clone(), *bytes));
            let was = old.as_ref().map_or(0, |(_, b)| *b);
            let mine = kept.tenants.get(tenant).copied().unwrap_or(0).saturating_sub(was);
            let all = kept.total.saturating_sub(was);
            if size > was && mine + size > self.limits.tenant_bytes {
                return Err(format!(
                    "this tenant's hibernated executions would pass their bound ({} bytes)",
                    self.limits.tenant_bytes
                ));
            }
            if size > was && all + size > self.limits.total_bytes {
                return Err(format!(
                    "all hibernated executions would pass their bound ({} bytes)",
                    self.limits.total_bytes
                ));
            }
            (kept.add(id.to_string(), tenant.to_string(), size), old)
        };
        let mut bytes = Vec::with_capacity(size as usize);
        bytes.extend_from_slice(&round.to_be_bytes());
        bytes.extend_from_slice(&(header.len() as u32).to_be_bytes());
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(image);
        // Each keep writes a file of its own, which takes the image's name only while the
        // accounts still count this keep: an execution forgotten while its image was being
        // written (its deadline swept, a cancel) leaves no file behind, nor does a keep that a
        // later one overtook.
        let path = self.path(id);
        let tmp = self.dir.join(format!("{}.{number}.tmp", hex::encode(id)));
        let (images, id_owned) = (self.clone(), id.to_string());
        let written = tokio::task::spawn_blocking(move || {
            std::fs::write(&tmp, &bytes)?;
            let kept = images.kept.lock().unwrap();
            if kept.current(&id_owned, number) {
                std::fs::rename(&tmp, &path)
            } else {
                drop(kept);
                std::fs::remove_file(&tmp)
            }
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| format!("writing its image: {e}")));
        if written.is_err() {
            // The file it had, if any, is still there.
            let mut kept = self.kept.lock().unwrap();
            if kept.current(id, number) {
                kept.remove(id);
                if let Some((tenant, bytes)) = old {
                    kept.add(id.to_string(), tenant, bytes);
                }
            }
        }
        written
    }

    /// Execution `id`'s image, if one is kept and its deadline has not passed.
    pub async fn load(self: &Arc<Self>, id: &str) -> Option<Kept> {
        if !self.kept.lock().unwrap().images.contains_key(id) {
            return None;
        }
        let path = self.path(id);
        let kept =
            tokio::task::spawn_blocking(move || std::fs::read(path).ok().and_then(|b| decode(&b))).await.ok()??;
        if kept.header.expires_at_ms <= now_ms() {
            self.forget(id);
            return None;
        }
        Some(kept)
    }

    /// Execution `id` has ended, or was cancelled: its image goes.
    pub fn forget(self: &Arc<Self>, id: &str) {
        if self.kept.lock().unwrap().remove(id) {
            // Under the lock, as a keep's rename is: a keep counted before this one cannot
            // put its file back after it, nor this remove one counted after.
            let (images, id, path) = (self.clone(), id.to_string(), self.path(id));
            tokio::task::spawn_blocking(move || {
                let kept = images.kept.lock().unwrap();
                if !kept.images.contains_key(&id) {
                    let _ = std::fs::remove_file(path);
                }
            });
        }
    }
}

/// The header of a kept image, read without the image.
fn read_header(path: &Path) -> Option<JournalHeader> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut head = [0u8; 8];
    file.read_exact(&mut head).ok()?;
    let len = u32::from_be_bytes(head[4..].try_into().ok()?) as u64;
    // Never more than the file holds, whatever its bytes say.
    if len > file.metadata().ok()?.len().saturating_sub(8) {
        return None;
    }
    let mut header = vec![0; len as usize];
    file.read_exact(&mut header).ok()?;
    serde_json::from_slice(&header).ok()
}

fn decode(bytes: &[u8]) -> Option<Kept> {
    let round = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?);
    let len = u32::from_be_bytes(bytes.get(4..8)?.try_into().ok()?) as usize;
    let header = serde_json::from_slice(bytes.get(8..8usize.checked_add(len)?)?).ok()?;
    Some(Kept { round, header, image: bytes[8 + len..].to_vec() })
}

/// The [`Keeper`] of one HTTP execution of a single server: its images go to disk with its
/// request's header, once the run has started and the header is known.
pub struct DiskKeeper {
    pub images: Arc<DiskImages>,
    pub tenant: String,
    /// The header, serialised, set once the run has started (what `/mnt/data` held then is
    /// part of it).
    pub header: Arc<OnceLock<Vec<u8>>>,
}

impl std::fmt::Debug for DiskKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskKeeper").field("tenant", &self.tenant).finish()
    }
}

impl Keeper for DiskKeeper {
    fn keep(&self, image: Hibernated) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            let header = self.header.get().ok_or("its request's header is not known yet")?;
            let pause = crate::core::token::pause_of(image.round, image.asking);
            self.images.keep(&image.execution_id, &self.tenant, pause, header, &image.bytes).await?;
            metrics::counter!("ptc_hibernated_images_kept_total").increment(1);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(tenant: &str, expires_at_ms: u64) -> Vec<u8> {
        let header = JournalHeader {
            code: "print(1)".into(),
            tools: Vec::new(),
            tenant: tenant.into(),
            session_id: "s".into(),
            runtime: "python".into(),
            seed: String::new(),
            expires_at_ms,
            files: Vec::new(),
            network_allow: Vec::new(),
            traceparent: String::new(),
        };
        serde_json::to_vec(&header).unwrap()
    }

    #[tokio::test]
    async fn images_are_bounded_kept_across_opens_and_dropped_when_expired_or_unreadable() {
        let dir = std::env::temp_dir().join(format!("ptc-images-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let limits = JournalLimits { tenant_bytes: 2_000, total_bytes: 3_000 };
        let images = DiskImages::open(&dir, limits).unwrap();
        let later = now_ms() + 60_000;
        images.keep("e1", "a", 1, &header("a", later), &[7; 1000]).await.unwrap();
        // Replacing its own image does not count the old one.
        images.keep("e1", "a", 2, &header("a", later), &[8; 1000]).await.unwrap();
        let refused = images.keep("e2", "a", 1, &header("a", later), &[9; 1000]).await.unwrap_err();
        assert!(refused.contains("this tenant's"), "{refused}");
        images.keep("e3", "b", 1, &header("b", later), &[9; 1000]).await.unwrap();
        let refused = images.keep("e4", "c", 1, &header("c", later), &[9; 1000]).await.unwrap_err();
        assert!(refused.contains("all hibernated"), "{refused}");
        images.keep("gone", "b", 1, &header("b", now_ms() + 50), &[1]).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(60)).await;

        // Another run of the server finds them; one past its deadline and a stray file are removed.
        std::fs::write(dir.join(DIR).join("zz-not-hex"), b"junk").unwrap();
        std::fs::write(dir.join(DIR).join(hex::encode("old")), [&[0, 0, 0, 1, 0, 0, 0, 2][..], b"{}"].concat())
            .unwrap();
        let images = DiskImages::open(&dir, limits).unwrap();
        let kept = images.load("e1").await.unwrap();
        assert_eq!((kept.round, kept.header.tenant.as_str(), kept.image), (2, "a", vec![8; 1000]));
        assert!(images.load("e2").await.is_none());
        assert_eq!(std::fs::read_dir(dir.join(DIR)).unwrap().count(), 2, "e1 and e3");
        images.forget("e1");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(images.load("e1").await.is_none());
        assert_eq!(std::fs::read_dir(dir.join(DIR)).unwrap().count(), 1);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn an_execution_forgotten_while_its_image_is_written_leaves_no_file() {
        let dir = std::env::temp_dir().join(format!("ptc-images-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let limits = JournalLimits { tenant_bytes: 1 << 30, total_bytes: 1 << 30 };
        let images = DiskImages::open(&dir, limits).unwrap();
        let (header, image) = (header("a", now_ms() + 60_000), vec![7; 32 << 20]);
        let mut keep = std::pin::pin!(images.keep("e", "a", 1, &header, &image));
        // Counted, and its write begun on the blocking pool; then the execution ends.
        let once = std::future::poll_fn(|cx| std::task::Poll::Ready(keep.as_mut().poll(cx))).await;
        assert!(once.is_pending());
        images.forget("e");
        keep.await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let left: Vec<_> = std::fs::read_dir(dir.join(DIR)).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "{left:?}");
        assert!(images.load("e").await.is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
