//! The scheduler's timer queue: 64 ms chunks over the next ~8 s, ~1 s buckets beyond them to
//! ~65 s, and a binary heap for anything further out (backoff waits, long intervals) or
//! already past.
//!
//! Why this shape: a simulated day is ~280 million checks and each re-arms its site's timer,
//! usually 2-6 s ahead (spacing, or the next search's due time), so push and pop must be O(1),
//! allocation-free and cache-friendly. A push into the next ~8 s appends one word to its
//! chunk's vector and loads nothing it does not write (the ~100 vectors' ends stay in cache).
//! When the drain reaches a chunk, one counting sort puts its nodes in millisecond order in
//! one array, each millisecond's in push order: draining walks an array, and reading ahead
//! (what is due in 2 ms) reads a few neighbouring words, not a linked list. (The fifth round's
//! ring of 1 ms linked lists spent ~30% of a simulated day on its links: a push loaded its
//! slot's head, the read-ahead walked a list one dependent miss at a time.) Pushes further
//! ahead append to their bucket's vector, which moves into the chunks in one pass when the
//! chunks reach it. Hand-written because the timer crates we know either own the clock or
//! allocate per timer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Bucket width in ms; the chunks' span is a multiple of it.
const BUCKET: u64 = 1024;
/// Buckets beyond the chunks (together ~65 s).
const BUCKETS: u64 = 64;
/// Chunk width in ms: the unit the near future is sorted in (one bit per ms in a `u64`).
const CHUNK: u64 = 64;
/// The chunks' span in ms, from the start of `base`'s bucket.
const RING: u64 = 8 * BUCKET;
/// Chunks in the ring: the current (sorted) one and those after it.
const CHUNKS: usize = (RING / CHUNK) as usize;
/// No node (past the end of a millisecond's list).
const END: u32 = u32::MAX;

/// A timer's owner: a site, by its index. (Only sites are timed.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Node(u32);

impl Node {
    /// Site `s` (below 2^31: the scheduler numbers fewer sites).
    pub(crate) fn site(s: u32) -> Self {
        debug_assert!(s < END);
        Self(s)
    }

    /// The site's index.
    pub(crate) fn index(self) -> u32 {
        self.0
    }
}

/// A bucket entry: the deadline's offset in its bucket (high half) and the node (low half).
fn entry(at: u64, node: Node) -> u64 {
    ((at % BUCKET) << 32) | u64::from(node.0)
}

/// A chunk entry: the deadline's offset in its chunk (high half) and the node (low half).
fn chunk_entry(at: u64, node: Node) -> u64 {
    ((at % CHUNK) << 32) | u64::from(node.0)
}

/// The ring index of the chunk holding `at`.
fn chunk_of(at: u64) -> usize {
    ((at / CHUNK) % CHUNKS as u64) as usize
}

/// Nodes keyed by a millisecond deadline, the way the scheduler times its sites: its owner
/// removes an entry it replaces with [`Timers::remove`], so a node is in the wheel at most
/// once. Far-heap entries are not removed: the owner says which still stand (its liveness
/// check) when they enter the wheel, and checks what comes out again (a far entry that came
/// in twice comes out twice). Nodes with equal deadlines come out last pushed first; different
/// deadlines come out in deadline order per drain.
#[derive(Debug, Clone)]
pub(crate) struct Timers {
    /// Every deadline before `base` has been drained. The current chunk is the one holding
    /// `base`: `[chunk_end - CHUNK, chunk_end)`.
    base: u64,
    /// The end of `base`'s chunk.
    chunk_end: u64,
    /// `base` rounded down to a bucket, plus `RING`: where the buckets begin. (Not
    /// `base + RING`: then the first bucket and the chunks would share a stretch.)
    ring_end: u64,
    /// The current chunk's nodes by millisecond, each millisecond's in push order: those due
    /// at `chunk start + k` are `sorted[starts[k]..starts[k + 1]]` (drained ones stay until
    /// the next chunk is sorted; `sorted_bits` says which are not drained).
    sorted: Vec<u32>,
    starts: [u32; CHUNK as usize + 1],
    /// One bit per millisecond of the current chunk: has nodes not yet drained.
    sorted_bits: u64,
    /// Per chunk after the current one (by [`chunk_of`]) up to `ring_end`: its entries in
    /// push order (see [`chunk_entry`]). The current chunk's is empty (it has been sorted).
    /// No bitmap or earliest deadline per chunk: a push only appends, and `next_deadline`
    /// looks at the chunks only when the current one has nothing left.
    chunks: Box<[Vec<u64>; CHUNKS]>,
    /// Per bucket (by `(start / BUCKET) % BUCKETS`): its entries in push order (see [`entry`]).
    /// The buckets hold the deadlines from the ring's end to `bucket_end()`.
    buckets: Box<[Vec<u64>]>,
    /// One bit per bucket: non-empty.
    bucket_bits: u64,
    /// Per bucket: the earliest deadline pushed into it since it was last emptied (a removal
    /// leaves it as it was: early, never late), so `next_deadline` need not scan a bucket.
    bucket_min: Box<[u64]>,
    /// Deadlines outside the wheel's window (far future, or pushed already past).
    far: BinaryHeap<Reverse<(u64, Node)>>,
}

