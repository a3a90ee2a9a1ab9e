//! The scheduler's timer queue: a two-level timing wheel over the next ~65 s (1 ms slots for
//! the current ~1 s, ~1 s buckets after that), with a binary heap for anything further out
//! (backoff waits, long intervals) or already past.
//!
//! Why this shape: a simulated day is ~288 million checks and each needs a timer, so push and
//! pop must be O(1) and allocation-free, and at 10,000 sites they must not miss the cache.
//! A check re-arms its site ~2-30 s ahead; pushing appends to that bucket's vector, whose last
//! cache line is written every few pushes and so stays in cache, and a bucket is moved into
//! the 1 ms slots in one sequential pass when its time comes. (A wheel of 1 ms slots
//! holding linked lists threaded through the nodes took a cache miss per node on both ends.)
//! Vectors keep their capacity, so once they have grown nothing allocates. Hand-written
//! because the timer crates we know either own the clock or allocate per timer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Slots per bucket (1 ms each). Large buckets keep pushes ~30 s ahead on a few buckets, so
/// their last cache lines stay hot; a bucket's entries spread over 1,024 slots whose vectors
/// (~60 KB) stay in cache too.
const SLOTS: u64 = 1024;
/// Buckets in the wheel; the wheel spans `WINDOW` ms.
const BUCKETS: u64 = 64;
const WINDOW: u64 = SLOTS * BUCKETS;

/// Tag bit of a site node; a target node is the target's index.
const SITE: u32 = 1 << 31;

/// A timer's owner: a search target or a site, packed in a `u32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Node(u32);

impl Node {
    #[cfg(test)]
    pub(crate) fn target(t: u32) -> Self {
        debug_assert!(t < SITE);
        Self(t)
    }

    pub(crate) fn site(s: u32) -> Self {
        debug_assert!(s < SITE);
        Self(s | SITE)
    }

    /// A node as [`Timers::nodes_at`] lists it.
    pub(crate) fn from_raw(raw: u32) -> Self {
        Self(raw)
    }

    /// `Ok(target)` or `Err(site)`.
    pub(crate) fn split(self) -> Result<u32, u32> {
        if self.0 & SITE == 0 {
            Ok(self.0)
        } else {
            Err(self.0 & !SITE)
        }
    }
}

/// A bucket entry: the deadline's offset in its bucket (high half) and the node (low half).
fn entry(at: u64, node: Node) -> u64 {
    ((at % SLOTS) << 32) | u64::from(node.0)
}

/// Nodes keyed by a millisecond deadline. Nothing is deduplicated or deleted eagerly except
/// by [`Timers::remove`]: a node pushed twice comes out twice, and the owner says which
/// entries still stand (its liveness check), as it does for far-heap entries when they enter
/// the wheel. Nodes with equal deadlines come out in no particular order (in fact the last
/// pushed first); different deadlines come out in deadline order per drain.
#[derive(Debug, Clone)]
pub(crate) struct Timers {
    /// Every deadline before `base` has been drained.
    base: u64,
    /// The start of `base`'s bucket (`base` rounded down to `SLOTS`): `slots` hold the
    /// deadlines in `[base, cur + SLOTS)`, `buckets` those in `[cur + SLOTS, cur + WINDOW)`.
    cur: u64,
    /// The current bucket's 1 ms slots: nodes in push order.
    slots: Box<[Vec<u32>]>,
    /// One bit per slot: non-empty.
    slot_bits: Box<[u64]>,
    /// Per bucket (by `(start / SLOTS) % BUCKETS`): its entries in push order (see [`entry`]).
    buckets: Box<[Vec<u64>]>,
    /// One bit per bucket: non-empty.
    bucket_bits: Box<[u64]>,
    /// Per bucket: the earliest deadline pushed into it since it was last emptied (a removal
    /// leaves it as it was: early, never late), so `next_deadline` need not scan a bucket.
    bucket_min: Box<[u64]>,
    /// Deadlines outside the wheel's window (far future, or pushed already past).
    far: BinaryHeap<Reverse<(u64, Node)>>,
}

impl Timers {
    pub(crate) fn new() -> Self {
        Self {
            base: 0,
            cur: 0,
            slots: vec![Vec::new(); SLOTS as usize].into_boxed_slice(),
            slot_bits: vec![0; (SLOTS / 64) as usize].into_boxed_slice(),
            buckets: vec![Vec::new(); BUCKETS as usize].into_boxed_slice(),
            bucket_bits: vec![0; (BUCKETS / 64) as usize].into_boxed_slice(),
            bucket_min: vec![u64::MAX; BUCKETS as usize].into_boxed_slice(),
            far: BinaryHeap::new(),
        }
    }

