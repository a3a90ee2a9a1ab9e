//! The scheduler's timer queue: a timing wheel of 1 ms slots over the next ~65 s, with a
//! binary heap for anything further out (backoff waits) or already past.
//!
//! Why not just a `BinaryHeap`: with 100,000 searches every check pops one deadline from a
//! heap of 100,000, and that pop (≈17 cache-missing levels) was the largest single cost of a
//! simulated day. Nearly every deadline is a search interval (~30 s) or a site spacing (~2 s),
//! so a wheel makes push and pop O(1); the rare long wait still goes through the heap.
//! Hand-written because the timer crates we know (tokio's, `hierarchical_hash_wheel_timer`)
//! either own the clock or allocate per timer; this one is 100 lines and takes `now` as a number.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

const SLOT_BITS: u32 = 16;
const WINDOW: u64 = 1 << SLOT_BITS;
const MASK: u64 = WINDOW - 1;

/// Events keyed by a millisecond deadline. Events with equal deadlines come out in no
/// particular order; events with different deadlines come out in deadline order per drain.
#[derive(Debug, Clone)]
pub(crate) struct Timers<E> {
    /// Every wheel slot for a time before `base` has been drained; the wheel holds exactly the
    /// events with a deadline in `[base, base + WINDOW)`.
    base: u64,
    slots: Vec<Vec<(u64, E)>>,
    /// One bit per slot: non-empty.
    bits: Vec<u64>,
    /// Deadlines outside the wheel's window (far future, or pushed already past).
    far: BinaryHeap<Reverse<(u64, E)>>,
}

impl<E: Copy + Ord> Timers<E> {
    pub(crate) fn new() -> Self {
        Self {
            base: 0,
            slots: (0..WINDOW).map(|_| Vec::new()).collect(),
            bits: vec![0; (WINDOW / 64) as usize],
            far: BinaryHeap::new(),
        }
    }

    pub(crate) fn push(&mut self, at: u64, event: E) {
        if at >= self.base && at - self.base < WINDOW {
            let i = (at & MASK) as usize;
            self.slots[i].push((at, event));
            self.bits[i >> 6] |= 1 << (i & 63);
        } else {
            self.far.push(Reverse((at, event)));
        }
    }

    /// Whether anything is due at `now` (cheap: lets `poll_due` skip the drain).
    pub(crate) fn any_due(&self, now: u64) -> bool {
        now >= self.base || self.far.peek().is_some_and(|Reverse((at, _))| *at <= now)
    }

    /// Moves every event with a deadline `<= now` into `out`.
    pub(crate) fn drain_due(&mut self, now: u64, out: &mut Vec<(u64, E)>) {
        while let Some(&Reverse((at, event))) = self.far.peek() {
            if at > now {
                break;
            }
            self.far.pop();
            out.push((at, event));
        }
        if now < self.base {
            return;
        }
        let last = now.min(self.base + WINDOW - 1);
        let mut t = self.base;
        while let Some(found) = self.next_set(t, last) {
            let i = (found & MASK) as usize;
            out.append(&mut self.slots[i]);
            self.bits[i >> 6] &= !(1 << (i & 63));
            t = found + 1;
        }
        self.base = now + 1;
        // Far deadlines that are now inside the window move into it.
        while let Some(&Reverse((at, event))) = self.far.peek() {
            if at >= self.base + WINDOW {
                break;
            }
            self.far.pop();
            self.push(at, event);
        }
    }

    /// The earliest deadline, if any.
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
        let t0 = 1_700_000_000_000u64;
        let mut want = Vec::new();
        for (k, at) in [5u64, 0, 70_000, 3_600_000, 64, 63, 65_535, 65_536, 1]
            .into_iter()
            .enumerate()
        {
            timers.push(t0 + at, k);
            want.push((t0 + at, k));
        }
        want.sort_unstable();
        let mut got = Vec::new();
        let mut now = t0 - 10;
        while let Some(next) = timers.next_deadline() {
            assert!(next >= now || got.is_empty());
            let mut out = Vec::new();
            // A spurious drain before the deadline yields nothing.
            if next > now {
                timers.drain_due(next - 1, &mut out);
                assert!(out.is_empty(), "{out:?} before {next}");
            }
            now = next;
            timers.drain_due(now, &mut out);
            assert!(!out.is_empty());
            assert!(out.iter().all(|(at, _)| *at == now));
            got.extend(out);
            // Pushing into the past or the near future while draining works.
            if got.len() == 3 {
                timers.push(now - 5, 99);
                timers.push(now + 2, 98);
                want.push((now - 5, 99));
                want.push((now + 2, 98));
                want.sort_unstable();
                let mut out = Vec::new();
                timers.drain_due(now, &mut out);
                assert_eq!(out, vec![(now - 5, 99)]);
                got.extend(out);
            }
        }
        got.sort_unstable();
        assert_eq!(got, want);
    }
}