const _: () = assert!(BUCKETS == 64, "bucket_bits is one u64");
const _: () = assert!(CHUNK == 64, "sorted_bits is one u64");

impl Timers {
    pub(crate) fn new() -> Self {
        Self {
            base: 0,
            chunk_end: CHUNK,
            ring_end: RING,
            sorted: Vec::new(),
            starts: [0; CHUNK as usize + 1],
            sorted_bits: 0,
            chunks: Box::new([const { Vec::new() }; CHUNKS]),
            buckets: vec![Vec::new(); BUCKETS as usize].into_boxed_slice(),
            bucket_bits: 0,
            bucket_min: vec![u64::MAX; BUCKETS as usize].into_boxed_slice(),
            far: BinaryHeap::new(),
        }
    }

    /// Room for `sites` owners' entries in the sorted chunk. (Nothing else depends on the
    /// number of owners: the chunks cover the same ~8 s for one site or a million.)
    pub(crate) fn fit(&mut self, sites: usize) {
        let want = sites.min(1 << 16);
        self.sorted.reserve(want.saturating_sub(self.sorted.len()));
    }

    /// Every pending node with its deadline: the wheel's, then the far heap's.
    #[cfg(test)]
    fn pending(&self) -> Vec<(u64, Node)> {
        let mut all = self.in_wheel();
        all.extend(self.far.iter().map(|&Reverse(e)| e));
        all
    }

    /// Every node in the chunks or the buckets with its deadline, in push order within each
    /// millisecond.
    #[cfg(test)]
    fn in_wheel(&self) -> Vec<(u64, Node)> {
        let start = self.chunk_end - CHUNK;
        let mut all = Vec::new();
        let mut word = self.sorted_bits;
        while word != 0 {
            let k = word.trailing_zeros() as usize;
            word &= word - 1;
            let (lo, hi) = (self.starts[k] as usize, self.starts[k + 1] as usize);
            all.extend(
                self.sorted[lo..hi]
                    .iter()
                    .map(|&n| (start + k as u64, Node(n))),
            );
        }
        for ahead in 1..CHUNKS as u64 {
            let chunk = start + ahead * CHUNK;
            all.extend(
                self.chunks[chunk_of(chunk)]
                    .iter()
                    .map(|&e| (chunk + (e >> 32), Node(e as u32))),
            );
        }
        let first = self.ring_end / BUCKET;
        for (b, bucket) in self.buckets.iter().enumerate() {
            let start = (first + (b as u64).wrapping_sub(first) % BUCKETS) * BUCKET;
            all.extend(bucket.iter().map(|&e| (start + (e >> 32), Node(e as u32))));
        }
        all
    }

    fn set_base(&mut self, base: u64) {
        self.base = base;
        self.chunk_end = base - base % CHUNK + CHUNK;
        self.ring_end = base - base % BUCKET + RING;
    }

    /// The first deadline past the buckets: `[ring_end, bucket_end)` goes to buckets.
    fn bucket_end(&self) -> u64 {
        self.ring_end + BUCKETS * BUCKET
    }

    /// Schedules `node` at `at`. Inlined: it is on the path of every check, and a call would
    /// cost as much as the push (saving registers around it). The usual push, a chunk after
    /// the current one, appends to that chunk's vector and reads nothing it does not write.
    #[inline(always)]
    pub(crate) fn push(&mut self, at: u64, node: Node) {
        if at >= self.chunk_end && at < self.ring_end {
            self.chunks[chunk_of(at)].push(chunk_entry(at, node));
        } else {
            self.push_other(at, node);
        }
    }

    /// Into the current chunk, a bucket or the far heap. Out of line, so the chunks' push
    /// stays small where it is inlined.
    #[inline(never)]
    fn push_other(&mut self, at: u64, node: Node) {
        if at >= self.base && at < self.chunk_end {
            self.insert_sorted(at, node);
        } else if at < self.base || at >= self.bucket_end() {
            self.far.push(Reverse((at, node)));
        } else {
            let b = ((at / BUCKET) % BUCKETS) as usize;
            self.buckets[b].push(entry(at, node));
            self.bucket_bits |= 1 << b;
            self.bucket_min[b] = self.bucket_min[b].min(at);
        }
    }

