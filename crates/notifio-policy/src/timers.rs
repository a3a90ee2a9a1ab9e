//! The scheduler's timer: a hierarchical timing wheel in the style of tokio's
//! (`runtime/time/wheel`), counting in ticks (the scheduler's 8 ms [`crate::TICK`]).
//!
//! Each site has at most one wake-up, so the wheel holds `(tick, site)` entries. Level `l` has
//! 64 slots of 64^l ticks each, and an entry sits at the level of the highest 6-bit digit in
//! which its tick differs from the wheel's current tick ([`level_for`]): the next 64 ticks
//! have a slot each, the next 4,096 share a slot per 64, and so on. So `insert` is O(1)
//! whatever the number of sites, and a slot is only looked at when its time comes; then its
//! entries move down to the slots for their own ticks (a cascade), and at level 0 they are
//! due. Eleven levels (66 bits) span every tick that milliseconds in a `u64` can name, so no
//! level ever wraps around.
//!
//! The order is defined, because the scheduler's plan must be reproducible: entries come out
//! by tick, and within one tick in the order they were inserted. That order costs nothing to
//! keep: a slot is a vector in insertion order, a cascade moves it down in that order, and
//! every entry for a tick is filed at a level no higher than the entries for that tick filed
//! before it, so it always reaches the tick's slot after them. An entry for a tick the wheel
//! has already reached comes out at the next poll, after the due entries of its tick and
//! before those of later ticks. Hand-written: the timing-wheel crates we know run their own
//! clock or leave the order within a tick undefined.

/// Slots per level: a tick's digits are 6 bits.
const SLOTS: usize = 64;
const DIGIT_BITS: u32 = 6;
/// Enough levels for any `u64` tick (11 × 6 = 66 bits).
const LEVELS: usize = 11;

/// One wake-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    tick: u64,
    site: u32,
}

/// One level: 64 slots, and which of them hold anything.
#[derive(Debug)]
struct Level {
    slots: [Vec<Entry>; SLOTS],
    occupied: u64,
}

/// The level at which an entry for `tick` sits while the wheel is at `now` (`tick > now`):
/// that of the highest digit in which they differ.
fn level_for(now: u64, tick: u64) -> usize {
    // `| 63`: ticks that differ only in the lowest digit are level 0.
    let highest_bit = 63 - ((now ^ tick) | 63).leading_zeros();
    (highest_bit / DIGIT_BITS) as usize
}

/// `tick`'s digit at `level`: its slot there.
fn slot_at(level: usize, tick: u64) -> usize {
    ((tick >> (DIGIT_BITS * level as u32)) % SLOTS as u64) as usize
}

/// Wake-ups by tick; see the module docs.
#[derive(Debug)]
pub(crate) struct Wheel {
    /// The tick the wheel is at: every entry at or before it is in `due`, every later one in
    /// `levels`, at [`level_for`]`(now, tick)`.
    now: u64,
    levels: [Level; LEVELS],
    /// The entries whose tick the wheel has reached, `due[taken..]`, in the order they come
    /// out (by tick, then as inserted). A vector and a cursor, so that a level-0 slot can
    /// become this list whole.
    due: Vec<Entry>,
    taken: usize,
    /// An empty vector swapped in for a slot being emptied, so that slots keep their
    /// allocations (a slot empties and fills again every 64^l ticks).
    spare: Vec<Entry>,
}

impl Wheel {
    pub(crate) fn new() -> Self {
        Self {
            now: 0,
            levels: std::array::from_fn(|_| Level {
                slots: std::array::from_fn(|_| Vec::new()),
                occupied: 0,
            }),
            due: Vec::new(),
            taken: 0,
            spare: Vec::new(),
        }
    }

