//! The scheduler's timer queue: a ring of 1 ms slots over the next few seconds, ~1 s buckets
//! beyond it to ~65 s, and a binary heap for anything further out (backoff waits, long
//! intervals) or already past.
//!
//! Why this shape: a simulated day is ~280 million checks and each re-arms its site's timer,
//! usually 2-6 s ahead (spacing, or the next search's due time), so push and pop must be O(1),
//! allocation-free and cache-friendly. A slot is 32 bytes holding up to eight nodes inline
//! (more spill to a map), its count kept apart in a byte array, so a push within the ring
//! reads a small hot array and writes one half cache line, and a drain reads the slots in
//! order. The ring grows with the number of sites (1 s to 8 s of slots, 33-264 KB) so that a
//! few sites do not pay for ten thousand. Pushes further ahead append to their bucket's
//! vector, which moves into the ring in one pass when the ring reaches it. Hand-written
//! because the timer crates we know either own the clock or allocate per timer.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Bucket width in ms; the ring's length is a multiple of it.
const BUCKET: u64 = 1024;
/// Buckets beyond the ring (together ~65 s).
const BUCKETS: u64 = 64;
/// The ring's length in ms: smallest and largest.
const RING_MIN: u64 = BUCKET;
const RING_MAX: u64 = 8 * BUCKET;
/// Words of the ring's bitmap, for the longest ring (inline: a fixed length lets an index
/// masked to the ring skip its bounds check).
const BIT_WORDS: usize = (RING_MAX / 64) as usize;
/// Nodes a slot holds inline.
const INLINE: usize = 8;

/// A timer's owner: a site, by its index. (Only sites are timed.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Node(u32);

impl Node {
    pub(crate) fn site(s: u32) -> Self {
        Self(s)
    }

    /// The site's index.
    pub(crate) fn index(self) -> u32 {
        self.0
    }
}

/// One millisecond of the ring: its first nodes in push order (the rest in `Timers::spill`;
/// how many are inline in `Timers::lens`).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
struct Slot {
    nodes: [u32; INLINE],
}

const EMPTY: Slot = Slot { nodes: [0; INLINE] };

/// A bucket entry: the deadline's offset in its bucket (high half) and the node (low half).
fn entry(at: u64, node: Node) -> u64 {
    ((at % BUCKET) << 32) | u64::from(node.0)
}

/// Nodes keyed by a millisecond deadline. Nothing is deduplicated or deleted eagerly except
/// by [`Timers::remove`]: a node pushed twice comes out twice, and the owner says which
/// entries still stand (its liveness check), as it does for far-heap entries when they enter
/// the wheel. Nodes with equal deadlines come out last pushed first; different deadlines come
/// out in deadline order per drain.
#[derive(Debug, Clone)]
pub(crate) struct Timers {
    /// Every deadline before `base` has been drained; the ring holds those in
    /// `[base, ring_end)`, slot `at & (ring - 1)`.
    base: u64,
    /// `base` rounded down to a bucket, plus `ring`: where the buckets begin. (Not
    /// `base + ring`: then the first bucket and the ring would share a stretch.)
    ring_end: u64,
    /// The ring's length in ms (a power of two, a multiple of `BUCKET`).
    ring: u64,
    slots: Box<[Slot]>,
    /// Per slot: how many nodes it holds inline (when `INLINE`, more may be in `spill`).
    /// Apart from the slots and one byte each, so a push reads this small, hot array and only
    /// writes the slot: a store that misses the cache does not hold the work up the way a
    /// load does.
    lens: Box<[u8]>,
    /// One bit per slot: non-empty.
    slot_bits: [u64; BIT_WORDS],
    /// Nodes beyond a slot's `INLINE`, by deadline, in push order.
    spill: HashMap<u64, Vec<u32>>,
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

impl Timers {
    pub(crate) fn new() -> Self {
        Self::with_ring(RING_MIN)
    }

    fn with_ring(ring: u64) -> Self {
        debug_assert!(ring.is_power_of_two() && ring % BUCKET == 0);
        Self {
            base: 0,
            ring_end: ring,
            ring,
            slots: vec![EMPTY; ring as usize].into_boxed_slice(),
            lens: vec![0; ring as usize].into_boxed_slice(),
            slot_bits: [0; BIT_WORDS],
            spill: HashMap::new(),
            buckets: vec![Vec::new(); BUCKETS as usize].into_boxed_slice(),
            bucket_bits: 0,
            bucket_min: vec![u64::MAX; BUCKETS as usize].into_boxed_slice(),
            far: BinaryHeap::new(),
        }
    }

