//! How a hibernated instance's pages are kept: each page's difference from the image, as the
//! 16-byte blocks that differ (XORed with the image's) and a bitmap saying which, compressed.
//!
//! A paused program changes few bytes of the pages it writes: of 4.7 MB of pages that differed
//! in one program, 190 KB of bytes did. Dropping the unchanged blocks before compressing made
//! the result smaller (zlib level 6: 183 KB instead of 204 KB) and inflating it 5× faster
//! (1.5 ms instead of 7.5), measured on that program's pages. zstd then inflated a paused
//! program's 75 KB of differences in 0.1 ms where zlib took 0.22 (`docs/hibernation.md`).

use std::cell::RefCell;

const PAGE: usize = 4096;
const BLOCK: usize = 16;
/// One bit per block of a page.
const BITMAP: usize = PAGE / BLOCK / 8;
/// zstd's default: on one program's differences level 6 saved 2.5% more at half the speed.
const LEVEL: i32 = 3;

/// The pages' differences being gathered, in page order.
#[derive(Default)]
pub(crate) struct Delta {
    bitmaps: Vec<u8>,
    blocks: Vec<u8>,
}

impl Delta {
    /// Adds a page that differs from `base` (both `PAGE` bytes).
    pub(crate) fn push(&mut self, now: &[u8], base: &[u8]) {
        let mut bitmap = [0u8; BITMAP];
        for (k, (n, b)) in now.chunks_exact(BLOCK).zip(base.chunks_exact(BLOCK)).enumerate() {
            if n != b {
                bitmap[k / 8] |= 1 << (k % 8);
                self.blocks.extend(n.iter().zip(b).map(|(x, y)| x ^ y));
            }
        }
        self.bitmaps.extend_from_slice(&bitmap);
    }

    /// The bitmaps, then the blocks, compressed, in a buffer of exactly their size: it is kept
    /// for as long as the instance sleeps. (`zstd::bulk::compress` leaves the buffer at the
    /// input's bound, about the size of the differences before compressing: a paused program
    /// with some state kept 0.2 MiB at rest in a buffer of several times that.) The compressor
    /// is the thread's own, made once: a new one per image (~1.3 MiB of workspace) was a large
    /// allocation and free at every hibernation, which the allocator kept.
    pub(crate) fn pack(mut self) -> std::io::Result<Vec<u8>> {
        thread_local! {
            static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
        }
        self.bitmaps.append(&mut self.blocks);
        let mut packed = Vec::with_capacity(zstd::zstd_safe::compress_bound(self.bitmaps.len()));
        COMPRESSOR.with_borrow_mut(|c| match c {
            Some(c) => c.compress_to_buffer(&self.bitmaps, &mut packed),
            None => zstd::bulk::Compressor::new(LEVEL)
                .and_then(|new| c.insert(new).compress_to_buffer(&self.bitmaps, &mut packed)),
        })?;
        packed.shrink_to_fit();
        Ok(packed)
    }
}

/// The differences of `pages` pages, unpacked and checked, handed out page by page.
pub(crate) struct Unpacked {
    data: Vec<u8>,
    /// Where the next page's bitmap and blocks start.
    bitmap: usize,
    block: usize,
}

impl Unpacked {
    /// Inflates `packed`, which must hold exactly `pages` pages' differences: never more
    /// bytes than that many pages could need, and blocks to match the bitmaps.
    pub(crate) fn new(packed: &[u8], pages: usize) -> Result<Unpacked, &'static str> {
        let most = pages * (BITMAP + PAGE);
        // Room for exactly what the frame says it holds, when that is not past the most: a
        // frame holding more than it says is refused as it fills the room. (Room for the most,
        // 1.4 MB for 75 KB of differences, cost a thaw 0.15 ms in unmapping it.)
        let size = zstd::zstd_safe::get_frame_content_size(packed).ok().flatten();
        let size = size.filter(|&n| n <= most as u64).ok_or("the hibernated pages are corrupt")?;
        let mut data = Vec::with_capacity(size as usize);
        thread_local! {
            static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
        }
        DECOMPRESSOR
            .with_borrow_mut(|d| match d {
                Some(d) => d.decompress_to_buffer(packed, &mut data),
                None => zstd::bulk::Decompressor::new()
                    .and_then(|new| d.insert(new).decompress_to_buffer(packed, &mut data)),
            })
            .map_err(|_| "the hibernated pages are corrupt")?;
        let bitmaps = pages * BITMAP;
        let blocks = data.get(..bitmaps).map(|b| b.iter().map(|b| b.count_ones() as usize).sum::<usize>());
        if data.len() > most || blocks.map(|n| bitmaps + n * BLOCK) != Some(data.len()) {
            return Err("the hibernated pages do not add up");
        }
        Ok(Unpacked { data, bitmap: 0, block: bitmaps })
    }

    /// Writes the next page: `base` with its differing blocks applied.
    pub(crate) fn apply_next(&mut self, page: &mut [u8], base: &[u8]) {
        page.copy_from_slice(base);
        let bitmap = &self.data[self.bitmap..self.bitmap + BITMAP];
        self.bitmap += BITMAP;
        // A word of the bitmap at a time, its set bits only: a page has a few differing
        // blocks of its 256.
        for (w, word) in bitmap.chunks_exact(8).enumerate() {
            let mut bits = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            while bits != 0 {
                let k = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let xor = &self.data[self.block..self.block + BLOCK];
                self.block += BLOCK;
                page[k * BLOCK..(k + 1) * BLOCK].iter_mut().zip(xor).for_each(|(b, x)| *b ^= x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_come_back_as_they_were_and_a_bad_stream_is_refused() {
        let base: Vec<u8> = (0..2 * PAGE).map(|i| (i * 7) as u8).collect();
        let mut now = base.clone();
        now[5] ^= 0xff;
        now[PAGE + 4000] = 1;
        now[PAGE + 4095] = 2;
        let mut delta = Delta::default();
        delta.push(&now[..PAGE], &base[..PAGE]);
        delta.push(&now[PAGE..], &base[PAGE..]);
        let packed = delta.pack().unwrap();
        let mut unpacked = Unpacked::new(&packed, 2).unwrap();
        let mut page = vec![9u8; PAGE];
        unpacked.apply_next(&mut page, &base[..PAGE]);
        assert_eq!(page, now[..PAGE]);
        unpacked.apply_next(&mut page, &base[PAGE..]);
        assert_eq!(page, now[PAGE..]);
        assert_eq!(Unpacked::new(&packed, 3).err(), Some("the hibernated pages do not add up"));
        assert!(Unpacked::new(&packed[..packed.len() - 3], 2).is_err(), "a cut stream is refused");
    }
}
