//! The scheduler's timer queue: a ring of 1 ms slots over the next few seconds, ~1 s buckets
//! beyond it to ~65 s, and a binary heap for anything further out (backoff waits, long
//! intervals) or already past.
//!
//! Why this shape: a simulated day is ~280 million checks and each re-arms its site's timer,
//! usually 2-6 s ahead (spacing, or the next search's due time), so push and pop must be O(1),
//! allocation-free and cache-friendly. A millisecond's nodes are a singly linked list threaded
//! through one `u32` per node: a slot is just its list's head, so a push writes two words in
//! two small arrays (4 bytes per ms, 4 per node) and nothing is ever full. (An earlier ring of
//! 32-byte slots with eight nodes inline spent ~14% of a simulated day waiting on its stores:
//! 264 KB written at random did not stay in cache.) The ring is 8 s long whatever the number of
//! sites (a site re-arms a few seconds ahead, so most pushes go straight into their slot), a
//! constant so that a deadline's slot is one mask: an earlier ring that grew with the number
//! of sites, from 1 s, cost ~6 instructions per check in loads and masks, and a few sites
//! lose nothing by the longer ring (its heads were allocated for 8 s anyway). Pushes further ahead
//! append to their bucket's vector, which moves into the ring in one pass when the ring
//! reaches it. Hand-written because the timer crates we know either own the clock or allocate
//! per timer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Bucket width in ms; the ring's length is a multiple of it.
const BUCKET: u64 = 1024;
/// Buckets beyond the ring (together ~65 s).
const BUCKETS: u64 = 64;
/// The ring's length in ms.
const RING: u64 = 8 * BUCKET;
/// Words of the ring's bitmap.
const BIT_WORDS: usize = (RING / 64) as usize;
/// The end of a slot's list (and an empty slot's head).
const END: u32 = u32::MAX;
/// A node's link while it is not in the ring.
const UNLINKED: u32 = u32::MAX - 1;

/// A timer's owner: a site, by its index. (Only sites are timed.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Node(u32);