    /// Sizes the ring for `sites` owners: ~1 ms of ring per site, from 1 s to 8 s (a site
    /// re-arms a few seconds ahead, so a longer ring takes more pushes straight into their
    /// slot). Growing moves every pending node; it happens a few times at most.
    pub(crate) fn fit(&mut self, sites: usize) {
        let want = (sites as u64).next_power_of_two().clamp(RING_MIN, RING_MAX);
        if want <= self.ring {
            return;
        }
        let mut grown = Self::with_ring(want);
        grown.set_base(self.base);
        // In push order within each millisecond, so equal deadlines keep their order.
        for (at, node) in self.pending() {
            grown.push(at, node);
        }
        *self = grown;
    }

    /// Every pending node with its deadline: the ring's, the buckets' and the far heap's.
    fn pending(&self) -> Vec<(u64, Node)> {
        let mask = self.ring - 1;
        let start = self.base & mask;
        let mut all = Vec::new();
        for k in 0..self.lens.len() {
            let at = self.base + ((k as u64).wrapping_sub(start) & mask);
            let (inline, spilled) = self.nodes_at(at);
            all.extend(inline.iter().chain(spilled).map(|&n| (at, Node(n))));
        }
        let first = (self.ring_end) / BUCKET;
        for (b, bucket) in self.buckets.iter().enumerate() {
            let start = (first + (b as u64).wrapping_sub(first) % BUCKETS) * BUCKET;
            all.extend(bucket.iter().map(|&e| (start + (e >> 32), Node(e as u32))));
        }
        all.extend(self.far.iter().map(|&Reverse(e)| e));
        all
    }

    /// The ring slot of deadline `at` (the second mask is a no-op that tells the compiler
    /// the bitmap index is in bounds).
    #[inline(always)]
    fn slot_of(&self, at: u64) -> usize {
        (at & (self.ring - 1) & (RING_MAX - 1)) as usize
    }

    fn set_base(&mut self, base: u64) {
        self.base = base;
        self.ring_end = base - base % BUCKET + self.ring;
    }

    /// The first deadline past the buckets: `[ring_end, bucket_end)` goes to buckets.
    fn bucket_end(&self) -> u64 {
        self.ring_end + BUCKETS * BUCKET
    }

    /// Schedules `node` at `at`. Inlined: it is on the path of every check, and a call would
    /// cost as much as the push (saving registers around it).
    #[inline(always)]
    pub(crate) fn push(&mut self, at: u64, node: Node) {
        if at < self.ring_end && at >= self.base {
            let k = self.slot_of(at);
            let len = usize::from(self.lens[k]);
            if len < INLINE {
                self.slots[k].nodes[len] = node.0;
                self.lens[k] += 1;
            } else {
                self.push_spill(at, node);
            }
            self.slot_bits[k >> 6] |= 1 << (k & 63);
        } else {
            self.push_beyond(at, node);
        }
    }

    /// The ninth and later node in one millisecond: rare (a slot holds eight inline).
    #[inline(never)]
    fn push_spill(&mut self, at: u64, node: Node) {
        self.spill.entry(at).or_default().push(node.0);
    }

    /// Past the ring: into a bucket, or the far heap. Out of line, so the ring's push stays
    /// small where it is inlined.
    #[inline(never)]
    fn push_beyond(&mut self, at: u64, node: Node) {
        if at < self.base || at >= self.bucket_end() {
            self.far.push(Reverse((at, node)));
        } else {
            let b = ((at / BUCKET) % BUCKETS) as usize;
            self.buckets[b].push(entry(at, node));
            self.bucket_bits |= 1 << b;
            self.bucket_min[b] = self.bucket_min[b].min(at);
        }
    }

    /// The nodes (site indices) due at `at` if it is in the ring (else none), inline then
    /// spilled: what is coming soon, for the owner to read ahead.
    pub(crate) fn nodes_at(&self, at: u64) -> (&[u32], &[u32]) {
        if at >= self.ring_end || at < self.base {
            return (&[], &[]);
        }
        let k = self.slot_of(at);
        let len = usize::from(self.lens[k]);
        let inline = &self.slots[k].nodes[..len];
        let spilled = match len == INLINE {
            true => self.spill.get(&at).map_or(&[][..], Vec::as_slice),
            false => &[],
        };
        (inline, spilled)
    }