    /// A push into the current chunk (rare: within 64 ms): at the end of its millisecond, the
    /// newest there, the ones after it move up one.
    fn insert_sorted(&mut self, at: u64, node: Node) {
        let k = (at % CHUNK) as usize;
        self.sorted.insert(self.starts[k + 1] as usize, node.0);
        for start in &mut self.starts[k + 1..] {
            *start += 1;
        }
        self.sorted_bits |= 1 << k;
    }

    /// Sorts the chunk starting at `start` (now the current one) by millisecond into
    /// `sorted`, keeping push order within each millisecond (a counting sort: one pass to
    /// count, one to place).
    fn sort_chunk(&mut self, start: u64) {
        debug_assert_eq!(start % CHUNK, 0);
        let c = chunk_of(start);
        if self.chunks[c].is_empty() {
            self.starts = [0; CHUNK as usize + 1];
            self.sorted_bits = 0;
            return;
        }
        let entries = std::mem::take(&mut self.chunks[c]);
        let mut counts = [0u32; CHUNK as usize];
        for &e in &entries {
            counts[(e >> 32) as usize % CHUNK as usize] += 1;
        }
        let (mut sum, mut bits) = (0, 0u64);
        for (k, &n) in counts.iter().enumerate() {
            self.starts[k] = sum;
            sum += n;
            bits |= u64::from(n != 0) << k;
        }
        self.starts[CHUNK as usize] = sum;
        self.sorted_bits = bits;
        if self.sorted.len() < sum as usize {
            // Grown, never shrunk: `starts[CHUNK]` is its length in use.
            self.sorted.resize(sum as usize, END);
        }
        let mut next = self.starts;
        for &e in &entries {
            let k = (e >> 32) as usize % CHUNK as usize;
            self.sorted[next[k] as usize] = e as u32;
            next[k] += 1;
        }
        let mut entries = entries;
        entries.clear();
        self.chunks[c] = entries;
    }

    /// Calls `f` with each node (site index) due at `at` if it is in the chunks (else none),
    /// newest first.
    #[cfg(test)]
    fn each_at(&self, at: u64, mut f: impl FnMut(u32)) {
        if at < self.base || at >= self.ring_end {
            return;
        }
        if at < self.chunk_end {
            let k = (at % CHUNK) as usize;
            if self.sorted_bits & (1 << k) != 0 {
                let (lo, hi) = (self.starts[k] as usize, self.starts[k + 1] as usize);
                self.sorted[lo..hi].iter().rev().for_each(|&n| f(n));
            }
        } else {
            let e = (at % CHUNK) << 32;
            self.chunks[chunk_of(at)]
                .iter()
                .rev()
                .filter(|&&x| x & !u64::from(u32::MAX) == e)
                .for_each(|&x| f(x as u32));
        }
    }

    /// The nodes (site indices) due at `at` if it is in the current chunk, oldest first (they
    /// come out newest first); else none: what is coming soon, for the owner to read ahead.
    /// Neighbouring words of one array.
    #[inline]
    pub(crate) fn due_at(&self, at: u64) -> &[u32] {
        let k = (at % CHUNK) as usize;
        if at >= self.base && at < self.chunk_end && self.sorted_bits & (1 << k) != 0 {
            let (lo, hi) = (self.starts[k] as usize, self.starts[k + 1] as usize);
            self.sorted.get(lo..hi).unwrap_or(&[])
        } else {
            &[]
        }
    }

    /// Takes `node` out of the wheel at `at`, if it is there. (A far-heap entry is left in
    /// place: the owner's liveness check drops it later.)
    #[inline(never)] // rare: a wake-up replaced by an earlier one
    pub(crate) fn remove(&mut self, at: u64, node: Node) {
        if at < self.base || at >= self.bucket_end() {
            return;
        }
        // The others keep their order (determinism).
        if at < self.chunk_end {
            let k = (at % CHUNK) as usize;
            if self.sorted_bits & (1 << k) == 0 {
                return;
            }
            let (lo, hi) = (self.starts[k] as usize, self.starts[k + 1] as usize);
            if let Some(i) = self.sorted[lo..hi].iter().rposition(|&n| n == node.0) {
                self.sorted.remove(lo + i);
                for start in &mut self.starts[k + 1..] {
                    *start -= 1;
                }
                if hi - lo == 1 {
                    self.sorted_bits &= !(1 << k);
                }
            }
        } else if at < self.ring_end {
            let chunk = &mut self.chunks[chunk_of(at)];
            let e = chunk_entry(at, node);
            if let Some(i) = chunk.iter().rposition(|&x| x == e) {
                chunk.remove(i);
            }
        } else {
            let b = ((at / BUCKET) % BUCKETS) as usize;
            let bucket = &mut self.buckets[b];
            let e = entry(at, node);
            if let Some(i) = bucket.iter().rposition(|&x| x == e) {
                bucket.remove(i);
                if bucket.is_empty() {
                    self.bucket_bits &= !(1 << b);
                    self.bucket_min[b] = u64::MAX;
                }
            }
        }
    }