impl Node {
    /// Site `s` (below 2^31: the scheduler numbers fewer sites).
    pub(crate) fn site(s: u32) -> Self {
        debug_assert!(s < UNLINKED);
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

/// Nodes keyed by a millisecond deadline, the way the scheduler times its sites: a node is
/// in the ring at most once (pushing it there again moves it, so a list can never be
/// corrupted), and its owner removes an entry it replaces with [`Timers::remove`]. Far-heap
/// entries are not removed: the owner says which still stand (its liveness check) when they
/// enter the wheel, and checks what comes out again. Nodes with equal deadlines come out last
/// pushed first; different deadlines come out in deadline order per drain.
#[derive(Debug, Clone)]
pub(crate) struct Timers {
    /// Every deadline before `base` has been drained; the ring holds those in
    /// `[base, ring_end)`, slot `at & (ring - 1)`.
    base: u64,
    /// `base` rounded down to a bucket, plus `RING`: where the buckets begin. (Not
    /// `base + RING`: then the first bucket and the ring would share a stretch.)
    ring_end: u64,
    /// Per slot: the node pushed there last, the head of its list (`END`: none); 32 KB, a
    /// fixed length, so that an index masked to the ring needs no bounds check.
    heads: Box<[u32; RING as usize]>,
    /// Per node: the next node in its slot's list (`END` at the tail), or `UNLINKED` while it
    /// is not in the ring. Grows to the largest node pushed.
    links: Vec<u32>,
    /// One bit per slot: non-empty.
    slot_bits: [u64; BIT_WORDS],
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
    /// The far heap's earliest deadline (`u64::MAX`: empty), so that the paths taken every
    /// millisecond compare one field instead of looking into the heap.
    far_first: u64,
    /// The earliest deadline (`u64::MAX`: none), possibly a stale entry's: recomputed by each
    /// drain, lowered by each push. Asked every simulated millisecond, so kept rather than
    /// searched for.
    next: u64,
}

const _: () = assert!(BUCKETS == 64, "bucket_bits is one u64");

impl Timers {
    pub(crate) fn new() -> Self {
        Self {
            base: 0,
            ring_end: RING,
            heads: vec![END; RING as usize]
                .into_boxed_slice()
                .try_into()
                .expect("RING heads"),
            links: Vec::new(),
            slot_bits: [0; BIT_WORDS],
            buckets: vec![Vec::new(); BUCKETS as usize].into_boxed_slice(),
            bucket_bits: 0,
            bucket_min: vec![u64::MAX; BUCKETS as usize].into_boxed_slice(),
            far: BinaryHeap::new(),
            far_first: u64::MAX,
            next: u64::MAX,
        }
    }

    /// Makes room for `sites` owners' links (pushing a larger node grows them too, out of
    /// line).
    pub(crate) fn fit(&mut self, sites: usize) {
        if self.links.len() < sites {
            self.links.resize(sites, UNLINKED);
        }
    }

    /// Every pending node with its deadline: the wheel's, then the far heap's.
    #[cfg(test)]
    fn pending(&self) -> Vec<(u64, Node)> {
        let mut all = self.in_wheel();
        all.extend(self.far.iter().map(|&Reverse(e)| e));
        all
    }

    /// Every node in the ring or the buckets with its deadline, in push order within each
    /// millisecond.
    #[cfg(test)]
    fn in_wheel(&self) -> Vec<(u64, Node)> {
        let mask = RING - 1;
        let start = self.base & mask;
        let mut all = Vec::new();
        for (w, &bits) in self.slot_bits[..RING as usize / 64].iter().enumerate() {
            let mut word = bits;
            while word != 0 {
                let k = w as u64 * 64 + u64::from(word.trailing_zeros());
                word &= word - 1;
                let at = self.base + (k.wrapping_sub(start) & mask);
                let from = all.len();
                self.each_at(at, |n| all.push((at, Node(n))));
                all[from..].reverse(); // the list is newest first
            }
        }
        let first = (self.ring_end) / BUCKET;
        for (b, bucket) in self.buckets.iter().enumerate() {
            let start = (first + (b as u64).wrapping_sub(first) % BUCKETS) * BUCKET;
            all.extend(bucket.iter().map(|&e| (start + (e >> 32), Node(e as u32))));
        }
        all
    }

    /// The ring slot of deadline `at`.
    #[inline(always)]
    fn slot_of(&self, at: u64) -> usize {
        (at & (RING - 1)) as usize
    }

    fn set_base(&mut self, base: u64) {
        self.base = base;
        self.ring_end = base - base % BUCKET + RING;
    }

    /// The first deadline past the buckets: `[ring_end, bucket_end)` goes to buckets.
    fn bucket_end(&self) -> u64 {
        self.ring_end + BUCKETS * BUCKET
    }

    /// Schedules `node` at `at`. Inlined: it is on the path of every check, and a call would
    /// cost as much as the push (saving registers around it).
    #[inline(always)]
    pub(crate) fn push(&mut self, at: u64, node: Node) {
        let in_ring = at < self.ring_end && at >= self.base;
        match self.links.get(node.0 as usize) {
            Some(&link) if in_ring && link != UNLINKED => self.relink(at, node),
            _ => self.push_fresh(at, node),
        }
    }

    /// [`Self::push`] of a node its owner knows is not in the ring (it has no pending deadline
    /// there): skips the look at its link, on the path of every check.
    #[inline(always)]
    pub(crate) fn push_fresh(&mut self, at: u64, node: Node) {
        if at < self.next {
            self.lower_next(at);
        }
        if at < self.ring_end && at >= self.base {
            let k = self.slot_of(at);
            // `heads` borrowed once: a store through `link` could otherwise be taken to change
            // where it points, and its address reloaded.
            let heads = &mut *self.heads;
            match self.links.get_mut(node.0 as usize) {
                Some(link) => {
                    debug_assert_eq!(*link, UNLINKED, "a fresh node is not in the ring");
                    *link = std::mem::replace(&mut heads[k], node.0);
                    self.slot_bits[k >> 6] |= 1 << (k & 63);
                }
                None => self.relink(at, node),
            }
        } else {
            self.push_beyond(at, node);
        }
    }

    /// A push earlier than every pending deadline. Out of line on purpose: the test before
    /// the call is then a branch, predicted (a push is rarely the earliest), where `min`
    /// compiled to a conditional move that made the next deadline, and so the driver's next
    /// millisecond, wait for every push's deadline, i.e. for each check's site record.
    #[cold]
    #[inline(never)]
    fn lower_next(&mut self, at: u64) {
        self.next = at;
    }

    /// A push into the ring of a node it has no link for yet, or one that is in it already
    /// (moved: a node is in the ring once, or the lists would tangle). Rare: the scheduler
    /// sizes the links for its sites, and removes a site's entry before it pushes another
    /// (short of a far entry that comes in twice).
    #[inline(never)]
    fn relink(&mut self, at: u64, node: Node) {
        let n = node.0 as usize;
        if n >= self.links.len() {
            self.links.resize(n + 1, UNLINKED);
        }
        if self.links[n] != UNLINKED {
            // Where it is linked is not recorded: look through the ring.
            for k in 0..RING as usize {
                if self.unlink_at_slot(k, node.0) {
                    break;
                }
            }
        }
        self.push_fresh(at, node);
    }

    /// Takes `node` out of slot `k`'s list if it is there; whether it was.
    fn unlink_at_slot(&mut self, k: usize, node: u32) -> bool {
        let mut prev = END;
        let mut n = self.heads[k];
        while n != END {
            let next = self.links[n as usize];
            if n == node {
                match prev {
                    END => self.heads[k] = next,
                    p => self.links[p as usize] = next,
                }
                self.links[n as usize] = UNLINKED;
                if self.heads[k] == END {
                    self.slot_bits[k >> 6] &= !(1 << (k & 63));
                }
                return true;
            }
            prev = n;
            n = next;
        }
        false
    }

    /// Past the ring: into a bucket, or the far heap (its one caller, `push_fresh`, has
    /// lowered the next deadline already). Out of line, so the ring's push stays small where
    /// it is inlined.
    #[inline(never)]
    fn push_beyond(&mut self, at: u64, node: Node) {
        if at < self.base || at >= self.bucket_end() {
            self.far.push(Reverse((at, node)));
            self.far_first = self.far_first.min(at);
        } else {
            let b = ((at / BUCKET) % BUCKETS) as usize;
            self.buckets[b].push(entry(at, node));
            self.bucket_bits |= 1 << b;
            self.bucket_min[b] = self.bucket_min[b].min(at);
        }
    }

    /// Calls `f` with each node (site index) due at `at` if it is in the ring (else none),
    /// newest first.
    #[cfg(test)]
    fn each_at(&self, at: u64, mut f: impl FnMut(u32)) {
        if at >= self.ring_end || at < self.base {
            return;
        }
        let mut n = self.heads[self.slot_of(at)];
        while let Some(&next) = self.links.get(n as usize) {
            f(n);
            n = next;
        }
    }

    /// The first `N` nodes (site indices) due at `at` if it is in the ring, newest first,
    /// then `END` (a value above every node): what is coming soon, for the owner to read
    /// ahead. Without a branch per node, so that a list's varying length costs no
    /// mispredicted loop exit.
    #[inline]
    pub(crate) fn first_at<const N: usize>(&self, at: u64) -> [u32; N] {
        let mut n = match at < self.ring_end && at >= self.base {
            true => self.heads[self.slot_of(at)],
            false => END,
        };
        std::array::from_fn(|_| {
            let this = n;
            n = *self.links.get(n as usize).unwrap_or(&END);
            this
        })
    }

    /// Takes `node` out of the wheel at `at`, if it is there. (A far-heap entry is left in
    /// place: the owner's liveness check drops it later.)
    #[inline(never)] // rare: a wake-up replaced by an earlier one
    pub(crate) fn remove(&mut self, at: u64, node: Node) {
        if at < self.ring_end && at >= self.base {
            // The others keep their order (determinism).
            self.unlink_at_slot(self.slot_of(at), node.0);
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
        now >= self.base || self.far_first <= now
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

    /// The usual drain, every millisecond, in pieces the owner strings together in its own
    /// loop (a closure here was compiled out of line, a call per site): if `now` is in
    /// `base`'s bucket short of its last millisecond, nothing is due in the far heap, and
    /// `[base, now]` lies in one word of the bitmap, takes those slots out of the bitmap, moves
    /// `base` past `now` and returns them as `(bits, at)`: bit `i` set for a non-empty slot
    /// with deadline `at + i`. Each slot's nodes then come from [`Self::take_slot`] and
    /// [`Self::take_next`]. Otherwise `None`, and the owner calls [`Self::drain_each`].
    #[inline(always)]
    pub(crate) fn take_due_word(&mut self, now: u64) -> Option<(u64, u64)> {
        // The ring's words cover 64 ms each, aligned to multiples of 64 (the ring's length is
        // a multiple of 64, so a deadline's slot and the deadline agree below bit 6); a bucket
        // ends at a multiple of `BUCKET`.
        let word_end = (self.base | 63) + 1;
        let bucket_last = self.base | (BUCKET - 1);
        if now < self.base || now >= word_end.min(bucket_last).min(self.far_first) {
            return None;
        }
        let w = ((self.base & (RING - 1)) / 64) as usize & (BIT_WORDS - 1); // no bounds check
        let bits = (u64::MAX << (self.base % 64)) & (u64::MAX >> (63 - now % 64));
        let word = self.slot_bits[w] & bits;
        let rest = self.slot_bits[w] & !bits;
        self.slot_bits[w] = rest;
        let at = self.base - self.base % 64;
        self.base = now + 1;
        // The next deadline: usually in the rest of this word (its slots before `base`'s are
        // empty: their deadlines would be before `base` or past `ring_end`).
        self.next = match rest {
            0 => self.find_next(),
            _ => (at + u64::from(rest.trailing_zeros())).min(self.far_first),
        };
        Some((word, at))
    }

    /// Empties the slot of deadline `at` (one [`Self::take_due_word`] returned) and returns
    /// its first node (`END`: none; a value above every node).
    #[inline(always)]
    pub(crate) fn take_slot(&mut self, at: u64) -> u32 {
        let k = self.slot_of(at);
        std::mem::replace(&mut self.heads[k], END)
    }

    /// Unlinks node `n` (one [`Self::take_slot`] or this returned) and returns the next node
    /// of its slot, or `None` past the last.
    #[inline(always)]
    pub(crate) fn take_next(&mut self, n: u32) -> Option<u32> {
        self.links
            .get_mut(n as usize)
            .map(|link| std::mem::replace(link, UNLINKED))
    }

    /// Takes out every node with a deadline `<= now` and hands it to `visit(at, node, true)`
    /// (in deadline order; last pushed first within a millisecond), without a buffer in
    /// between. `visit(at, node, false)` asks whether a far-heap entry still stands when it
    /// moves into the wheel. Entries that come out may still be stale, so the owner checks
    /// them again.
    pub(crate) fn drain_each(&mut self, now: u64, visit: impl FnMut(u64, Node, bool) -> bool) {
        self.drain_all(now, visit);
        self.next = self.find_next();
    }

    fn drain_all(&mut self, now: u64, mut visit: impl FnMut(u64, Node, bool) -> bool) {
        // Far entries pushed already past come before everything in the wheel.
        while self.far_first <= now && self.far_first < self.base {
            let Some((at, node)) = self.pop_far() else {
                break;
            };
            visit(at, node, true);
        }
        if now < self.base {
            return;
        }
        loop {
            // Up to `now` or the end of `base`'s bucket, whichever comes first: the slots in
            // [base, end] are contiguous in the ring (its length is a multiple of `BUCKET`).
            let boundary = self.bucket_boundary();
            let end = now.min(boundary - 1);
            self.visit_slots(self.base, end, &mut visit);
            self.set_base(end + 1);
            if self.base == boundary {
                // The ring now reaches the end of this bucket: it moves in, and far entries
                // now inside the window move into the wheel.
                self.enter_bucket(boundary + RING - BUCKET);
                self.take_far(&mut visit);
            }
            if end == now {
                break;
            }
            if self.slot_bits[..RING as usize / 64].iter().all(|&w| w == 0) {
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
            .map_or(u64::MAX, |start| start + BUCKET - RING);
        let far = match self.far_first {
            u64::MAX => u64::MAX,
            at => at - at % BUCKET,
        };
        let to = bucket.min(far).min(now + 1);
        if to <= self.base {
            return;
        }
        self.set_base(to);
        if to == bucket {
            self.enter_bucket(to + RING - BUCKET);
        }
        self.take_far(visit);
    }

    /// Takes the far heap's earliest entry, keeping `far_first`.
    fn pop_far(&mut self) -> Option<(u64, Node)> {
        let Reverse(first) = self.far.pop()?;
        self.far_first = self.far.peek().map_or(u64::MAX, |Reverse((at, _))| *at);
        Some(first)
    }

    /// The end of `base`'s bucket: the first millisecond of the next one.
    #[inline(always)]
    fn bucket_boundary(&self) -> u64 {
        self.base - self.base % BUCKET + BUCKET
    }

    /// Far deadlines now inside the wheel's window move into it, if they still stand.
    fn take_far(&mut self, visit: &mut impl FnMut(u64, Node, bool) -> bool) {
        let end = self.bucket_end();
        while self.far_first < end {
            let Some((at, node)) = self.pop_far() else {
                break;
            };
            if visit(at, node, false) {
                self.push(at, node);
            }
        }
    }

    /// Visits the slots for `[from, to]` (inside one bucket), emptying them.
    fn visit_slots(&mut self, from: u64, to: u64, visit: &mut impl FnMut(u64, Node, bool) -> bool) {
        let mask = RING - 1;
        let (lo, hi) = (from & mask, to & mask);
        let (lo_word, hi_word) = (lo / 64, hi / 64);
        for w in lo_word..=hi_word {
            let first = if w == lo_word { lo % 64 } else { 0 };
            let last = if w == hi_word { hi % 64 } else { 63 };
            let bits = (u64::MAX << first) & (u64::MAX >> (63 - last));
            self.visit_word(w, bits, from - lo, visit);
        }
    }

    /// Visits the slots of bitmap word `w` whose `bits` are set, emptying them; `start` is
    /// the deadline of slot 0.
    #[inline(always)]
    fn visit_word(
        &mut self,
        w: u64,
        bits: u64,
        start: u64,
        visit: &mut impl FnMut(u64, Node, bool) -> bool,
    ) {
        let w = (w & (BIT_WORDS as u64 - 1)) as usize; // it is: no bounds check
        let mut word = self.slot_bits[w] & bits;
        self.slot_bits[w] &= !bits;
        while word != 0 {
            let k = w as u64 * 64 + u64::from(word.trailing_zeros());
            word &= word - 1;
            let at = start + k;
            let slot = (k & (RING - 1)) as usize; // `k` is: no bounds check
            let mut n = std::mem::replace(&mut self.heads[slot], END);
            while let Some(link) = self.links.get_mut(n as usize) {
                let next = std::mem::replace(link, UNLINKED);
                visit(at, Node(n), true);
                n = next;
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
    #[inline(always)]
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        debug_assert!(
            self.next <= self.find_next(),
            "the kept deadline is never late"
        );
        (self.next != u64::MAX).then_some(self.next)
    }

    /// The earliest deadline (`u64::MAX`: none), searched for.
    #[inline(never)]
    fn find_next(&self) -> u64 {
        // The buckets only if the ring is empty: everything in them is at or after `ring_end`.
        // (Their earliest may be stale, removed: early, never late.)
        let first = match self.ring_first() {
            Some(at) => at,
            None => self.next_bucket().map_or(u64::MAX, |start| {
                self.bucket_min[((start / BUCKET) % BUCKETS) as usize]
            }),
        };
        first.min(self.far_first)
    }

    /// The ring's earliest deadline: its first set bit at or after `base`'s slot, going round
    /// once (usually in the first word).
    #[inline]
    fn ring_first(&self) -> Option<u64> {
        let mask = RING - 1;
        let start = self.base & mask;
        // The usual case, checked first (it is asked every simulated millisecond): something
        // in the rest of `base`'s word.
        let word = self.slot_bits[self.slot_of(self.base) / 64] & (u64::MAX << (start % 64));
        if word != 0 {
            return Some(self.base + u64::from(word.trailing_zeros()) - start % 64);
        }
        self.ring_first_beyond()
    }

    /// [`Self::ring_first`] past the rest of `base`'s word.
    #[inline(never)]
    fn ring_first_beyond(&self) -> Option<u64> {
        let mask = RING - 1;
        let start = self.base & mask;
        let words = RING / 64;
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
        assert!(timers.links.iter().all(|&l| l == UNLINKED));
    }

    #[test]
    fn a_node_is_in_the_ring_once_and_pushing_it_again_moves_it() {
        let mut timers = Timers::new();
        let t0 = 7 * BUCKET;
        timers.drain_due(t0 - 1, &mut Vec::new(), |_, _| true);
        // Node 5000 has no link yet: the links grow for it.
        for (at, k) in [(t0 + 9, 1), (t0 + 9, 5000), (t0 + 9, 2), (t0 + 4, 3)] {
            timers.push(at, Node::site(k));
        }
        // Pushed again: it leaves its list (keeping the others' order) and joins the new one.
        timers.push(t0 + 4, Node::site(5000));
        timers.push(t0 + 2, Node::site(3));
        let mut out = Vec::new();
        timers.drain_due(t0 + 100, &mut out, |_, _| true);
        assert_eq!(
            out,
            [
                (t0 + 2, Node::site(3)),
                (t0 + 4, Node::site(5000)),
                (t0 + 9, Node::site(2)),
                (t0 + 9, Node::site(1)),
            ]
        );
        assert_eq!(timers.next_deadline(), None);
    }

    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        /// Push a node this many ms ahead of the drained point (may be behind it).
        Push(i64, u32),
        /// Remove the `n`th pending entry (modulo), if any.
        Remove(usize),
        /// Drain up to this many ms ahead; with `true`, the way the scheduler drains its usual
        /// millisecond (`take_due_word`, then `drain_each` if that declines).
        Drain(u64, bool),
        /// Make room for this many sites' links.
        Fit(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let ahead = prop_oneof![-50i64..20, 0i64..3_000, 0i64..70_000, 0i64..10_000_000,];
        prop_oneof![
            6 => (ahead, 0u32..40).prop_map(|(a, n)| Op::Push(a, n)),
            1 => any::<usize>().prop_map(Op::Remove),
            3 => (prop_oneof![0u64..5, 0u64..2_000, 0u64..100_000, 0u64..20_000_000], any::<bool>())
                .prop_map(|(a, fast)| Op::Drain(a, fast)),
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
                        // Removed, it is not in the ring: the scheduler's fast path pushes it
                        // without looking (half the nodes here).
                        if n % 2 == 0 {
                            timers.push_fresh(at, Node::site(n));
                        } else {
                            timers.push(at, Node::site(n));
                        }
                    }
                    Op::Remove(i) => {
                        if !model.is_empty() {
                            let (&n, &at) = model.iter().nth(i % model.len()).unwrap();
                            timers.remove(at, Node::site(n));
                            model.remove(&n);
                        }
                    }
                    Op::Drain(ahead, fast) => {
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
                        let mut visit = |at: u64, node: Node, due: bool| {
                            let live = model.get(&node.0) == Some(&at);
                            if due && live {
                                model.remove(&node.0);
                                out.push((at, node));
                            }
                            live
                        };
                        let word = if fast { timers.take_due_word(to) } else { None };
                        match word {
                            Some((mut word, at0)) => {
                                while word != 0 {
                                    let at = at0 + u64::from(word.trailing_zeros());
                                    word &= word - 1;
                                    let mut n = timers.take_slot(at);
                                    while let Some(next) = timers.take_next(n) {
                                        visit(at, Node(n), true);
                                        n = next;
                                    }
                                }
                            }
                            None => timers.drain_each(to, &mut visit),
                        }
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
