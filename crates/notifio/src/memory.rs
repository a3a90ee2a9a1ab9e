//! How Notifio asks the C allocator to hand memory back: it runs all day on a laptop, so
//! what it freed should not stay counted against it.
//!
//! glibc keeps freed blocks for reuse. A check that read a full result page frees a few
//! hundred KB of body and parse state, between blocks that live on (store, connections), so
//! the heap gets holes that glibc returns to the system only when they reach its top. In the
//! `watch` benchmark (1,000 searches, 16 checks at once) that retained memory was 5–6 MB of a
//! ~31 MB peak RSS. Two settings address it, both measured there:
//! - at most two malloc arenas instead of up to eight per core, each keeping its own holes
//!   (−1.5 MB peak RSS, no CPU cost);
//! - after a check that read a large page, `malloc_trim` gives the free pages inside the
//!   heap back, at most once a minute. Most holes are made once (the config's parse at start,
//!   the first pass over 1,000 new pages), so the first trim gives back most there is to give
//!   (about −2 MB peak RSS there). Trimming once a second saved ~0.5 MB more but spent ~7% of
//!   the CPU refaulting the pages it returned, after every large page 17–19%.
//!
//! Measured and not kept: a fixed 128 KiB mmap threshold (−1–3 MB but ~10% more CPU) and
//! mimalloc (twice the peak RSS). Elsewhere than Linux with glibc these are no-ops.

use notifio_policy::Timestamp;
use std::time::Duration;

/// A page at least this large leaves a hole worth giving back once it is freed.
pub const LARGE_PAGE: usize = 64 * 1024;

/// At most one trim per this long: a trim walks every free block and the pages it returns
/// fault back in when they are used again.
pub const TRIM_GAP: Duration = Duration::from_secs(60);

/// At most two glibc malloc arenas (one per core here). Call it first thing in `main`, before
/// any thread exists.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter, and this runs before any other thread
    // exists (the caller's contract above), so no allocation is in progress.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Decides when the pages of freed large bodies go back to the system (see the module doc).
#[derive(Debug, Default)]
pub struct Trimmer {
    /// When the last trim ran.
    last: Option<Timestamp>,
    /// A large page was freed since then.
    owed: bool,
}

impl Trimmer {
    /// A check that read `body_len` bytes has finished and its page is freed: trims when that
    /// page was large (or an earlier one still waits) and the last trim is [`TRIM_GAP`] old.
    /// Returns whether it trimmed.
    pub fn handle_freed(&mut self, body_len: usize, now: Timestamp) -> bool {
        self.owed |= body_len >= LARGE_PAGE;
        let rested = self
            .last
            .is_none_or(|last| now.saturating_since(last) >= TRIM_GAP);
        if !(self.owed && rested) {
            return false;
        }
        self.last = Some(now);
        self.owed = false;
        trim();
        true
    }
}

/// Gives the free pages inside the heap back to the system.
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes the allocator's own locks; it may run at any time from any
    // thread, like malloc itself.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp(1_000_000);

    fn at(ms: u64) -> Timestamp {
        Timestamp(T0.0 + ms)
    }

    /// Small pages never trim; a large one trims at once, then not again for a minute; a
    /// large page freed within that minute is owed and trimmed by the first check after it.
    #[test]
    fn trims_after_a_large_page_at_most_once_a_minute() {
        let gap = u64::try_from(TRIM_GAP.as_millis()).unwrap();
        let mut t = Trimmer::default();
        assert!(!t.handle_freed(2_000, at(0)), "a 304 leaves no hole");
        assert!(!t.handle_freed(LARGE_PAGE - 1, at(10)));
        assert!(
            t.handle_freed(300_000, at(20)),
            "the first large page trims"
        );
        assert!(!t.handle_freed(300_000, at(500)), "within the gap: owed");
        assert!(!t.handle_freed(1_000, at(20 + gap - 1)));
        assert!(
            t.handle_freed(1_000, at(20 + gap)),
            "a gap on, what is owed is trimmed"
        );
        assert!(!t.handle_freed(1_000, at(5 * gap)), "nothing owed any more");
        assert!(t.handle_freed(LARGE_PAGE, at(5 * gap + 1)));
    }

    /// The trim itself: 20 MB of freed 100 KB blocks, each held in place by a 16 KB block that
    /// lives on (so none of the holes is at the heap's top, where glibc would return it
    /// anyway), go back to the system, and the heap stays usable. The blocks kept are larger
    /// than glibc's per-thread caches take, so they come from the heap's top right after
    /// their neighbour, not from a small block another test freed elsewhere.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_trim_gives_the_holes_back() {
        fn anon_kb() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        }
        let mut keep = Vec::new();
        let mut big = Vec::new();
        for i in 0..200u32 {
            big.push(vec![u8::try_from(i % 251).unwrap(); 100_000]);
            keep.push(vec![i; 4_096]);
        }
        let held = anon_kb();
        drop(big);
        let before = anon_kb();
        assert!(
            held.saturating_sub(before) < 10_000,
            "the freed blocks were holes, kept by glibc: RssAnon {held} kB held, {before} kB freed"
        );
        trim();
        let after = anon_kb();
        assert!(
            before.saturating_sub(after) >= 10_000,
            "RssAnon {before} kB before the trim, {after} kB after"
        );
        let again: Vec<Vec<u8>> = (0..64u8).map(|i| vec![i; 100_000]).collect();
        assert!(again.iter().zip(0..).all(|(b, i)| b[99_999] == i));
        assert_eq!(
            keep.iter().map(|b| u64::from(b[4_095])).sum::<u64>(),
            199 * 200 / 2
        );
    }
}