    /// Whether anything is due at `now` (cheap: lets `poll_due` skip the drain).
    pub(crate) fn any_due(&self, now: u64) -> bool {
        now >= self.base || self.far.peek().is_some_and(|Reverse((at, _))| *at <= now)
    }

    /// Moves every node with a deadline `<= now` into `out`, with its deadline. `live` says
    /// whether a far-heap entry still stands when it moves into the wheel; entries that come
    /// out here may still be stale, so the owner checks them again.
    #[cfg(test)]
    pub(crate) fn drain_due(
        &mut self,
        now: u64,
        out: &mut Vec<(u64, Node)>,
        mut live: impl FnMut(u64, Node) -> bool,
    ) {
        self.drain_each(now, |at, node, due| {
            if due {
                out.push((at, node));
                true
            } else {
                live(at, node)
            }
        });
    }

    /// Takes out every node with a deadline `<= now` and hands it to `visit(at, node, true)`
    /// (in deadline order; last pushed first within a millisecond), without a buffer in
    /// between. `visit(at, node, false)` asks whether a far-heap entry still stands when it
    /// moves into the wheel. Entries that come out may still be stale, so the owner checks
    /// them again.
    pub(crate) fn drain_each(&mut self, now: u64, mut visit: impl FnMut(u64, Node, bool) -> bool) {
        // Far entries pushed already past come before everything in the wheel.
        while let Some(&Reverse((at, node))) = self.far.peek() {
            if at > now || at >= self.base {
                break;
            }
            self.far.pop();
            visit(at, node, true);
        }
        if now < self.base {
            return;
        }
        loop {
            // Up to `now` or the end of the current chunk, whichever comes first.
            let chunk_end = self.chunk_end;
            let end = now.min(chunk_end - 1);
            self.visit_sorted(self.base, end, &mut visit);
            self.set_base(end + 1);
            if self.base == chunk_end {
                // The next chunk is the current one now. Sorted first: what moves in below
                // may land in it.
                self.sort_chunk(chunk_end);
                if chunk_end % BUCKET == 0 {
                    // The chunks now reach the end of a new bucket: it moves in, and far
                    // entries now inside the window move into the wheel.
                    self.enter_bucket(self.ring_end - BUCKET);
                    self.take_far(&mut visit);
                }
            }
            if end == now {
                break;
            }
            if self.sorted_bits == 0 && self.next_chunk().is_none() {
                self.skip_empty(now, &mut visit);
                if self.base > now {
                    break;
                }
            }
        }
    }

    /// With nothing in the chunks: moves `base` straight on to where the first bucket with
    /// entries moves in, or the first far entry would land in the chunks, or past `now`,
    /// whichever comes first (there is nothing to visit in between).
    fn skip_empty(&mut self, now: u64, visit: &mut impl FnMut(u64, Node, bool) -> bool) {
        let bucket = self
            .next_bucket()
            .map_or(u64::MAX, |start| start + BUCKET - RING);
        let far = self
            .far
            .peek()
            .map_or(u64::MAX, |Reverse((at, _))| at - at % BUCKET);
        let to = bucket.min(far).min(now + 1);
        if to <= self.base {
            return;
        }
        self.set_base(to);
        // Every chunk is empty: the new current one too.
        self.sort_chunk(self.chunk_end - CHUNK);
        if to == bucket {
            self.enter_bucket(to + RING - BUCKET);
        }
        self.take_far(visit);
    }

    /// Far deadlines now inside the wheel's window move into it, if they still stand.
    fn take_far(&mut self, visit: &mut impl FnMut(u64, Node, bool) -> bool) {
        let end = self.bucket_end();
        while let Some(&Reverse((at, node))) = self.far.peek() {
            if at >= end {
                break;
            }
            self.far.pop();
            if visit(at, node, false) {
                self.push(at, node);
            }
        }
    }