    /// Wakes `site` at `tick`. The caller keeps at most one entry per site and removes it
    /// before inserting another (the scheduler's `SiteRecord::wake`).
    pub(crate) fn insert(&mut self, tick: u64, site: u32) {
        let entry = Entry { tick, site };
        if tick <= self.now {
            // Reached already: due at the next poll, after the others due by its tick.
            let at = self.taken + self.due[self.taken..].partition_point(|e| e.tick <= tick);
            self.due.insert(at, entry);
        } else {
            self.file(entry);
        }
    }

    /// Puts an entry for a tick after `now` in its slot.
    fn file(&mut self, entry: Entry) {
        let level = level_for(self.now, entry.tick);
        let slot = slot_at(level, entry.tick);
        self.levels[level].slots[slot].push(entry);
        self.levels[level].occupied |= 1 << slot;
    }

    /// Takes back the wake-up of `site` at `tick`, if it is there, keeping the others'
    /// order. O(entries in its slot): rare, as a site's wake-up only ever moves earlier when
    /// a search is added or a site resumed.
    pub(crate) fn remove(&mut self, tick: u64, site: u32) {
        let entry = Entry { tick, site };
        if tick <= self.now {
            if let Some(at) = self.due[self.taken..].iter().position(|e| *e == entry) {
                self.due.remove(self.taken + at);
            }
            return;
        }
        let level = level_for(self.now, tick);
        let slot = slot_at(level, tick);
        let entries = &mut self.levels[level].slots[slot];
        if let Some(at) = entries.iter().position(|e| *e == entry) {
            entries.remove(at);
            if entries.is_empty() {
                self.levels[level].occupied &= !(1 << slot);
            }
        }
    }

    /// The next site whose wake-up tick is at or before `now`, or `None`.
    pub(crate) fn poll(&mut self, now: u64) -> Option<u32> {
        loop {
            if let Some(&first) = self.due.get(self.taken) {
                if first.tick > now {
                    return None; // `now` went back before the wheel's own tick
                }
                self.taken += 1;
                return Some(first.site);
            }
            match self.next_slot() {
                Some((level, slot, start)) if start <= now => self.cascade(level, slot, start),
                _ => {
                    // Nothing more by `now`: the wheel may move on to it (no slot is skipped).
                    self.now = self.now.max(now);
                    return None;
                }
            }
        }
    }

    /// The tick of the earliest wake-up, or `None` if there is none.
    pub(crate) fn next_expiration(&self) -> Option<u64> {
        if let Some(first) = self.due.get(self.taken) {
            return Some(first.tick);
        }
        let (level, slot, start) = self.next_slot()?;
        match level {
            0 => Some(start),
            // A slot above level 0 spans many ticks: its earliest entry, not its start, so
            // that the driver does not wake before anything is due.
            _ => self.levels[level].slots[slot].iter().map(|e| e.tick).min(),
        }
    }

