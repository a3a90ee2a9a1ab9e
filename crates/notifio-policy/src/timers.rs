//! The scheduler's timer queue: an intrusive timing wheel of 1 ms slots over the next ~65 s,
//! with a binary heap for anything further out (backoff waits, long intervals) or already past.
//!
//! Why this shape: a simulated day is ~288 million checks and each needs a timer, so push and
//! pop must be O(1) and allocation-free. A slot holds only the head of a singly linked list
//! threaded through a `next` array indexed by node (a node is a search target or a site), so
//! pushing writes two `u32`s and nothing allocates once the arrays have grown. Hand-written
//! because the timer crates we know either own the clock or allocate per timer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

const SLOT_BITS: u32 = 16;
const WINDOW: u64 = 1 << SLOT_BITS;
const MASK: u64 = WINDOW - 1;

/// End of a slot's list.
const NIL: u32 = u32::MAX;
/// In no slot's list (it may still have entries in the far heap).
const UNLINKED: u32 = u32::MAX - 1;
/// Tag bit of a site node; a target node is the target's index.
const SITE: u32 = 1 << 31;

/// A timer's owner: a search target or a site, packed in a `u32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Node(u32);

impl Node {
    pub(crate) fn target(t: u32) -> Self {
        debug_assert!(t < SITE);
        Self(t)
    }

    pub(crate) fn site(s: u32) -> Self {
        debug_assert!(s < SITE);
        Self(s | SITE)
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

/// Nodes keyed by a millisecond deadline. A node is in at most one wheel slot; the far heap is
/// deleted from lazily (the owner says which of its entries are still live). Nodes with equal
/// deadlines come out in no particular order; different deadlines come out in deadline order
/// per drain.
#[derive(Debug, Clone)]
pub(crate) struct Timers {
    /// Every wheel slot for a time before `base` has been drained; the wheel holds exactly the
    /// linked nodes with a deadline in `[base, base + WINDOW)`.
    base: u64,
    /// Per slot: the first node of its list, or `NIL`.
    heads: Box<[u32]>,
    /// One bit per slot: non-empty.
    bits: Box<[u64]>,
    /// Per target node / per site node: the next node in its slot, `NIL`, or `UNLINKED`.
    target_next: Vec<u32>,
    site_next: Vec<u32>,
    /// Deadlines outside the wheel's window (far future, or pushed already past).
    far: BinaryHeap<Reverse<(u64, Node)>>,
}

impl Timers {
    pub(crate) fn new() -> Self {
        Self {
            base: 0,
            heads: vec![NIL; WINDOW as usize].into_boxed_slice(),
            bits: vec![0; (WINDOW / 64) as usize].into_boxed_slice(),
            target_next: Vec::new(),
            site_next: Vec::new(),
            far: BinaryHeap::new(),
        }
    }

    /// Makes room for target node `t` (call once per target, in index order).
    pub(crate) fn add_target(&mut self) {
        self.target_next.push(UNLINKED);
    }

    /// Makes room for site node `s` (call once per site, in index order).
    pub(crate) fn add_site(&mut self) {
        self.site_next.push(UNLINKED);
    }

    fn next_of(&mut self, node: Node) -> &mut u32 {
        match node.split() {
            Ok(t) => &mut self.target_next[t as usize],
            Err(s) => &mut self.site_next[s as usize],
        }
    }

    /// Schedules `node` at `at`. The node must not be in a wheel slot already (see `remove`).
    pub(crate) fn push(&mut self, at: u64, node: Node) {
        if at >= self.base && at - self.base < WINDOW {
            debug_assert_eq!(*self.next_of(node), UNLINKED, "{node:?} pushed twice");
            self.link(at, node);
        } else {
            self.far.push(Reverse((at, node)));
        }
    }

    /// Puts `node` at the front of `at`'s slot, unless it is linked already.
    fn link(&mut self, at: u64, node: Node) {
        let i = (at & MASK) as usize;
        let head = self.heads[i];
        let next = self.next_of(node);
        if *next != UNLINKED {
            return;
        }
        *next = head;
        self.heads[i] = node.0;
        self.bits[i >> 6] |= 1 << (i & 63);
    }

    /// Takes `node` out of the wheel slot of `at`, if it is linked there. (A far-heap entry is
    /// left in place: the owner's liveness check drops it later.)
    pub(crate) fn remove(&mut self, at: u64, node: Node) {
        let after = *self.next_of(node);
        if after == UNLINKED {
            return;
        }
        let i = (at & MASK) as usize;
        if self.heads[i] == node.0 {
            self.heads[i] = after;
        } else {
            let mut cur = self.heads[i];
            while cur != NIL {
                let next = self.next_of(Node(cur));
                if *next == node.0 {
                    *next = after;
                    break;
                }
                cur = *next;
            }
        }
        *self.next_of(node) = UNLINKED;
        if self.heads[i] == NIL {
            self.bits[i >> 6] &= !(1 << (i & 63));
        }
    }

    /// Whether anything is due at `now` (cheap: lets `poll_due` skip the drain).
    pub(crate) fn any_due(&self, now: u64) -> bool {
        now >= self.base || self.far.peek().is_some_and(|Reverse((at, _))| *at <= now)
    }

    /// Moves every node with a deadline `<= now` into `out`, with its deadline. `live` says
    /// whether a far-heap entry still stands when it moves into the wheel; entries that come
    /// out here may still be stale, so the owner checks them again.
    pub(crate) fn drain_due(
        &mut self,
        now: u64,
        out: &mut Vec<(u64, Node)>,
        mut live: impl FnMut(u64, Node) -> bool,
    ) {
        while let Some(&Reverse((at, node))) = self.far.peek() {
            if at > now {
                break;
            }
            self.far.pop();
            out.push((at, node));
        }
        if now < self.base {
            return;
        }
        let last = now.min(self.base + WINDOW - 1);
        let mut t = self.base;
        while let Some(found) = self.next_set(t, last) {
            let i = (found & MASK) as usize;
            let mut cur = std::mem::replace(&mut self.heads[i], NIL);
            self.bits[i >> 6] &= !(1 << (i & 63));
            while cur != NIL {
                let node = Node(cur);
                cur = std::mem::replace(self.next_of(node), UNLINKED);
                out.push((found, node));
            }
            t = found + 1;
        }
        self.base = now + 1;
        // Far deadlines that are now inside the window move into it, if they still stand.
        while let Some(&Reverse((at, node))) = self.far.peek() {
            if at >= self.base + WINDOW {
                break;
            }
            self.far.pop();
            if live(at, node) {
                self.link(at, node);
            }
        }
    }

    /// The earliest deadline, if any (possibly a stale far-heap entry: early, never late).
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        let wheel = self.next_set(self.base, self.base + WINDOW - 1);
        let far = self.far.peek().map(|Reverse((at, _))| *at);
        match (wheel, far) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The first time in `[from, to]` whose slot is non-empty (`to - from < WINDOW`).
    fn next_set(&self, from: u64, to: u64) -> Option<u64> {
        let mut t = from;
        while t <= to {
            let i = (t & MASK) as usize;
            let word = self.bits[i >> 6] >> (i & 63);
            if word != 0 {
                let found = t + u64::from(word.trailing_zeros());
                return (found <= to).then_some(found);
            }
            t += 64 - (i & 63) as u64;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_come_out_in_order_across_the_window_and_the_heap() {
        let mut timers = Timers::new();
        for _ in 0..100 {
            timers.add_target();
        }
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
        for _ in 0..4 {
            timers.add_target();
            timers.add_site();
        }
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
}