    /// Visits the current chunk's milliseconds `[from, to]`, newest first within each.
    #[inline]
    fn visit_sorted(
        &mut self,
        from: u64,
        to: u64,
        visit: &mut impl FnMut(u64, Node, bool) -> bool,
    ) {
        let start = from - from % CHUNK;
        let (lo, hi) = (from % CHUNK, to % CHUNK);
        let bits = (u64::MAX << lo) & (u64::MAX >> (63 - hi));
        let mut word = self.sorted_bits & bits;
        self.sorted_bits &= !bits;
        while word != 0 {
            let k = word.trailing_zeros() as usize;
            word &= word - 1;
            let at = start + k as u64;
            let (a, b) = (self.starts[k] as usize, self.starts[k + 1] as usize);
            for &n in self.sorted[a..b].iter().rev() {
                visit(at, Node(n), true);
            }
        }
    }

    /// Moves the bucket starting at `start` into the chunks, which now cover all of it.
    fn enter_bucket(&mut self, start: u64) {
        let b = ((start / BUCKET) % BUCKETS) as usize;
        if self.bucket_bits & (1 << b) == 0 {
            return;
        }
        self.bucket_bits &= !(1 << b);
        self.bucket_min[b] = u64::MAX;
        let mut bucket = std::mem::take(&mut self.buckets[b]);
        for &e in &bucket {
            self.push(start + (e >> 32), Node(e as u32));
        }
        bucket.clear();
        self.buckets[b] = bucket;
    }

    /// The start of the first bucket (in time) with entries.
    fn next_bucket(&self) -> Option<u64> {
        if self.bucket_bits == 0 {
            return None;
        }
        let first = self.ring_end / BUCKET;
        let k = self
            .bucket_bits
            .rotate_right((first % BUCKETS) as u32)
            .trailing_zeros();
        Some((first + u64::from(k)) * BUCKET)
    }