    /// Schedules `node` at `at`.
    #[inline]
    pub(crate) fn push(&mut self, at: u64, node: Node) {
        if at < self.base || at - self.cur >= WINDOW {
            self.push_far(at, node);
        } else if at - self.cur < SLOTS {
            let k = at - self.cur;
            self.slots[k as usize].push(node.0);
            self.slot_bits[(k >> 6) as usize] |= 1 << (k & 63);
        } else {
            let b = ((at / SLOTS) % BUCKETS) as usize;
            self.buckets[b].push(entry(at, node));
            self.bucket_bits[b >> 6] |= 1 << (b & 63);
            self.bucket_min[b] = self.bucket_min[b].min(at);
        }
    }

    /// Outside the window: kept out of line, as it is rare and the heap's sift is not small.
    #[inline(never)]
    fn push_far(&mut self, at: u64, node: Node) {
        self.far.push(Reverse((at, node)));
    }

    /// The nodes due at `at`, if `at` is in the current bucket's 1 ms slots (else none):
    /// what is coming soon, for the owner to read ahead.
    pub(crate) fn nodes_at(&self, at: u64) -> &[u32] {
        match at.checked_sub(self.cur) {
            Some(k) if at >= self.base && k < SLOTS => &self.slots[k as usize],
            _ => &[],
        }
    }

