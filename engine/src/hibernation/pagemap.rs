//! Which pages of a linear memory have been written since it was mapped, from the kernel's
//! `/proc/self/pagemap` (Linux).
//!
//! With `memory_init_cow` an instance's memory is the compiled artifact's image mapped
//! private: a page nobody wrote is still the file's (or, outside the image, not there at
//! all, hence zero), and a written one is an anonymous copy. So only the written pages can
//! differ from the image, and only they need comparing: about 450 of the 5,936 pages of a
//! paused program's memory. Comparing all of them took 2-3 ms of a freeze and of a thaw.
//!
//! A page the kernel swapped out or merged counts as written; so does the shared zero page
//! (not a file page). Erring that way costs a comparison, never a missed page.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

const PAGE: usize = 4096;
const PRESENT: u64 = 1 << 63;
const SWAPPED: u64 = 1 << 62;
const FILE: u64 = 1 << 61;

/// For each 4 KiB page of `memory` (which starts on a page boundary), whether it may have been
/// written; `None` if the kernel cannot say (then every page may have been).
pub(crate) fn written(memory: &[u8]) -> Option<Vec<bool>> {
    static PAGEMAP: OnceLock<Option<File>> = OnceLock::new();
    let pagemap = PAGEMAP.get_or_init(|| File::open("/proc/self/pagemap").ok()).as_ref()?;
    let start = memory.as_ptr() as usize;
    if !start.is_multiple_of(PAGE) {
        return None;
    }
    let pages = memory.len().div_ceil(PAGE);
    let mut entries = vec![0u8; pages * 8];
    pagemap.read_exact_at(&mut entries, (start / PAGE * 8) as u64).ok()?;
    Some(
        entries
            .chunks_exact(8)
            .map(|e| {
                let e = u64::from_le_bytes(e.try_into().expect("8 bytes"));
                e & SWAPPED != 0 || (e & PRESENT != 0 && e & FILE == 0)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_pages_of_a_private_file_mapping_are_told_apart() {
        // A private mapping of a file stands in for a memory image mapped copy-on-write.
        let path = std::env::temp_dir().join(format!("ptc-pagemap-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 4 * PAGE]).unwrap();
        let file = File::open(&path).unwrap();
        let map = unsafe {
            // SAFETY: a fresh private mapping of a file this test alone uses, unmapped below.
            rustix::mm::mmap(
                std::ptr::null_mut(),
                4 * PAGE,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
                &file,
                0,
            )
            .unwrap()
        };
        // SAFETY: the mapping is 4 pages, readable and writable, and lives until munmap.
        let memory = unsafe { std::slice::from_raw_parts_mut(map.cast::<u8>(), 4 * PAGE) };
        let read: u32 = memory[..2 * PAGE].iter().map(|&b| u32::from(b)).sum();
        assert_eq!(read, 7 * 2 * PAGE as u32);
        memory[2 * PAGE + 10] = 1;
        let written = written(memory).expect("/proc/self/pagemap");
        // Read (a file page), read, written (an anonymous copy), untouched (not present).
        assert_eq!(written, [false, false, true, false]);
        unsafe { rustix::mm::munmap(map, 4 * PAGE).unwrap() };
        std::fs::remove_file(path).unwrap();
    }
}