    /// The earliest deadline, if any (possibly a stale entry: early, never late).
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        let mut first = self.chunks_first();
        if first == u64::MAX {
            if let Some(start) = self.next_bucket() {
                first = self.bucket_min[((start / BUCKET) % BUCKETS) as usize];
            }
        }
        // (Else the buckets come later: everything in them is at or after `ring_end`.)
        if let Some(Reverse((at, _))) = self.far.peek() {
            first = first.min(*at);
        }
        (first != u64::MAX).then_some(first)
    }

    /// The chunks' earliest deadline (`u64::MAX`: none): the current chunk's first
    /// millisecond with nodes, else the earliest entry of the next chunk with entries (a scan,
    /// but only when the current chunk has nothing left: in a busy wheel, rarely).
    fn chunks_first(&self) -> u64 {
        if self.sorted_bits != 0 {
            return self.chunk_end - CHUNK + u64::from(self.sorted_bits.trailing_zeros());
        }
        self.next_chunk().map_or(u64::MAX, |start| {
            let first = self.chunks[chunk_of(start)].iter().map(|&e| e >> 32).min();
            start + first.unwrap_or(0)
        })
    }

    /// The start of the first chunk after the current one with entries, if any.
    fn next_chunk(&self) -> Option<u64> {
        (1..CHUNKS as u64)
            .map(|ahead| self.chunk_end - CHUNK + ahead * CHUNK)
            .find(|&start| !self.chunks[chunk_of(start)].is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second family of owners, distinct from the small site numbers the tests use.
    fn target(n: u32) -> Node {
        Node::site(1000 + n)
    }

    #[test]
    fn deadlines_come_out_in_order_across_the_window_and_the_heap() {
        let mut timers = Timers::new();
        let t0 = 1_700_000_000_000u64;
        let mut want = Vec::new();
        for (k, at) in [5u64, 0, 70_000, 3_600_000, 64, 63, 65_535, 65_536, 1]
            .into_iter()
            .enumerate()
        {
            timers.push(t0 + at, target(k as u32));
            want.push((t0 + at, target(k as u32)));
        }
        want.sort_unstable();
        let mut got = Vec::new();
        let mut now = t0 - 10;
        while let Some(next) = timers.next_deadline() {
            assert!(next >= now || got.is_empty());
            let mut out = Vec::new();
            // A spurious drain before the deadline yields nothing.
            if next > now {
                timers.drain_due(next - 1, &mut out, |_, _| true);
                assert!(out.is_empty(), "{out:?} before {next}");
            }
            now = next;
            timers.drain_due(now, &mut out, |_, _| true);
            assert!(!out.is_empty());
            assert!(out.iter().all(|(at, _)| *at == now));
            got.extend(out);
            // Pushing into the past or the near future while draining works.
            if got.len() == 3 {
                timers.push(now - 5, target(99));
                timers.push(now + 2, target(98));
                want.push((now - 5, target(99)));
                want.push((now + 2, target(98)));
                want.sort_unstable();
                let mut out = Vec::new();
                timers.drain_due(now, &mut out, |_, _| true);
                assert_eq!(out, vec![(now - 5, target(99))]);
                got.extend(out);
            }
        }
        got.sort_unstable();
        assert_eq!(got, want);
    }

    #[test]
    fn removed_and_stale_nodes_do_not_fire() {
        let mut timers = Timers::new();
        let t0 = 10_000u64;
        timers.drain_due(t0 - 1, &mut Vec::new(), |_, _| true);
        // Three nodes in one slot; the middle, the head and the tail leave in turn.
        for n in 0..3 {
            timers.push(t0 + 7, Node::site(n));
        }
        timers.push(t0 + 7, target(3));
        timers.remove(t0 + 7, Node::site(1));
        timers.remove(t0 + 7, target(3));
        // Removing what is not linked is harmless.
        timers.remove(t0 + 7, Node::site(1));
        timers.remove(t0 + 9, target(2));
        // A far entry that its owner no longer wants is dropped when it reaches the wheel.
        timers.push(t0 + 100_000, target(0));
        timers.push(t0 + 100_001, target(1));
        let mut out = Vec::new();
        timers.drain_due(t0 + 7, &mut out, |_, _| true);
        out.sort_unstable();
        assert_eq!(out, vec![(t0 + 7, Node::site(0)), (t0 + 7, Node::site(2))]);
        // The removed node can be scheduled again.
        timers.push(t0 + 8, Node::site(1));
        out.clear();
        timers.drain_due(t0 + 50_000, &mut out, |_, n| n != target(1));
        assert_eq!(out, vec![(t0 + 8, Node::site(1))]);
        assert_eq!(timers.next_deadline(), Some(t0 + 100_000));
        out.clear();
        timers.drain_due(t0 + 200_000, &mut out, |_, _| true);
        assert_eq!(out, vec![(t0 + 100_000, target(0))]);
        assert_eq!(timers.next_deadline(), None);
    }

    #[test]
    fn buckets_move_into_slots_in_order_and_removal_works_at_both_levels() {
        let mut timers = Timers::new();
        let t0 = 1 << 20; // a bucket boundary
        timers.drain_due(t0 - 1, &mut Vec::new(), |_, _| true);
        // Ten nodes in one ms a bucket ahead, three in the current bucket, one 60 s ahead.
        for n in 0..10 {
            timers.push(t0 + BUCKET + 100, target(n));
        }
        for n in 10..13 {
            timers.push(t0 + 5, target(n));
        }
        timers.push(t0 + 60_000, Node::site(1));
        timers.remove(t0 + BUCKET + 100, target(4));
        timers.remove(t0 + 5, target(11));
        timers.remove(t0 + 60_000, Node::site(1));
        timers.remove(t0 + 60_000, Node::site(1));
        assert_eq!(timers.next_deadline(), Some(t0 + 5));
        let mut out = Vec::new();
        timers.drain_due(t0 + BUCKET + 99, &mut out, |_, _| true);
        assert_eq!(out, [(t0 + 5, target(12)), (t0 + 5, target(10))]);
        assert_eq!(timers.next_deadline(), Some(t0 + BUCKET + 100));
        out.clear();
        timers.drain_due(t0 + BUCKET + 100, &mut out, |_, _| true);
        let want: Vec<_> = (0..10)
            .rev()
            .filter(|&n| n != 4)
            .map(|n| (t0 + BUCKET + 100, target(n)))
            .collect();
        assert_eq!(out, want, "last pushed first");
        assert_eq!(timers.next_deadline(), None, "the removed site is gone");
        // A jump of hours with nothing pending, then pushes land in the new window.
        timers.drain_due(t0 + 7_200_000, &mut Vec::new(), |_, _| true);
        timers.push(t0 + 7_200_070, Node::site(2));
        assert_eq!(timers.next_deadline(), Some(t0 + 7_200_070));
        out.clear();
        timers.drain_due(t0 + 7_300_000, &mut out, |_, _| true);
        assert_eq!(out, [(t0 + 7_200_070, Node::site(2))]);
    }

    #[test]
    fn a_crowded_millisecond_keeps_its_order_through_removals() {
        let mut timers = Timers::new();
        let t0 = 5 * BUCKET;
        timers.drain_due(t0 - 1, &mut Vec::new(), |_, _| true);
        let n = 100;
        for k in 0..n {
            timers.push(t0 + 3, Node::site(k));
        }
        // The newest (the head), one in the middle and the oldest (the tail) leave.
        for k in [n - 1, 40, 0] {
            timers.remove(t0 + 3, Node::site(k));
        }
        let left: Vec<u32> = (1..n - 1).filter(|&k| k != 40).rev().collect();
        let mut listed = Vec::new();
        timers.each_at(t0 + 3, |k| listed.push(k));
        assert_eq!(listed, left, "newest first");
        let mut out = Vec::new();
        timers.drain_due(t0 + 3, &mut out, |_, _| true);
        let want: Vec<_> = left.iter().map(|&k| (t0 + 3, Node::site(k))).collect();
        assert_eq!(out, want, "last pushed first");
        assert_eq!(timers.next_deadline(), None);
        assert!(timers.in_wheel().is_empty());
    }

    #[test]
    fn a_node_pushed_twice_without_a_removal_comes_out_twice_for_its_owner_to_filter() {
        // The scheduler removes a wake-up before it sets another; only a far entry that came
        // in twice reaches the wheel twice, and its owner's liveness check drops the second.
        let mut timers = Timers::new();
        let t0 = 7 * BUCKET;
        timers.drain_due(t0 - 1, &mut Vec::new(), |_, _| true);
        for (at, k) in [(t0 + 900, 1), (t0 + 900, 5000), (t0 + 900, 2), (t0 + 4, 3)] {
            timers.push(at, Node::site(k));
        }
        timers.push(t0 + 900, Node::site(5000));
        let mut out = Vec::new();
        timers.drain_due(t0 + 1000, &mut out, |_, _| true);
        let at = t0 + 900;
        assert_eq!(
            out,
            [
                (t0 + 4, Node::site(3)),
                (at, Node::site(5000)),
                (at, Node::site(2)),
                (at, Node::site(5000)),
                (at, Node::site(1)),
            ]
        );
        assert_eq!(timers.next_deadline(), None);
    }

    /// What every drain relies on: the current chunk's index is consistent, and nothing sits
    /// outside its level's window.
    fn assert_consistent(timers: &Timers) {
        let (starts, n) = (&timers.starts, CHUNK as usize);
        assert!(starts.windows(2).all(|w| w[0] <= w[1]), "starts ascend");
        assert!(starts[n] as usize <= timers.sorted.len());
        let start = timers.chunk_end - CHUNK;
        for k in 0..n {
            let set = timers.sorted_bits & (1 << k) != 0;
            if set {
                assert!(starts[k] < starts[k + 1], "ms {k} marked but empty");
                assert!(start + k as u64 >= timers.base, "ms {k} drained but marked");
            }
        }
        assert!(
            timers.chunks[chunk_of(start)].is_empty(),
            "current chunk sorted"
        );
        for ahead in 1..CHUNKS as u64 {
            let chunk = start + ahead * CHUNK;
            let c = chunk_of(chunk);
            for &e in &timers.chunks[c] {
                let at = chunk + (e >> 32);
                assert!(at >= timers.chunk_end && at < timers.ring_end);
            }
        }
    }

    #[test]
    fn the_sort_keeps_push_order_within_each_millisecond() {
        let mut timers = Timers::new();
        let t0 = 3 * BUCKET;
        timers.drain_due(t0 - 1, &mut Vec::new(), |_, _| true);
        // 300 nodes over two chunks and their boundary, pushed in an order that interleaves
        // their milliseconds; some leave again before and after their chunk is sorted.
        let mut want: Vec<(u64, Node)> = Vec::new();
        for k in 0..300u32 {
            let at = t0 + 100 + u64::from(k * 37 % 128);
            timers.push(at, Node::site(k));
            want.push((at, Node::site(k)));
        }
        for k in [5u32, 77, 299] {
            let at = t0 + 100 + u64::from(k * 37 % 128);
            timers.remove(at, Node::site(k));
            want.retain(|&(_, n)| n != Node::site(k));
        }
        assert_consistent(&timers);
        // Into the chunk holding t0 + 128..t0 + 191, now sorted.
        timers.drain_due(t0 + 140, &mut Vec::new(), |_, _| true);
        want.retain(|&(at, _)| at > t0 + 140);
        assert_consistent(&timers);
        for k in [300u32, 301] {
            timers.push(t0 + 150, Node::site(k));
            want.push((t0 + 150, Node::site(k)));
        }
        let gone = want
            .iter()
            .find(|&&(at, _)| at == t0 + 150)
            .copied()
            .unwrap();
        timers.remove(gone.0, gone.1);
        want.retain(|&e| e != gone);
        assert_consistent(&timers);
        let mut listed = Vec::new();
        timers.each_at(t0 + 150, |n| listed.push(n));
        let mut out = Vec::new();
        timers.drain_due(t0 + 400, &mut out, |_, _| true);
        assert_consistent(&timers);
        // Deadline order; within a millisecond the newest first.
        want.reverse();
        want.sort_by_key(|&(at, _)| at); // stable: keeps newest first
        assert_eq!(out, want);
        let at150: Vec<u32> = want
            .iter()
            .filter(|e| e.0 == t0 + 150)
            .map(|e| e.1.0)
            .collect();
        assert_eq!(listed, at150);
        assert_eq!(timers.next_deadline(), None);
    }

    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        /// Push a node this many ms ahead of the drained point (may be behind it).
        Push(i64, u32),
        /// Remove the `n`th pending entry (modulo), if any.
        Remove(usize),
        /// Drain up to this many ms ahead.
        Drain(u64),
        /// Grow the ring for this many sites.
        Fit(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let ahead = prop_oneof![-50i64..20, 0i64..3_000, 0i64..70_000, 0i64..10_000_000,];
        prop_oneof![
            6 => (ahead, 0u32..40).prop_map(|(a, n)| Op::Push(a, n)),
            1 => any::<usize>().prop_map(Op::Remove),
            3 => prop_oneof![0u64..5, 0u64..2_000, 0u64..100_000, 0u64..20_000_000].prop_map(Op::Drain),
            1 => (1usize..20_000).prop_map(Op::Fit),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Used the way the scheduler uses it (each node has at most one deadline; setting a
        /// new one removes the old; what comes out is checked against the node's deadline, a
        /// far entry when it enters the wheel too), against a map of node to deadline: every
        /// drain gives exactly the deadlines due by then, in order, and `next_deadline` is
        /// never late.
        #[test]
        fn the_wheel_agrees_with_a_map_of_deadlines(ops in prop::collection::vec(op(), 1..300)) {
            let mut timers = Timers::new();
            let mut model: std::collections::BTreeMap<u32, u64> = Default::default();
            let mut now = 1_700_000_000_000u64;
            timers.drain_due(now, &mut Vec::new(), |_, _| true);
            for op in ops {
                match op {
                    Op::Push(ahead, n) => {
                        let at = now.saturating_add_signed(ahead);
                        if let Some(old) = model.insert(n, at) {
                            timers.remove(old, Node::site(n));
                        }
                        timers.push(at, Node::site(n));
                    }
                    Op::Remove(i) => {
                        if !model.is_empty() {
                            let (&n, &at) = model.iter().nth(i % model.len()).unwrap();
                            timers.remove(at, Node::site(n));
                            model.remove(&n);
                        }
                    }
                    Op::Drain(ahead) => {
                        let to = now + ahead;
                        // Early (a removed entry's time) but never late.
                        let earliest = model.values().copied().min();
                        match timers.next_deadline() {
                            Some(next) => prop_assert!(earliest.is_none_or(|e| next <= e)),
                            None => prop_assert!(earliest.is_none()),
                        }
                        let mut want: Vec<_> =
                            model.iter().filter(|e| *e.1 <= to).map(|(&n, &at)| (at, Node::site(n))).collect();
                        let mut out = Vec::new();
                        timers.drain_each(to, |at, node, due| {
                            let live = model.get(&node.0) == Some(&at);
                            if due && live {
                                model.remove(&node.0);
                                out.push((at, node));
                            }
                            live
                        });
                        prop_assert!(out.windows(2).all(|w| w[0].0 <= w[1].0), "in order");
                        prop_assert!(model.values().all(|&at| at > to), "all due came out");
                        out.sort_unstable();
                        want.sort_unstable();
                        prop_assert_eq!(out, want);
                        now = to.max(now);
                        // Nothing stale stays in the ring or the buckets (only the far heap
                        // keeps what its owner no longer wants).
                        for (at, node) in timers.in_wheel() {
                            prop_assert!(
                                model.get(&node.0) == Some(&at),
                                "stale {:?} at {} in the wheel", node, at
                            );
                        }
                    }
                    Op::Fit(sites) => timers.fit(sites),
                }
                assert_consistent(&timers);
            }
            let mut pending: Vec<_> = timers
                .pending()
                .into_iter()
                .filter(|&(at, node)| model.get(&node.0) == Some(&at))
                .collect();
            pending.sort_unstable();
            pending.dedup(); // a far entry set twice to one time
            let want: Vec<_> = model.iter().map(|(&n, &at)| (at, Node::site(n))).collect();
            prop_assert_eq!(pending, {
                let mut w = want;
                w.sort_unstable();
                w
            });
        }
    }
}