    /// Takes `node` out of the wheel at `at`, if it is there (the newest entry, if it is there
    /// twice). (A far-heap entry is left in place: the owner's liveness check drops it later.)
    #[inline(never)] // rare: a wake-up replaced by an earlier one
    pub(crate) fn remove(&mut self, at: u64, node: Node) {
        if at < self.ring_end && at >= self.base {
            let k = self.slot_of(at);
            let (slot, len) = (&mut self.slots[k], &mut self.lens[k]);
            // The others keep their order (determinism): the spilled ones are the newest.
            if usize::from(*len) == INLINE
                && let Some(spilled) = self.spill.get_mut(&at)
                && let Some(i) = spilled.iter().rposition(|&n| n == node.0)
            {
                spilled.remove(i);
                if spilled.is_empty() {
                    self.spill.remove(&at);
                }
                return;
            }
            let inline = usize::from(*len);
            let Some(i) = slot.nodes[..inline].iter().rposition(|&n| n == node.0) else {
                return;
            };
            slot.nodes.copy_within(i + 1..inline, i);
            if inline == INLINE
                && let Some(spilled) = self.spill.get_mut(&at)
            {
                // The oldest spilled node takes the last inline place.
                slot.nodes[INLINE - 1] = spilled.remove(0);
                if spilled.is_empty() {
                    self.spill.remove(&at);
                }
            } else {
                *len -= 1;
                if *len == 0 {
                    self.slot_bits[k >> 6] &= !(1 << (k & 63));
                }
            }
        } else if at >= self.base && at < self.bucket_end() {
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
            // Up to `now` or the end of `base`'s bucket, whichever comes first: the slots in
            // [base, end] are contiguous in the ring (its length is a multiple of `BUCKET`).
            let boundary = self.base - self.base % BUCKET + BUCKET;
            let end = now.min(boundary - 1);
            self.visit_slots(self.base, end, &mut visit);
            self.set_base(end + 1);
            if self.base == boundary {
                // The ring now reaches the end of this bucket: it moves in, and far entries
                // now inside the window move into the wheel.
                self.enter_bucket(boundary + self.ring - BUCKET);
                self.take_far(&mut visit);
            }
            if end == now {
                break;
            }
            if self.slot_bits[..self.ring as usize / 64]
                .iter()
                .all(|&w| w == 0)
            {
                self.skip_empty(now, &mut visit);
                if self.base > now {
                    break;
                }
            }
        }
    }

    /// With nothing in the ring: moves `base` straight on to where the first bucket with
    /// entries moves in, or the first far entry would land in the ring, or past `now`,
    /// whichever comes first (there is nothing to visit in between).
    fn skip_empty(&mut self, now: u64, visit: &mut impl FnMut(u64, Node, bool) -> bool) {
        let bucket = self
            .next_bucket()
            .map_or(u64::MAX, |start| start + BUCKET - self.ring);
        let far = self
            .far
            .peek()
            .map_or(u64::MAX, |Reverse((at, _))| at - at % BUCKET);
        let to = bucket.min(far).min(now + 1);
        if to <= self.base {
            return;
        }
        self.set_base(to);
        if to == bucket {
            self.enter_bucket(to + self.ring - BUCKET);
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

    /// Visits the slots for `[from, to]` (inside one bucket), emptying them.
    #[inline]
    fn visit_slots(&mut self, from: u64, to: u64, visit: &mut impl FnMut(u64, Node, bool) -> bool) {
        let mask = self.ring - 1;
        let (lo, hi) = (from & mask, to & mask);
        for w in lo / 64..=hi / 64 {
            let first = if w == lo / 64 { lo % 64 } else { 0 };
            let last = if w == hi / 64 { hi % 64 } else { 63 };
            let bits = (u64::MAX << first) & (u64::MAX >> (63 - last));
            let mut word = self.slot_bits[w as usize] & bits;
            self.slot_bits[w as usize] &= !bits;
            while word != 0 {
                let k = w * 64 + u64::from(word.trailing_zeros());
                word &= word - 1;
                let at = from - lo + k;
                let len = usize::from(std::mem::take(&mut self.lens[k as usize]));
                if len == INLINE
                    && let Some(spilled) = self.spill.remove(&at)
                {
                    for &n in spilled.iter().rev() {
                        visit(at, Node(n), true);
                    }
                }
                for &n in self.slots[k as usize].nodes[..len].iter().rev() {
                    visit(at, Node(n), true);
                }
            }
        }
    }

    /// Moves the bucket starting at `start` into the ring, which now covers all of it.
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
        let first = (self.ring_end) / BUCKET;
        let k = self
            .bucket_bits
            .rotate_right((first % BUCKETS) as u32)
            .trailing_zeros();
        Some((first + u64::from(k)) * BUCKET)
    }

    /// The earliest deadline, if any (possibly a stale entry: early, never late).
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        let mut first = self.ring_first().unwrap_or(u64::MAX);
        if let Some(start) = self.next_bucket() {
            // Buckets come after the ring, but its entries may all be stale (removed).
            first = first.min(self.bucket_min[((start / BUCKET) % BUCKETS) as usize]);
        }
        if let Some(Reverse((at, _))) = self.far.peek() {
            first = first.min(*at);
        }
        (first != u64::MAX).then_some(first)
    }