    /// The earliest occupied slot (its level, its index and the first tick it spans). Every
    /// entry at a level is later than every entry at the levels below it, and, as the wheel
    /// never wraps, its slot is above the current tick's, so this is the lowest occupied slot
    /// of the lowest occupied level.
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        let (level, found) = self
            .levels
            .iter()
            .enumerate()
            .find(|(_, l)| l.occupied != 0)?;
        let slot = found.occupied.trailing_zeros() as usize;
        let shift = DIGIT_BITS * level as u32;
        // The current tick's digits above this level, then this slot's digit.
        let above = self.now.checked_shr(shift + DIGIT_BITS).unwrap_or(0);
        let start = (above << DIGIT_BITS | slot as u64) << shift;
        debug_assert!(start > self.now);
        Some((level, slot, start))
    }

    /// The wheel reaches the first tick of `level`'s `slot`: its entries move, in order, to
    /// `due` (all of them, at level 0) or down to the slots of their own ticks.
    fn cascade(&mut self, level: usize, slot: usize, start: u64) {
        debug_assert!(self.taken == self.due.len() && start > self.now);
        self.now = start;
        self.due.clear();
        self.taken = 0;
        self.levels[level].occupied &= !(1 << slot);
        if level == 0 {
            // A level-0 slot holds one tick: it becomes the due list, and takes the old one's
            // (empty) vector.
            std::mem::swap(&mut self.due, &mut self.levels[0].slots[slot]);
            return;
        }
        let spare = std::mem::take(&mut self.spare);
        let mut entries = std::mem::replace(&mut self.levels[level].slots[slot], spare);
        for entry in entries.drain(..) {
            match entry.tick <= self.now {
                true => self.due.push(entry),
                false => self.file(entry),
            }
        }
        self.spare = entries;
    }

    /// Every pending entry as `(tick, site)`, in no particular order (for tests).
    #[cfg(test)]
    fn pending(&self) -> Vec<(u64, u32)> {
        let wheel = self.levels.iter().flat_map(|l| l.slots.iter().flatten());
        let due = self.due[self.taken..].iter();
        due.chain(wheel).map(|e| (e.tick, e.site)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// A tick in the 2020s, as the scheduler's are (ms since the epoch / 8).
    const T0: u64 = 1_700_000_000_000 / 8;

    fn drain(wheel: &mut Wheel, now: u64) -> Vec<u32> {
        std::iter::from_fn(|| wheel.poll(now)).collect()
    }

    #[test]
    fn levels_follow_the_highest_differing_digit() {
        assert_eq!(level_for(0, 1), 0);
        assert_eq!(level_for(0, 63), 0);
        assert_eq!(level_for(0, 64), 1);
        assert_eq!(level_for(63, 64), 1, "a digit boundary is crossed");
        assert_eq!(level_for(64, 127), 0);
        assert_eq!(level_for(0, 4095), 1);
        assert_eq!(level_for(0, 4096), 2);
        assert_eq!(level_for(0, u64::MAX), 10);
    }

    #[test]
    fn entries_come_out_by_tick_then_as_inserted_across_every_level() {
        let mut wheel = Wheel::new();
        wheel.poll(T0);
        let ahead = [5, 0, 3, 64, 63, 4_096, 300_000, 1 << 40, 5, 1];
        for (site, &a) in ahead.iter().enumerate().rev() {
            wheel.insert(T0 + a, site as u32);
        }
        // Tick T0 was reached already: due at once. Nothing else before its tick.
        assert_eq!(wheel.next_expiration(), Some(T0));
        assert_eq!(drain(&mut wheel, T0), [1]);
        assert_eq!(wheel.next_expiration(), Some(T0 + 1));
        assert_eq!(drain(&mut wheel, T0 + 4), [9, 2]);
        assert_eq!(wheel.next_expiration(), Some(T0 + 5));
        assert_eq!(drain(&mut wheel, T0 + 5), [8, 0], "one tick: as inserted");
        assert_eq!(drain(&mut wheel, T0 + 100_000), [4, 3, 5]);
        // The next one is two levels up: the earliest entry, not its slot's start.
        assert_eq!(wheel.next_expiration(), Some(T0 + 300_000));
        assert_eq!(drain(&mut wheel, T0 + 299_999), [] as [u32; 0]);
        assert_eq!(drain(&mut wheel, u64::MAX), [6, 7]);
        assert_eq!(wheel.next_expiration(), None);
    }

    #[test]
    fn a_tick_already_reached_comes_out_at_the_next_poll_in_order() {
        let mut wheel = Wheel::new();
        wheel.insert(T0 + 10, 4);
        wheel.insert(T0 + 10, 2);
        wheel.insert(T0 + 11, 5);
        assert_eq!(wheel.poll(T0 + 11), Some(4));
        // Site 2 is still due at T0 + 10 and site 5 at T0 + 11; the wheel has reached T0 + 11,
        // so sites 3 and 9 are due at ticks already passed: each after its tick's others.
        wheel.insert(T0 + 10, 3);
        wheel.insert(T0 + 7, 9);
        assert_eq!(wheel.next_expiration(), Some(T0 + 7));
        assert_eq!(drain(&mut wheel, T0 + 11), [9, 2, 3, 5]);
        // A clock that goes back gets nothing that is due after it.
        wheel.insert(T0 + 9, 1);
        assert_eq!(wheel.poll(T0), None);
        assert_eq!(wheel.poll(T0 + 9), Some(1));
    }

    #[test]
    fn removed_entries_do_not_come_out_and_slots_can_be_reused() {
        let mut wheel = Wheel::new();
        wheel.poll(T0);
        for site in 0..5 {
            wheel.insert(T0 + 70, site);
        }
        wheel.insert(T0, 7);
        wheel.remove(T0 + 70, 2);
        wheel.remove(T0 + 70, 2); // twice: harmless
        wheel.remove(T0 + 71, 3); // not there: harmless
        wheel.remove(T0, 7);
        assert_eq!(drain(&mut wheel, T0 + 70), [0, 1, 3, 4]);
        wheel.insert(T0 + 200, 2);
        wheel.remove(T0 + 200, 2);
        assert_eq!(wheel.next_expiration(), None);
        assert!(wheel.pending().is_empty());
        wheel.insert(T0 + 200, 2);
        assert_eq!(drain(&mut wheel, T0 + 1_000), [2]);
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Set site `n`'s wake-up this many ticks from the wheel's last poll (may be behind).
        Wake(u32, i64),
        /// Take site `n`'s wake-up back.
        Remove(u32),
        /// Poll this many ticks on (negative: a clock that went back), taking up to `take`.
        Poll(i64, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let ahead = prop_oneof![-70i64..70, 0i64..5_000, 0i64..1_000_000, 0i64..1 << 42];
        prop_oneof![
            5 => (0u32..30, ahead.clone()).prop_map(|(n, a)| Op::Wake(n, a)),
            1 => (0u32..30).prop_map(Op::Remove),
            4 => (prop_oneof![-5i64..5, ahead], 0usize..40).prop_map(|(a, k)| Op::Poll(a, k)),
        ]
    }

    proptest! {
        /// Used as the scheduler uses it (one wake-up per site, removed before it is moved),
        /// against an ordered set of (tick, insertion number, site): every poll gives the
        /// first entry if it is due, and `next_expiration` is exactly the earliest tick.
        #[test]
        fn the_wheel_agrees_with_an_ordered_set(ops in prop::collection::vec(op(), 1..300)) {
            let mut wheel = Wheel::new();
            let mut model = BTreeSet::new();
            let mut wake: [Option<(u64, usize)>; 30] = [None; 30];
            let mut now = T0;
            for (inserted, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Wake(n, ahead) => {
                        if let Some((old, k)) = wake[n as usize].take() {
                            wheel.remove(old, n);
                            model.remove(&(old, k, n));
                        }
                        let tick = now.saturating_add_signed(ahead);
                        wheel.insert(tick, n);
                        model.insert((tick, inserted, n));
                        wake[n as usize] = Some((tick, inserted));
                    }
                    Op::Remove(n) => {
                        if let Some((old, k)) = wake[n as usize].take() {
                            wheel.remove(old, n);
                            model.remove(&(old, k, n));
                        }
                    }
                    Op::Poll(ahead, take) => {
                        now = now.saturating_add_signed(ahead);
                        for _ in 0..take {
                            let want = model.first().copied().filter(|&(t, _, _)| t <= now);
                            prop_assert_eq!(wheel.poll(now), want.map(|(_, _, n)| n));
                            let Some(first) = want else { break };
                            model.remove(&first);
                            wake[first.2 as usize] = None;
                        }
                    }
                }
                prop_assert_eq!(wheel.next_expiration(), model.first().map(|&(t, _, _)| t));
                let mut pending = wheel.pending();
                pending.sort_unstable();
                let mut want: Vec<_> = model.iter().map(|&(t, _, n)| (t, n)).collect();
                want.sort_unstable();
                prop_assert_eq!(pending, want);
            }
        }
    }
}