    /// Takes `node` out of the wheel at `at`, if it is there (the newest entry, if it is there
    /// twice). (A far-heap entry is left in place: the owner's liveness check drops it later.)
    pub(crate) fn remove(&mut self, at: u64, node: Node) {
        if at < self.base || at - self.cur >= WINDOW {
            return;
        }
        // `remove`, not `swap_remove`: the others keep their order (determinism).
        if at - self.cur < SLOTS {
            let k = at - self.cur;
            let slot = &mut self.slots[k as usize];
            if let Some(i) = slot.iter().rposition(|&n| n == node.0) {
                slot.remove(i);
                if slot.is_empty() {
                    self.slot_bits[(k >> 6) as usize] &= !(1 << (k & 63));
                }
            }
        } else {
            let b = ((at / SLOTS) % BUCKETS) as usize;
            let bucket = &mut self.buckets[b];
            let e = entry(at, node);
            if let Some(i) = bucket.iter().rposition(|&x| x == e) {
                bucket.remove(i);
                if bucket.is_empty() {
                    self.bucket_bits[b >> 6] &= !(1 << (b & 63));
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
        while let Some(&Reverse((at, node))) = self.far.peek() {
            if at > now {
                break;
            }
            self.far.pop();
            visit(at, node, true);
        }
        if now < self.base {
            return;
        }
        loop {
            let end = now.min(self.cur + SLOTS - 1);
            // The slots in [base, end], a word of bits at a time.
            let (lo, hi) = (self.base - self.cur, end - self.cur);
            for w in lo / 64..=hi / 64 {
                let from = if w == lo / 64 { lo % 64 } else { 0 };
                let to = if w == hi / 64 { hi % 64 } else { 63 };
                let mask = (u64::MAX << from) & (u64::MAX >> (63 - to));
                let mut word = self.slot_bits[w as usize] & mask;
                self.slot_bits[w as usize] &= !mask;
                while word != 0 {
                    let k = w * 64 + u64::from(word.trailing_zeros());
                    word &= word - 1;
                    let slot = &mut self.slots[k as usize];
                    let at = self.cur + k;
                    for &n in slot.iter().rev() {
                        visit(at, Node(n), true);
                    }
                    slot.clear();
                }
            }
            if end == now {
                self.base = now + 1;
                if self.base % SLOTS == 0 {
                    self.enter_bucket(self.base);
                }
                break;
            }
            // On to the next bucket with entries, or straight to `now`'s if none comes first.
            let next = self.next_bucket().filter(|&start| start <= now);
            let start = next.unwrap_or(now - now % SLOTS);
            self.enter_bucket(start);
            self.base = start;
        }
        // Far deadlines that are now inside the window move into it, if they still stand.
        while let Some(&Reverse((at, node))) = self.far.peek() {
            if at - self.cur >= WINDOW {
                break;
            }
            self.far.pop();
            if visit(at, node, false) {
                self.push(at, node);
            }
        }
    }

    /// Makes the bucket starting at `start` the current one: its entries move into the slots
    /// (which are empty). `start` is at most one bucket past any bucket with entries.
    fn enter_bucket(&mut self, start: u64) {
        debug_assert!(self.slot_bits.iter().all(|&w| w == 0));
        self.cur = start;
        let b = ((start / SLOTS) % BUCKETS) as usize;
        if self.bucket_bits[b >> 6] & (1 << (b & 63)) == 0 {
            return;
        }
        self.bucket_bits[b >> 6] &= !(1 << (b & 63));
        self.bucket_min[b] = u64::MAX;
        let mut bucket = std::mem::take(&mut self.buckets[b]);
        for &e in &bucket {
            let k = e >> 32;
            self.slots[k as usize].push(e as u32);
            self.slot_bits[(k >> 6) as usize] |= 1 << (k & 63);
        }
        bucket.clear();
        self.buckets[b] = bucket;
    }

    /// The start of the first bucket after the current one that has entries.
    fn next_bucket(&self) -> Option<u64> {
        let first = self.cur / SLOTS + 1;
        let mut k = 0;
        while k < BUCKETS - 1 {
            let b = ((first + k) % BUCKETS) as usize;
            let word = self.bucket_bits[b >> 6] >> (b & 63);
            if word != 0 {
                let found = k + u64::from(word.trailing_zeros());
                return (found < BUCKETS - 1).then_some((first + found) * SLOTS);
            }
            k += 64 - (b & 63) as u64;
        }
        None
    }

    /// The earliest deadline, if any (possibly a stale entry: early, never late).
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        // Slots before `base` are empty: the first set bit is the earliest slot deadline.
        let first = (self.base - self.cur) / 64;
        let slot = self.slot_bits[first as usize..]
            .iter()
            .zip(first..)
            .find(|&(&w, _)| w != 0)
            .map(|(&w, i)| self.cur + i * 64 + u64::from(w.trailing_zeros()));
        let wheel = if slot.is_some() {
            slot
        } else {
            self.next_bucket()
                .map(|start| self.bucket_min[((start / SLOTS) % BUCKETS) as usize])
        };
        let far = self.far.peek().map(|Reverse((at, _))| *at);
        match (wheel, far) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_come_out_in_order_across_the_window_and_the_heap() {
        let mut timers = Timers::new();
        let t0 = 1_700_000_000_000u64;
        let mut want = Vec::new();
        for (k, at) in [5u64, 0, 70_000, 3_600_000, 64, 63, 65_535, 65_536, 1]
            .into_iter()
            .enumerate()
        {
            timers.push(t0 + at, Node::target(k as u32));
            want.push((t0 + at, Node::target(k as u32)));
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
                timers.push(now - 5, Node::target(99));
                timers.push(now + 2, Node::target(98));
                want.push((now - 5, Node::target(99)));
                want.push((now + 2, Node::target(98)));
                want.sort_unstable();
                let mut out = Vec::new();
                timers.drain_due(now, &mut out, |_, _| true);
                assert_eq!(out, vec![(now - 5, Node::target(99))]);
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
        timers.push(t0 + 7, Node::target(3));
        timers.remove(t0 + 7, Node::site(1));
        timers.remove(t0 + 7, Node::target(3));
        // Removing what is not linked is harmless.
        timers.remove(t0 + 7, Node::site(1));
        timers.remove(t0 + 9, Node::target(2));
        // A far entry that its owner no longer wants is dropped when it reaches the wheel.
        timers.push(t0 + 100_000, Node::target(0));
        timers.push(t0 + 100_001, Node::target(1));
        let mut out = Vec::new();
        timers.drain_due(t0 + 7, &mut out, |_, _| true);
        out.sort_unstable();
        assert_eq!(out, vec![(t0 + 7, Node::site(0)), (t0 + 7, Node::site(2))]);
        // The removed node can be scheduled again.
        timers.push(t0 + 8, Node::site(1));
        out.clear();
        timers.drain_due(t0 + 50_000, &mut out, |_, n| n != Node::target(1));
        assert_eq!(out, vec![(t0 + 8, Node::site(1))]);
        assert_eq!(timers.next_deadline(), Some(t0 + 100_000));
        out.clear();
        timers.drain_due(t0 + 200_000, &mut out, |_, _| true);
        assert_eq!(out, vec![(t0 + 100_000, Node::target(0))]);
        assert_eq!(timers.next_deadline(), None);
    }

    #[test]
    fn buckets_move_into_slots_in_order_and_removal_works_at_both_levels() {
        let mut timers = Timers::new();
        let t0 = 1 << 20; // a bucket boundary
        timers.drain_due(t0 - 1, &mut Vec::new(), |_, _| true);
        // Ten nodes in one ms a bucket ahead, three in the current bucket, one 60 s ahead.
        for n in 0..10 {
            timers.push(t0 + SLOTS + 100, Node::target(n));
        }
        for n in 10..13 {
            timers.push(t0 + 5, Node::target(n));
        }
        timers.push(t0 + 60_000, Node::site(1));
        timers.remove(t0 + SLOTS + 100, Node::target(4));
        timers.remove(t0 + 5, Node::target(11));
        timers.remove(t0 + 60_000, Node::site(1));
        timers.remove(t0 + 60_000, Node::site(1));
        assert_eq!(timers.next_deadline(), Some(t0 + 5));
        let mut out = Vec::new();
        timers.drain_due(t0 + SLOTS + 99, &mut out, |_, _| true);
        assert_eq!(
            out,
            [(t0 + 5, Node::target(12)), (t0 + 5, Node::target(10))]
        );
        assert_eq!(timers.next_deadline(), Some(t0 + SLOTS + 100));
        out.clear();
        timers.drain_due(t0 + SLOTS + 100, &mut out, |_, _| true);
        let want: Vec<_> = (0..10)
            .rev()
            .filter(|&n| n != 4)
            .map(|n| (t0 + SLOTS + 100, Node::target(n)))
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
}