    /// The ring's earliest deadline: its first set bit at or after `base`'s slot, going round
    /// once (usually in the first word).
    fn ring_first(&self) -> Option<u64> {
        let mask = self.ring - 1;
        let start = self.base & mask;
        let words = self.ring / 64;
        for i in 0..=words {
            let w = (start / 64 + i) & (words - 1); // a power of two: no division
            let mut word = self.slot_bits[w as usize];
            if i == 0 {
                word &= u64::MAX << (start % 64);
            } else if i == words {
                word &= !(u64::MAX << (start % 64));
            }
            if word != 0 {
                let k = w * 64 + u64::from(word.trailing_zeros());
                return Some(self.base + (k.wrapping_sub(start) & mask));
            }
        }
        None
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
    fn a_crowded_millisecond_spills_and_keeps_its_order() {
        let mut timers = Timers::new();
        let t0 = 5 * BUCKET;
        timers.drain_due(t0 - 1, &mut Vec::new(), |_, _| true);
        let n = INLINE as u32 + 4;
        for k in 0..n {
            timers.push(t0 + 3, Node::site(k));
        }
        // Out of the inline part and out of the spill; the rest close up in order.
        timers.remove(t0 + 3, Node::site(2));
        timers.remove(t0 + 3, Node::site(INLINE as u32 + 1));
        let left: Vec<u32> = (0..n)
            .filter(|&k| k != 2 && k != INLINE as u32 + 1)
            .collect();
        let (inline, spilled) = timers.nodes_at(t0 + 3);
        assert_eq!(inline, &left[..INLINE]);
        assert_eq!(spilled, &left[INLINE..]);
        let mut out = Vec::new();
        timers.drain_due(t0 + 3, &mut out, |_, _| true);
        let want: Vec<_> = left
            .iter()
            .rev()
            .map(|&k| (t0 + 3, Node::site(k)))
            .collect();
        assert_eq!(out, want, "last pushed first");
        assert_eq!(timers.next_deadline(), None);
        assert!(timers.spill.is_empty());
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

        /// Against a plain list of (deadline, node): every drain gives exactly the pending
        /// entries due by then, in deadline order, and `next_deadline` is never late.
        #[test]
        fn the_wheel_agrees_with_a_sorted_list(ops in prop::collection::vec(op(), 1..300)) {
            let mut timers = Timers::new();
            let mut model: Vec<(u64, Node)> = Vec::new();
            let mut now = 1_700_000_000_000u64;
            timers.drain_due(now, &mut Vec::new(), |_, _| true);
            for op in ops {
                match op {
                    Op::Push(ahead, n) => {
                        let at = now.saturating_add_signed(ahead);
                        timers.push(at, Node::site(n));
                        model.push((at, Node::site(n)));
                    }
                    Op::Remove(i) => {
                        if !model.is_empty() {
                            let (at, node) = model[i % model.len()];
                            // Only the wheel removes at once; a far entry (outside the
                            // window) stays until the owner's liveness check, which this
                            // model does not exercise.
                            timers.remove(at, node);
                            if at >= timers.base && at < timers.bucket_end() {
                                let j = model.iter().rposition(|&e| e == (at, node)).unwrap();
                                model.remove(j);
                            }
                        }
                    }
                    Op::Drain(ahead) => {
                        let to = now + ahead;
                        // Early (a removed entry's time) but never late.
                        let earliest = model.iter().map(|e| e.0).min();
                        match timers.next_deadline() {
                            Some(next) => prop_assert!(earliest.is_none_or(|e| next <= e)),
                            None => prop_assert!(earliest.is_none()),
                        }
                        let mut out = Vec::new();
                        timers.drain_due(to, &mut out, |_, _| true);
                        prop_assert!(out.windows(2).all(|w| w[0].0 <= w[1].0), "in order");
                        let mut due: Vec<_> = model.iter().copied().filter(|e| e.0 <= to).collect();
                        model.retain(|e| e.0 > to);
                        out.sort_unstable();
                        due.sort_unstable();
                        prop_assert_eq!(out, due);
                        now = to.max(now);
                    }
                    Op::Fit(sites) => timers.fit(sites),
                }
            }
            let mut pending = timers.pending();
            pending.sort_unstable();
            model.sort_unstable();
            prop_assert_eq!(pending, model);
        }
    }
}
