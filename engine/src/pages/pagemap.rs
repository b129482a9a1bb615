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
    Some(entries(memory)?.into_iter().map(|e| e == Entry::Written).collect())
}

/// What the kernel maps at one page.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Entry {
    /// Nothing: never touched since it was mapped.
    Absent,
    /// The file's page, read.
    Read,
    /// Anything else: a copy, written (or swapped out, or the shared zero page).
    Written,
}

/// What the kernel maps at each 4 KiB page of `memory` (which starts on a page boundary);
/// `None` if it cannot say.
pub(crate) fn entries(memory: &[u8]) -> Option<Vec<Entry>> {
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
                match (e & SWAPPED != 0, e & PRESENT != 0, e & FILE != 0) {
                    (false, false, _) => Entry::Absent,
                    (false, true, true) => Entry::Read,
                    _ => Entry::Written,
                }
            })
            .collect(),
    )
}

/// Copies the pages `pages` (indices, ascending) of `memory` on write now (`write`), or maps
/// them for reading, a run of them per call, rather than one fault each as they are touched.
/// Best effort: a kernel without `MADV_POPULATE_WRITE` (before Linux 5.14) leaves them to
/// fault.
pub(crate) fn populate(memory: &mut [u8], pages: &[u32], write: bool) {
    let advice = if write { rustix::mm::Advice::LinuxPopulateWrite } else { rustix::mm::Advice::LinuxPopulateRead };
    let mut i = 0;
    while i < pages.len() {
        let first = pages[i] as usize;
        let mut end = first + 1;
        while i + 1 < pages.len() && pages[i + 1] as usize == end {
            i += 1;
            end += 1;
        }
        i += 1;
        let Some(run) = memory.get_mut(first * PAGE..end * PAGE) else { return };
        // SAFETY: the range is memory we hold mutably; populating it maps pages, or copies them
        // on write, without changing a byte of them.
        let _ = unsafe { rustix::mm::madvise(run.as_mut_ptr().cast(), run.len(), advice) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_pages_of_a_private_file_mapping_are_told_apart() {
        // A private mapping of a file stands in for a memory image mapped copy-on-write.
        let path = std::env::temp_dir().join(format!("ptc-pagemap-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 5 * PAGE]).unwrap();
        let file = File::open(&path).unwrap();
        let map = unsafe {
            // SAFETY: a fresh private mapping of a file this test alone uses, unmapped below.
            rustix::mm::mmap(
                std::ptr::null_mut(),
                5 * PAGE,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
                &file,
                0,
            )
            .unwrap()
        };
        // SAFETY: the mapping is 5 pages, readable and writable, and lives until munmap.
        let memory = unsafe { std::slice::from_raw_parts_mut(map.cast::<u8>(), 5 * PAGE) };
        let read: u32 = memory[..2 * PAGE].iter().map(|&b| u32::from(b)).sum();
        assert_eq!(read, 7 * 2 * PAGE as u32);
        memory[2 * PAGE + 10] = 1;
        // Reading maps pages around the one read too: the last two are unmapped again.
        // SAFETY: pages of the mapping above, which nothing borrows.
        unsafe {
            rustix::mm::madvise(memory[3 * PAGE..].as_mut_ptr().cast(), 2 * PAGE, rustix::mm::Advice::LinuxDontNeed)
                .unwrap()
        };
        let written_now = written(memory).expect("/proc/self/pagemap");
        // Read (a file page), read, written (an anonymous copy), untouched (not present) twice.
        assert_eq!(written_now, [false, false, true, false, false]);
        use Entry::*;
        assert_eq!(entries(memory).expect("/proc/self/pagemap"), [Read, Read, Written, Absent, Absent]);
        // Populated for writing: copies, with the file's bytes; for reading: the file's own.
        populate(memory, &[0, 3], true);
        populate(memory, &[4], false);
        assert_eq!(entries(memory).expect("/proc/self/pagemap"), [Written, Read, Written, Written, Read]);
        assert!(memory[3 * PAGE..].iter().all(|&b| b == 7));
        unsafe { rustix::mm::munmap(map, 5 * PAGE).unwrap() };
        std::fs::remove_file(path).unwrap();
    }
}
