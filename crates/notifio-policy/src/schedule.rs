//! The scheduler: which search to check next, and when (DESIGN §5), as a pure state machine.
//!
//! quinn-proto's shape: the driver calls [`Scheduler::poll_due`] until it returns `None` (or
//! [`Scheduler::poll_due_into`] once, the same checks in one batch), sleeps until
//! [`Scheduler::poll_timeout`], and reports each check's result with
//! [`Scheduler::handle_outcome`]. One timer drives everything; spurious wake-ups are harmless.
//!
//! What it owns, and why here: per-search due times (interval ±10% jitter, so searches sharing
//! a cycle drift apart); site spacing and one request in flight per site (a site never sees a
//! burst from us); the global concurrency cap; the registry gate with the single probe (when a
//! wait expires one search goes back in, not five); single-flight (two searches with the same
//! URL are one fetch); and parking searches of waiting or session-expired sites.
//!
//! Internally the site is the unit of timing: only sites are in the timer wheel (`timers.rs`),
//! one wake-up each, at the later of its next allowed start (spacing) and its earliest due
//! search, rounded up to an 8 ms [`TICK`] so that sites due close together share a wake-up; a
//! registry wait is found when it wakes. Each site owns its searches' due times as
//! keys `(due << 16) | slot` in its own 128-byte record (up to ten inline, more on the heap),
//! so the next search is the smallest key (ties to the one added first) and a check reads one
//! record: no per-search record, no per-site queue. While a check is out the site has no
//! wake-up; its outcome sets that search's next due time and re-arms the site. A [`Check`] is
//! a small `Copy` value whose id encodes site, slot and a sequence number, so the common path
//! hashes nothing and allocates nothing; URLs, search ids and site keys are cold, in parallel
//! arrays. `poll_due_into` dispatches a site as it comes out of the wheel, with no queue in
//! between, and prefetches the records of the first four sites due at the next tick so their
//! cache misses overlap (docs/benchmarks/scheduler.md has the figures).

use crate::backoff::RefusalKind;
use crate::classify::Outcome;
use crate::registry::{Admission, Entry, Registry};
use crate::site::SiteKey;
use crate::time::Timestamp;
use crate::timers::{Node, Timers};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// A configured search's identity (its index in the config, or its database id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SearchId(pub u32);

/// One check handed to the driver. Opaque: the scheduler encodes which search it is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CheckId(pub u64);

/// A search as the scheduler needs it.
#[derive(Clone, Debug)]
pub struct SearchSpec {
    /// Identity.
    pub id: SearchId,
    /// The page to fetch.
    pub url: String,
    /// Its site key.
    pub site: SiteKey,
    /// Time between checks (before jitter).
    pub interval: Duration,
    /// When the first check is due; `None` = at once.
    pub first_due: Option<Timestamp>,
}

/// Scheduler settings.
///
/// # Default
/// spacing 2s, concurrency 4, interval jitter 0.1 (±10%).
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Minimum time between the starts of two checks of one site.
    pub spacing: Duration,
    /// Per-site spacing overrides.
    pub site_spacing: HashMap<SiteKey, Duration>,
    /// At most this many checks in flight overall.
    pub concurrency: usize,
    /// Interval jitter fraction.
    pub interval_jitter: f64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            spacing: Duration::from_secs(2),
            site_spacing: HashMap::new(),
            concurrency: 4,
            interval_jitter: 0.1,
        }
    }
}

/// A site as this scheduler numbers it: 0, 1, 2, … in the order [`Scheduler::add_search`]
/// first saw each site key. [`Scheduler::site_key`] gives the key back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteIndex(pub u32);

/// A fetch to perform now.
///
/// A small `Copy` value: it names the check, its site and its target but shares nothing, so
/// issuing one touches no reference count. The driver looks up what it needs once per check:
/// [`Scheduler::check_url`], [`Scheduler::check_searches`] and [`Scheduler::site_key`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Check {
    /// Report the result under this id.
    pub id: CheckId,
    /// The site.
    pub site: SiteIndex,
    /// Whether this is the single probe after a wait (use the `probe` request class).
    pub probe: bool,
}

/// What changed on a site because of an outcome (for logs, the demo narrative and alerts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reaction {
    /// The site refused; all its searches wait.
    SiteWaiting {
        /// The site.
        site: SiteKey,
        /// Its registry entry after recording.
        entry: Entry,
        /// How many searches are parked on it.
        searches: usize,
    },
    /// The site answered properly after having been waiting.
    SiteCleared {
        /// The site.
        site: SiteKey,
        /// The entry that was cleared.
        was: Entry,
    },
    /// The session on the site expired; it is paused until [`Scheduler::resume_site`].
    SessionExpired {
        /// The site.
        site: SiteKey,
    },
    /// The search's page is gone (404/410); it is paused.
    SearchGone {
        /// The searches.
        searches: Vec<SearchId>,
    },
}

/// How the scheduler sees one search (for status views).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchState {
    /// Healthy or never checked.
    Ok,
    /// Its site is waiting.
    Waiting,
    /// It is the probe out on its waiting site.
    Probing,
    /// Its site's session expired.
    SessionExpired,
    /// The page is gone.
    SearchGone,
}

/// How the scheduler sees one site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiteState {
    /// No entry.
    Clear,
    /// Waiting until its `next_retry_at`.
    Waiting,
    /// A probe is out.
    Probing,
    /// Paused until fresh cookies.
    SessionExpired,
}

/// "No time": no wake-up pending.
const NEVER: u64 = u64::MAX;
/// No slot in flight.
const NIL: u16 = u16::MAX;
/// Bits of a slot's index in its key and in a [`CheckId`]: at most 65,535 URLs per site (the
/// last index is `NIL`).
const SLOT_BITS: u32 = 16;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
/// The most distinct search URLs one site can have (the config rejects more).
pub const MAX_URLS_PER_SITE: usize = SLOT_MASK as usize;
/// The latest due time a key can hold (ms since the epoch: 2^46, in the year 4199): later
/// ones saturate to it. So every key is below [`GONE`] (see [`min_of`]).
const DUE_MAX: u64 = 1 << 46;
/// The key of a target whose page is gone, and of an unused slot: above every real key. The
/// bits of +∞ as an `f64` (see [`min_of`]).
const GONE: u64 = 0x7FF0_0000_0000_0000;
const _: () = assert!((DUE_MAX << SLOT_BITS | SLOT_MASK) < GONE);

/// Asks the CPU to start loading `x`'s cache line: a hint with no effect on behaviour. A load
/// whose value is thrown away would do the same, but it holds up the instructions after it
/// until it lands; a prefetch does not. (Public for the scheduler's benchmark, which reads
/// ahead in its own books the same way.)
#[doc(hidden)]
#[inline(always)]
pub fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has; it reads nothing that the
    // program can see and cannot fault, and `x` is a valid reference in any case.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            std::ptr::from_ref(x).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// Every wake-up falls on a tick: a multiple of this many milliseconds (of the Unix epoch), the
/// first at or after the moment the site may start. Timer coalescing, as kernels do it (Linux's
/// timer slack, Windows' tolerable delay): the sites that come due within one tick share one
/// wake-up, one drain of the wheel and one [`Scheduler::poll_timeout`], where at 1 ms each had
/// its own. A check may so start up to 7 ms after it could have, never before (a spacing, a
/// due time or a registry wait only ever moves later), and an 8 ms delay is nothing beside a
/// 2 s spacing or a 30 s interval. What it buys: a simulated day of 100,000 searches takes up to
/// ~20% less time (docs/benchmarks/scheduler.md, tenth round): ~30 fewer instructions per
/// check at that density, and one mispredicted loop exit per tick instead of per ms. For the
/// real driver it means fewer timer wake-ups. A power of two, so rounding is a mask.
pub const TICK: Duration = Duration::from_millis(TICK_MS);
const TICK_MS: u64 = 8;
const _: () = assert!(TICK_MS.is_power_of_two());

/// `at` rounded up to a tick (see [`TICK`]); saturates below `u64::MAX`.
#[inline(always)]
fn tick_up(at: u64) -> u64 {
    at.saturating_add(TICK_MS - 1) & !(TICK_MS - 1)
}

/// [`tick_up`] of a time at most an interval past a clamped `now` (see [`NOW_MAX`]), which
/// cannot overflow: the answer's re-arm, on the path of every check.
#[inline(always)]
fn tick_up_soon(at: u64) -> u64 {
    debug_assert!(at <= DUE_MAX);
    (at + (TICK_MS - 1)) & !(TICK_MS - 1)
}

/// The latest `now` the scheduler takes (ms since the epoch: 2^45, in the year 3084): a later
/// one counts as this, so that nothing runs past it (every time it computes is later). In
/// exchange, `now` plus an interval or a spacing (each below 2^32 ms) stays below
/// [`DUE_MAX`], and the path every check takes adds without saturating (−7 instructions).
const NOW_MAX: u64 = 1 << 45;
const _: () = assert!(NOW_MAX + 2 * (1 << 32) <= DUE_MAX);

/// `now`, at most [`NOW_MAX`].
#[inline(always)]
fn clamp_now(now: Timestamp) -> Timestamp {
    Timestamp(now.0.min(NOW_MAX))
}

/// How far ahead `poll_due_into` prefetches the records of the sites coming due: the next
/// tick, so the loads land while this tick's checks are handed out, and are not evicted again
/// before they are needed. (At 1 ms wake-ups it was 2 ms; aimed at a slot between ticks it
/// would find nothing.)
const PREFETCH_AHEAD_MS: u64 = TICK_MS;
/// How many of the sites due then it prefetches: finding them walks their list one dependent
/// load at a time (in L2). A tick of a day of 10,000 sites holds ~26; the tenth round measured
/// eight no better than four (median 0.89 vs 0.77 s for a 2 h day). The seventh round, at
/// 1 ms, measured four better than two: the first touch of a record fell from 12-14% of the
/// samples to 7%.
const PREFETCH_SITES: usize = 4;

/// The later of `a` and `b`, without a branch (x86-64: a conditional move). For a choice that
/// is a coin toss, where a branch would be mispredicted half the time. LLVM turns `max`, and
/// even `std::hint::select_unpredictable`, back into a branch inside a hot loop (its
/// cmov-conversion pass), hence the two instructions written out.
#[inline(always)]
fn later(a: u64, b: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let mut r = a;
        // SAFETY: two register-only instructions (compare, conditional move): no memory, no
        // stack, no effect beyond `r` and the flags.
        unsafe {
            std::arch::asm!(
                "cmp {r}, {b}",
                "cmovb {r}, {b}",
                r = inout(reg) r,
                b = in(reg) b,
                options(pure, nomem, nostack),
            );
        }
        r
    }
    #[cfg(not(target_arch = "x86_64"))]
    a.max(b)
}

/// A slot's key: its due time, then its index, so the smallest key is the target to check next,
/// ties going to the one added first, exactly as a min-heap of (due, index) would pop them.
fn key(due: u64, slot: usize) -> u64 {
    (due.min(DUE_MAX) << SLOT_BITS) | slot as u64
}

/// [`key`] of a due time an interval past a clamped `now`, which needs no clamping.
#[inline(always)]
fn key_soon(due: u64, slot: usize) -> u64 {
    debug_assert!(due <= DUE_MAX);
    (due << SLOT_BITS) | slot as u64
}

fn key_due(key: u64) -> u64 {
    key >> SLOT_BITS
}

/// How many targets' keys a site keeps inside its record; more spill to the heap.
const INLINE: usize = 10;

/// A site's inline keys, aligned so that two keys are one 16-byte SSE2 load.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(16))]
struct Keys([u64; INLINE]);

/// The smallest of a record's keys (the unused ones are `GONE`), on every check's path.
///
/// On x86-64, two keys at a time as `f64`s with SSE2's `minpd` (which every x86-64 CPU has):
/// 13 instructions where compares and conditional moves on integers took 28. Exact, because a
/// key is never negative and never above `GONE`, the bits of +∞: for such bit patterns the
/// order of the doubles is the order of the integers (IEEE 754 put the exponent above the
/// mantissa for this), NaN cannot occur, and `minpd` compares without rounding. Keys of times
/// before 1972 (2^36 ms, only in tests) are subnormal doubles, which compare exactly too
/// unless "denormals are zero" is switched on, which nothing in this process does.
#[inline(always)]
fn min_of(keys: &Keys) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            _mm_cvtsd_f64, _mm_min_pd, _mm_min_sd, _mm_set_pd, _mm_unpackhi_pd,
        };
        // SAFETY: SSE2 instructions on values in registers (the loads are the array's); every
        // x86-64 CPU has SSE2.
        unsafe {
            let k = |i: usize| _mm_set_pd(f64::from_bits(keys.0[i + 1]), f64::from_bits(keys.0[i]));
            let m = _mm_min_pd(_mm_min_pd(k(0), k(2)), _mm_min_pd(k(4), k(6)));
            let m = _mm_min_pd(m, k(8));
            _mm_cvtsd_f64(_mm_min_sd(m, _mm_unpackhi_pd(m, m))).to_bits()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let [a, b, c, d, e, f, g, h, i, j] = keys.0;
        let (ab, cd, ef, gh, ij) = (a.min(b), c.min(d), e.min(f), g.min(h), i.min(j));
        ab.min(cd).min(ef.min(gh)).min(ij)
    }
}

/// The smallest of the keys of a site with more than [`INLINE`] targets: its record's and the
/// rest (cold).
fn min_with(keys: &Keys, more: &[u64]) -> u64 {
    more.iter().fold(min_of(keys), |m, &k| m.min(k))
}

/// A site, the unit of timing: it owns its targets' due times and is the only thing in the
/// timer wheel. 128 bytes, everything a check reads; its key, its targets' indices and their
/// intervals are cold, in `Scheduler::site_keys` / `site_targets` / `site_intervals`, and so
/// are the keys of its targets past the first [`INLINE`] (`Scheduler::more_keys`).
#[derive(Debug)]
#[repr(C, align(128))] // `C`: `next_key` in the first cache line, `spacing_ms` in the second
struct SiteSlot {
    /// No start before this (last start + spacing; 0 before the first start).
    next_start: u64,
    /// The pending wake-up (`NEVER` if none): its node is in the timer wheel at this time, or
    /// a far-heap entry for it exists.
    wake_at: u64,
    /// The smallest of its keys (`GONE` if none), kept while nothing is in flight; while a
    /// check is, the key that check went out with (see `keys`).
    next_key: u64,
    /// The id of the check in flight ([`CheckId`]: the site's index in the low 32 bits, the
    /// slot in the next 16, a sequence number in the top 16), or, while none is, the last one
    /// with `u32::MAX` for the site ([`IDLE`]), so that no id matches (an id that reaches this
    /// record carries its index, which is below 2^31) and the next check's sequence number
    /// follows on. So an outcome is matched to the check in flight with one compare.
    flight: u64,
    /// The keys of its first [`INLINE`] targets (`key(next due, slot)`, or `GONE`; unused
    /// ones `GONE`), by slot, so that a check reads one 128-byte record and nothing else. A
    /// site with more targets is marked [`MANY`]. While a slot is in flight its key here is
    /// `GONE`, so that the answer finds the smallest of the others without waiting on its own
    /// store (see `handle_outcome`), and `next_key` holds the key it went out with; the general
    /// path puts that back (a refusal so keeps it in front of its siblings). At offset 32, so
    /// 16-byte aligned like [`Keys`].
    keys: Keys,
    /// If every target has the same interval (the usual case), the earliest a checked target
    /// is due again, in ms after the check (the interval less its jitter: see [`spread`])...
    due_after_ms: u32,
    /// ...and the width of the window its next due time is drawn from; or `MIXED`: each
    /// slot's interval is in `Scheduler::site_intervals`, and the answer computes its spread.
    due_span_ms: u32,
    /// Spacing in ms (saturates at ~49 days).
    spacing_ms: u32,
    /// The check in flight is the single probe after a wait.
    probe: bool,
    /// What holds the site back beside spacing and due times, [`PAUSED`] and [`GATED`], and
    /// what sends it down the general path, [`RELEASED`] and [`MANY`], in one byte so that the
    /// common paths test them all at once.
    hold: u8,
    in_ready: bool,
}

/// `SiteSlot::hold`: paused until fresh cookies (session expired).
const PAUSED: u8 = 1;
/// `SiteSlot::hold`: the registry may have an entry (or a probe) for this site. Without it
/// the registry is not consulted at all: it is only ever changed through this scheduler.
const GATED: u8 = 2;
/// `SiteSlot::hold`: the check in flight is slow and no longer counts against the concurrency
/// cap ([`Scheduler::release_slot`]). Set only while a check is out, so a wake-up never sees
/// it; its outcome takes the slow path, which knows not to count it out again.
const RELEASED: u8 = 4;
/// `SiteSlot::hold`: more than [`INLINE`] targets, the rest of whose keys are in
/// `Scheduler::more_keys`. Does not hold a start back; an outcome takes the general path.
const MANY: u8 = 8;
/// `SiteSlot::hold`: what keeps a site that wakes from starting at once.
const HOLDS_START: u8 = PAUSED | GATED;
/// `SiteSlot::flight`'s low half while nothing is in flight: no site's index.
const IDLE: u64 = u32::MAX as u64;

impl SiteSlot {
    /// The slot in flight, or `NIL`.
    fn slot_in_flight(&self) -> u16 {
        match self.idle() {
            true => NIL,
            false => (self.flight >> 32) as u16,
        }
    }

    /// Whether no check is in flight.
    fn idle(&self) -> bool {
        self.flight & IDLE == IDLE
    }

    /// Whether `id` is the check in flight. An idle site matches no id (see `flight`), not
    /// even one that copies its last check's (not one this scheduler issued), which would
    /// otherwise end a check that is not out and underflow the in-flight count.
    #[inline(always)]
    fn out_as(&self, id: CheckId) -> bool {
        self.flight == id.0
    }

    /// The check in flight has ended (its sequence number stays).
    fn land(&mut self) {
        self.flight |= IDLE;
    }

    fn paused(&self) -> bool {
        self.hold & PAUSED != 0
    }

    fn gated(&self) -> bool {
        self.hold & GATED != 0
    }

    fn set(&mut self, flag: u8, on: bool) {
        self.hold = if on {
            self.hold | flag
        } else {
            self.hold & !flag
        };
    }

    /// Whether this site may start its next check at `now` without asking the registry or
    /// waiting: idle, not paused, nothing recorded against it, a target due, spacing kept.
    #[inline]
    fn may_start(&self, now: u64) -> bool {
        self.idle()
            && self.hold & HOLDS_START == 0
            && self.next_key != GONE
            && self.next_start.max(key_due(self.next_key)) <= now
    }
}

/// `SiteSlot::due_span_ms` when its targets' intervals differ (or the span is that wide).
const MIXED: u32 = u32::MAX;

const _: () = assert!(size_of::<SiteSlot>() == 128);

/// The interval jitter as a fraction of 2^32 (`jitter` clamped to `[0, 1]`), so that drawing
/// a due time needs no floating point.
fn jitter_fixed(jitter: f64) -> u64 {
    // `as` saturates, and NaN becomes 0: no jitter.
    (jitter.clamp(0.0, 1.0) * 4_294_967_296.0) as u64
}

/// An interval's jitter window: its start (`interval_ms` less half the window) and its width
/// (2 × interval × jitter, below 2^33: interval < 2^32, jitter ≤ 2^32), in ms, with `jitter` as
/// [`jitter_fixed`] gives it. A site whose targets share an interval keeps both in its record,
/// so the answer does not recompute them.
fn spread(interval_ms: u32, jitter: u64) -> (u64, u64) {
    let interval = u64::from(interval_ms);
    let span = (interval * jitter) >> 31;
    (interval - span / 2, span)
}

/// `now` + a time drawn uniformly from the window `after .. after + span` (ms; see
/// [`spread`]), that is `now` + the interval × a factor drawn from `[1 - jitter, 1 + jitter)`:
/// when a search that was just checked is due again. One draw from `rng` per call. Integer
/// only: a few instructions where the `f64` form took ~35, on the path every check takes.
#[inline(always)]
fn due_again(rng: &mut Draws, (after, span): (u64, u64), now: Timestamp) -> u64 {
    let offset = ((u128::from(rng.next_u64()) * u128::from(span)) >> 64) as u64;
    // No overflow: `now` is clamped ([`NOW_MAX`]) and the rest is below 2^33.
    now.0 + (after + offset)
}

/// The scheduler's random draws: wyrand (Wang Yi's generator: a Weyl sequence through one
/// 64 × 64 → 128-bit multiply). One `u64` of state and a few instructions per draw, where
/// `rand`'s `SmallRng` (xoshiro256++) loads and stores four words: 9 fewer instructions per
/// check (callgrind, seventh round). Statistically sound for jitter (it passes BigCrush and
/// PractRand); not for anything secret. Hand-written: `rand` does not offer it, and it is
/// three lines (so the policy crate no longer depends on `rand`).
#[derive(Clone, Debug)]
struct Draws(u64);

impl Draws {
    /// Seeded through splitmix64, so that nearby seeds (1, 2, 3 in tests) start far apart.
    fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Self(z ^ (z >> 31))
    }

    #[inline(always)]
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) as u64) ^ (t as u64)
    }

    /// Uniform in `[0, 1)` (53 bits).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// `(site, slot)` of a check id. A check's id (see `SiteSlot::flight`) holds the site (low 32
/// bits), the slot (next 16) and the site's sequence number (top 16), so an outcome finds its
/// site without a map and a stale id does not match.
fn split_id(id: CheckId) -> (usize, usize) {
    (
        (id.0 & 0xFFFF_FFFF) as usize,
        ((id.0 >> 32) & SLOT_MASK) as usize,
    )
}

/// The pure scheduler. See the module docs.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    registry: Registry,
    /// Per target: its URL and the searches it answers (cold: read by the driver only).
    urls: Vec<Arc<str>>,
    searches: Vec<Arc<[SearchId]>>,
    /// Per target: its site and its slot there.
    homes: Vec<(u32, u32)>,
    /// Per site, by slot: its target (cold: for the driver's look-ups and counts).
    site_targets: Vec<Vec<u32>>,
    /// Per site, by slot: its interval in ms (read only for sites whose intervals differ).
    site_intervals: Vec<Vec<u32>>,
    /// Per site: the keys of its targets past the first [`INLINE`], by slot − `INLINE` (empty
    /// unless the site is [`MANY`]).
    more_keys: Vec<Vec<u64>>,
    by_url: HashMap<String, usize>,
    by_search: HashMap<SearchId, usize>,
    sites: Vec<SiteSlot>,
    /// Per site: its key (cold).
    site_keys: Vec<SiteKey>,
    site_index: HashMap<SiteKey, usize>,
    events: Timers,
    /// Sites whose wake-up came and that may have something to send, in the order they came:
    /// `ready[ready_head..]` (a vector and a cursor: cheaper than a ring, and emptied often).
    ready: Vec<u32>,
    ready_head: usize,
    in_flight: usize,
    /// `config.interval_jitter` as [`jitter_fixed`] gives it.
    jitter: u64,
    rng: Draws,
}

/// Milliseconds as a `u32`, saturating (~49 days: longer intervals or spacings are not
/// meaningful for a watcher).
fn millis32(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

impl Scheduler {
    /// A scheduler with no searches. `registry` carries restored entries; `seed` drives the
    /// interval jitter and the backoff jitter (the shell seeds it from the OS).
    #[must_use]
    pub fn new(config: SchedulerConfig, registry: Registry, seed: u64) -> Self {
        let jitter = jitter_fixed(config.interval_jitter);
        Self {
            config,
            registry,
            urls: Vec::new(),
            searches: Vec::new(),
            homes: Vec::new(),
            site_targets: Vec::new(),
            site_intervals: Vec::new(),
            more_keys: Vec::new(),
            by_url: HashMap::new(),
            by_search: HashMap::new(),
            sites: Vec::new(),
            site_keys: Vec::new(),
            site_index: HashMap::new(),
            events: Timers::new(),
            ready: Vec::new(),
            ready_head: 0,
            in_flight: 0,
            jitter,
            rng: Draws::new(seed),
        }
    }

    /// Adds a search. A search whose URL is already scheduled joins that fetch (single-flight);
    /// the shorter interval wins.
    ///
    /// # Panics
    /// With more than 65,535 distinct URLs on one site.
    pub fn add_search(&mut self, spec: SearchSpec, now: Timestamp) {
        let due = spec.first_due.unwrap_or(now);
        if let Some(&t) = self.by_url.get(&spec.url) {
            let searches = &mut self.searches[t];
            *searches = searches.iter().copied().chain([spec.id]).collect();
            self.by_search.insert(spec.id, t);
            let (s, slot) = self.homes[t];
            let (s, slot) = (s as usize, slot as usize);
            let interval = &mut self.site_intervals[s][slot];
            *interval = (*interval).min(millis32(spec.interval));
            self.set_common_interval(s);
            if self.key(s, slot) == GONE {
                // A search added again for a page that was gone gets a fresh chance.
                *self.key_mut(s, slot) = key(due.0, slot);
                self.came_due(s, key(due.0, slot));
            }
            return;
        }
        let s = self.site_slot(&spec.site);
        let t = self.urls.len();
        assert!(t < (1 << 31), "more than 2^31 search URLs");
        let slot = self.site_targets[s].len();
        assert!(
            slot < MAX_URLS_PER_SITE,
            "more than 65,535 search URLs on one site"
        );
        match slot.checked_sub(INLINE) {
            None => self.sites[s].keys.0[slot] = key(due.0, slot),
            Some(_) => {
                self.more_keys[s].push(key(due.0, slot));
                self.sites[s].set(MANY, true);
            }
        }
        self.site_targets[s].push(t as u32);
        self.site_intervals[s].push(millis32(spec.interval));
        self.set_common_interval(s);
        self.urls.push(spec.url.as_str().into());
        self.searches.push(Arc::new([spec.id]));
        self.homes.push((s as u32, slot as u32));
        self.by_url.insert(spec.url, t);
        self.by_search.insert(spec.id, t);
        self.came_due(s, key(due.0, slot));
    }

    /// Keeps the jitter window of site `s`'s shared interval in its record, or marks it
    /// `MIXED`.
    fn set_common_interval(&mut self, s: usize) {
        let intervals = &self.site_intervals[s];
        let first = intervals.first().copied().unwrap_or(0);
        let (after, span) = spread(first, self.jitter);
        let site = &mut self.sites[s];
        match (intervals.iter().all(|&i| i == first), u32::try_from(span)) {
            (true, Ok(span)) if span != MIXED => {
                // `after` is at most the interval, a `u32`.
                site.due_after_ms = u32::try_from(after).unwrap_or(u32::MAX);
                site.due_span_ms = span;
            }
            _ => site.due_span_ms = MIXED,
        }
    }

    /// Slot `slot`'s key on site `s` (in its record, or past it for a [`MANY`] site; while it
    /// is in flight, the key it went out with).
    fn key(&self, s: usize, slot: usize) -> u64 {
        let site = &self.sites[s];
        if usize::from(site.slot_in_flight()) == slot {
            return site.next_key;
        }
        match slot.checked_sub(INLINE) {
            None => site.keys.0[slot],
            Some(i) => self.more_keys[s][i],
        }
    }

    fn key_mut(&mut self, s: usize, slot: usize) -> &mut u64 {
        match slot.checked_sub(INLINE) {
            None => &mut self.sites[s].keys.0[slot],
            Some(i) => &mut self.more_keys[s][i],
        }
    }

    /// A slot of idle site `s` got key `k`: the site's next check may come sooner.
    fn came_due(&mut self, s: usize, k: u64) {
        let site = &mut self.sites[s];
        if site.idle() && k < site.next_key {
            site.next_key = k;
            self.arm(s);
        }
    }

    fn site_slot(&mut self, key: &SiteKey) -> usize {
        if let Some(&i) = self.site_index.get(key) {
            return i;
        }
        let i = self.sites.len();
        assert!(i < (1 << 31), "more than 2^31 sites");
        let spacing = self
            .config
            .site_spacing
            .get(key)
            .copied()
            .unwrap_or(self.config.spacing);
        let gated = self.registry.entry(key).is_some();
        self.sites.push(SiteSlot {
            next_start: 0,
            wake_at: NEVER,
            next_key: GONE,
            keys: Keys([GONE; INLINE]),
            due_after_ms: 0,
            due_span_ms: 0,
            spacing_ms: millis32(spacing),
            flight: IDLE,
            probe: false,
            hold: if gated { GATED } else { 0 },
            in_ready: false,
        });
        self.site_keys.push(key.clone());
        self.site_targets.push(Vec::new());
        self.site_intervals.push(Vec::new());
        self.more_keys.push(Vec::new());
        self.site_index.insert(key.clone(), i);
        self.events.fit(self.sites.len());
        i
    }

    /// The registry (entries, probe state, `soonest()`).
    #[must_use]
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The target check `id` is for, if this scheduler issued it.
    fn target_of(&self, id: CheckId) -> Option<usize> {
        let (s, slot) = split_id(id);
        let &t = self.site_targets.get(s)?.get(slot)?;
        Some(t as usize)
    }

    /// The page check `id` fetches, for any id this scheduler issued (in flight or not);
    /// `None` for an id it never issued. Cloning the `Arc` does not copy the URL.
    #[must_use]
    pub fn check_url(&self, id: CheckId) -> Option<&Arc<str>> {
        self.urls.get(self.target_of(id)?)
    }

    /// Every search check `id` answers (more than one when searches share a URL), for any id
    /// this scheduler issued; `None` for an id it never issued. A search added later for the
    /// same URL joins this list.
    #[must_use]
    pub fn check_searches(&self, id: CheckId) -> Option<&Arc<[SearchId]>> {
        self.searches.get(self.target_of(id)?)
    }

    /// The key of a site this scheduler numbered (see [`SiteIndex`]).
    ///
    /// # Panics
    /// If `site` did not come from this scheduler (a [`Check`] or [`Self::site_index`]).
    #[must_use]
    pub fn site_key(&self, site: SiteIndex) -> &SiteKey {
        &self.site_keys[site.0 as usize]
    }

    /// The number of a site this scheduler knows, or `None`.
    #[must_use]
    pub fn site_index(&self, key: &SiteKey) -> Option<SiteIndex> {
        self.site_index.get(key).map(|&s| SiteIndex(s as u32))
    }

    /// Every check that may start at `now`, appended to `out`: the checks, in the order,
    /// that calling [`Self::poll_due`] until `None` would return, then sleep until
    /// [`Self::poll_timeout`]. The driver's form: a site the wheel hands over that may send at
    /// once is dispatched as it comes out, with no call, `Option` or ready queue per check.
    #[inline(always)] // the driver's loop: see docs/benchmarks/scheduler.md, seventh round
    pub fn poll_due_into(&mut self, now: Timestamp, out: &mut Vec<Check>) {
        let now = clamp_now(now);
        if self.ready_head == self.ready.len() {
            self.ready.clear();
            self.ready_head = 0;
            if !self.drain_wheel::<true>(now, out) {
                return; // nothing due
            }
            self.prefetch_ahead(tick_up(now.0 + PREFETCH_AHEAD_MS));
            if self.ready.is_empty() {
                return; // all dispatched on the way out of the wheel (or nothing due)
            }
        }
        while let Some(check) = self.poll_due(now) {
            out.push(check);
        }
    }

    /// Takes the sites whose wake-up has come out of the wheel. With `DISPATCH`, a site that
    /// may send at once is dispatched into `out` as it comes out; that keeps `poll_due`'s order
    /// as long as nothing has gone to the ready queue before (it hands out the queue in
    /// order). The others go to the ready queue. (A const parameter, not an `Option`: the
    /// check is on every site's path, and each caller gets its own loop.) `false`: nothing
    /// was due.
    #[inline(always)]
    fn drain_wheel<const DISPATCH: bool>(&mut self, now: Timestamp, out: &mut Vec<Check>) -> bool {
        // How many more sites may be dispatched as they come out: none once one has gone to
        // the ready queue (the queue goes first), none past the cap. One counter, kept in a
        // register, instead of three fields read for every site; `in_flight` is brought up to
        // date from `out`'s length at the end.
        let mut budget = match DISPATCH && self.ready.is_empty() {
            true => self.config.concurrency.saturating_sub(self.in_flight),
            false => 0,
        };
        let dispatched_before = out.len();
        let (sites, ready) = (&mut self.sites, &mut self.ready);
        // The usual tick (see `Timers::take_due_word`), walked here rather than through a
        // closure, which the compiler would call once per site.
        let any = if let Some((mut word, at0)) = self.events.take_due_word(now.0) {
            while word != 0 {
                let at = at0 + u64::from(word.trailing_zeros());
                word &= word - 1;
                let mut n = self.events.take_slot(at);
                while let Some(next) = self.events.take_next(n) {
                    Self::visit::<DISPATCH>(sites, ready, &mut budget, out, now, at, n, true);
                    n = next;
                }
            }
            true
        } else if !self.events.any_due(now.0) {
            false
        } else {
            self.events.drain_each(now.0, |at, node, due| {
                Self::visit::<DISPATCH>(sites, ready, &mut budget, out, now, at, node.index(), due)
            });
            true
        };
        self.in_flight += out.len() - dispatched_before;
        any
    }

    /// Site `s`'s wake-up at `at` came out of the wheel (`due`), or a far entry for it is
    /// moving into the wheel (not `due`): whether that entry still stands. A due site that may
    /// send is dispatched into `out` (with `DISPATCH`, while `budget` lasts), else it goes to
    /// the ready queue (and the budget to 0: the queue goes first from then on).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)] // the fields the drain borrows, split from `self`
    fn visit<const DISPATCH: bool>(
        sites: &mut [SiteSlot],
        ready: &mut Vec<u32>,
        budget: &mut usize,
        out: &mut Vec<Check>,
        now: Timestamp,
        at: u64,
        s: u32,
        due: bool,
    ) -> bool {
        let site = &mut sites[s as usize];
        if site.wake_at != at {
            return false; // stale: replaced by an earlier wake-up, or already taken
        }
        if due {
            site.wake_at = NEVER;
            // A live wake-up of a site that nothing holds back means it may start: a site has
            // no wake-up while its check is out, and it wakes at the later of its next start
            // and its earliest due time (neither of which grows while it waits), so the rest of
            // `may_start` holds already.
            debug_assert!(site.hold & HOLDS_START != 0 || site.may_start(now.0));
            if DISPATCH && *budget > 0 && site.hold & HOLDS_START == 0 {
                *budget -= 1;
                out.push(Self::start(site, s, now, false));
            } else if Self::mark_ready(site, ready, s) {
                *budget = 0;
            }
        }
        true
    }

    /// The next check to start at `now`, or `None` when nothing may start now. Call repeatedly
    /// until `None`, then sleep until [`Self::poll_timeout`].
    pub fn poll_due(&mut self, now: Timestamp) -> Option<Check> {
        let now = clamp_now(now);
        self.drain_wheel::<false>(now, &mut Vec::new());
        while self.in_flight < self.config.concurrency {
            let Some(&s) = self.ready.get(self.ready_head) else {
                self.ready.clear();
                self.ready_head = 0;
                return None;
            };
            self.ready_head += 1;
            if self.ready_head >= 4096 && self.ready_head * 2 >= self.ready.len() {
                // The cap has kept the queue from emptying for a while: drop the used prefix.
                self.ready.drain(..self.ready_head);
                self.ready_head = 0;
            }
            let s = s as usize;
            self.sites[s].in_ready = false;
            if let Some(check) = self.try_dispatch(s, now) {
                return Some(check);
            }
        }
        None
    }

    /// Starts loading the records of the sites due at `at` (a few ms ahead), so that when they
    /// come out of the wheel their cache misses have been taken already, overlapped with this
    /// work.
    #[inline]
    fn prefetch_ahead(&self, at: u64) {
        let Some(last) = self.sites.len().checked_sub(1) else {
            return;
        };
        // The first four (see `PREFETCH_SITES`), without a branch per site: past the end of a
        // shorter list this prefetches the last site again, which is harmless.
        for s in self.events.first_at::<PREFETCH_SITES>(at) {
            let site = &self.sites[(s as usize).min(last)];
            // Both cache lines of the record.
            prefetch(&site.wake_at);
            prefetch(&site.spacing_ms);
        }
    }

    /// Puts site `s` in the ready queue if it may have something to send; whether it did.
    fn mark_ready(site: &mut SiteSlot, ready: &mut Vec<u32>, s: u32) -> bool {
        let queue = !site.in_ready && site.idle() && !site.paused() && site.next_key != GONE;
        if queue {
            site.in_ready = true;
            ready.push(s);
        }
        queue
    }

    /// Schedules idle site `s`'s wake-up for its next check: the later of its next allowed
    /// start and its earliest due target. (A registry wait is found when it wakes.)
    fn arm(&mut self, s: usize) {
        let site = &self.sites[s];
        if site.idle() && !site.paused() && site.next_key != GONE {
            let at = site.next_start.max(key_due(site.next_key));
            self.set_wake(s, at);
        }
    }

    fn set_wake(&mut self, s: usize, at: u64) {
        Self::wake(&mut self.sites[s], &mut self.events, s, at);
    }

    /// Site `s` (`site`) wakes up at `at`'s tick, unless it already wakes up sooner.
    #[inline]
    fn wake(site: &mut SiteSlot, events: &mut Timers, s: usize, at: u64) {
        let at = tick_up(at);
        if at < site.wake_at {
            let node = Node::site(s as u32);
            if site.wake_at != NEVER {
                events.remove(site.wake_at, node);
            }
            site.wake_at = at;
            events.push(at, node);
        }
    }

    /// Recomputes idle site `s`'s smallest key (nothing is in flight, so every slot counts).
    fn refresh(&mut self, s: usize) {
        let site = &mut self.sites[s];
        debug_assert!(site.idle());
        site.next_key = match site.hold & MANY {
            0 => min_of(&site.keys),
            _ => min_with(&site.keys, &self.more_keys[s]),
        };
    }

    fn try_dispatch(&mut self, s: usize, now: Timestamp) -> Option<Check> {
        let site = &self.sites[s];
        if !site.idle() || site.paused() || site.next_key == GONE {
            return None;
        }
        let due = key_due(site.next_key);
        let at = site.next_start.max(due);
        if now.0 < at {
            self.set_wake(s, at);
            return None;
        }
        let probe = if site.gated() {
            match self.registry.admit(&self.site_keys[s], now) {
                Admission::Clear => false,
                Admission::Probe => true,
                Admission::Wait(until) => {
                    self.set_wake(s, until.0);
                    return None;
                }
                Admission::ProbeInFlight => return None,
            }
        } else {
            false
        };
        self.in_flight += 1;
        let site = &mut self.sites[s];
        if site.wake_at != NEVER {
            // A wake-up set while it sat in the ready queue (a search added, a site resumed):
            // a site in flight has none (`handle_outcome` relies on it).
            self.events.remove(site.wake_at, Node::site(s as u32));
            site.wake_at = NEVER;
        }
        Some(Self::start(site, s as u32, now, probe))
    }

    /// Site `s` (`site`, idle, its next target due) starts its next check at `now`.
    #[inline]
    fn start(site: &mut SiteSlot, s: u32, now: Timestamp, probe: bool) -> Check {
        let slot = site.next_key & SLOT_MASK;
        let seq = (site.flight >> 48).wrapping_add(1) & 0xFFFF;
        site.flight = (seq << 48) | (slot << 32) | u64::from(s);
        site.probe = probe;
        // No overflow: `now` is clamped ([`NOW_MAX`]).
        site.next_start = now.0 + u64::from(site.spacing_ms);
        // Out of the running while in flight (see `SiteSlot::keys`); `next_key` keeps it.
        if let Some(k) = site.keys.0.get_mut(slot as usize) {
            *k = GONE;
        }
        Check {
            id: CheckId(site.flight),
            site: SiteIndex(s),
            probe,
        }
    }

    /// Reports how check `id` ended at `now`. `retry_after` is the site's Retry-After, if any.
    /// Returns what changed on the site, if anything worth telling.
    #[inline(always)] // the driver's loop: see docs/benchmarks/scheduler.md, seventh round
    pub fn handle_outcome(
        &mut self,
        id: CheckId,
        outcome: Outcome,
        retry_after: Option<Duration>,
        now: Timestamp,
    ) -> Option<Reaction> {
        let now = clamp_now(now);
        let (s, slot) = split_id(id);
        let site = self.sites.get_mut(s)?;
        if !site.out_as(id) {
            return None; // not in flight: a stale or foreign id
        }
        // The common case first, on the site's record alone: an answer from a site that was
        // neither waiting nor paused (a paused site must not wake), whose keys are all in its
        // record (so `slot < INLINE`). The search is due again an interval (± jitter) from now.
        if site.hold == 0
            && matches!(
                outcome,
                Outcome::Ok | Outcome::Unchanged | Outcome::LayoutUnknown
            )
        {
            debug_assert!(!site.probe, "only a gated site's check is the probe");
            site.land();
            self.in_flight -= 1;
            let window = match site.due_span_ms {
                MIXED => spread(self.site_intervals[s][slot], self.jitter),
                span => (u64::from(site.due_after_ms), u64::from(span)),
            };
            let next = due_again(&mut self.rng, window, now);
            // The others' smallest key, read before this slot's new key is stored (its own
            // reads `GONE` while it is out): loaded after that 8-byte store, the 16-byte loads
            // of `min_of` would wait for it to complete (a store cannot forward to a wider
            // load), and a day took 15% longer.
            let rest = min_of(&site.keys);
            let new = key_soon(next, slot);
            site.keys.0[slot] = new;
            site.next_key = rest.min(new);
            // Which is later is a coin toss here (about half the time the spacing binds): a
            // branch would be mispredicted ~0.4 times per check, so a conditional move.
            let due = key_due(site.next_key);
            let at = tick_up_soon(later(site.next_start, due));
            // A site has no wake-up while its check is out (`visit` took it, and `arm` and
            // `came_due` leave a busy site alone): no earlier one to compare with or remove.
            debug_assert_eq!(site.wake_at, NEVER);
            site.wake_at = at;
            self.events.push_fresh(at, Node::site(s as u32));
            return None;
        }
        let (s, slot, _) = self.take_in_flight(id)?;
        self.outcome_slow(s, slot, outcome, retry_after, now)
    }

    /// [`Self::handle_outcome`] for a refusal, a special outcome or a waiting site.
    #[inline(never)]
    fn outcome_slow(
        &mut self,
        s: usize,
        slot: usize,
        outcome: Outcome,
        retry_after: Option<Duration>,
        now: Timestamp,
    ) -> Option<Reaction> {
        let reaction = if let Some(kind) = outcome.refusal_kind() {
            // The slot keeps its due time: it goes back in front of its siblings.
            Some(self.record_refusal(s, kind, retry_after, now))
        } else {
            let cleared = if self.sites[s].gated() {
                self.sites[s].set(GATED, false);
                let key = &self.site_keys[s];
                self.registry.clear(key).map(|was| Reaction::SiteCleared {
                    site: key.clone(),
                    was,
                })
            } else {
                None
            };
            match outcome {
                Outcome::SessionExpired => {
                    self.sites[s].set(PAUSED, true);
                    Some(Reaction::SessionExpired {
                        site: self.site_keys[s].clone(),
                    })
                }
                Outcome::SearchGone => {
                    // The search's fate matters more to the user than the site clearing (which
                    // status views show anyway), so a probe that finds a 404 reports SearchGone.
                    *self.key_mut(s, slot) = GONE;
                    let t = self.site_targets[s][slot] as usize;
                    Some(Reaction::SearchGone {
                        searches: self.searches[t].to_vec(),
                    })
                }
                _ => {
                    self.reschedule(s, slot, now);
                    cleared
                }
            }
        };
        self.refresh(s);
        self.arm(s);
        reaction
    }

    fn record_refusal(
        &mut self,
        s: usize,
        kind: RefusalKind,
        retry_after: Option<Duration>,
        now: Timestamp,
    ) -> Reaction {
        let random = self.rng.next_f64();
        self.sites[s].set(GATED, true);
        let key = self.site_keys[s].clone();
        let entry = self
            .registry
            .record(&key, kind, now, retry_after, random)
            .clone();
        let searches = self.site_targets[s]
            .iter()
            .map(|&t| self.searches[t as usize].len())
            .sum();
        Reaction::SiteWaiting {
            site: key,
            entry,
            searches,
        }
    }

    /// The check was abandoned without an outcome (shutdown): the search goes back in the queue
    /// and a probe, if it was one, is released.
    pub fn abandon(&mut self, id: CheckId) {
        let Some((s, _, probe)) = self.take_in_flight(id) else {
            return;
        };
        if probe {
            self.registry.abandon_probe(&self.site_keys[s]);
        }
        self.refresh(s);
        self.arm(s);
    }

    /// Ends check `id` if it is in flight: returns its site, its slot and whether it was the
    /// probe.
    fn take_in_flight(&mut self, id: CheckId) -> Option<(usize, usize, bool)> {
        let (s, slot) = split_id(id);
        let site = self.sites.get_mut(s)?;
        if !site.out_as(id) {
            return None;
        }
        site.land();
        // Its key back (see `SiteSlot::keys`).
        if let Some(k) = site.keys.0.get_mut(slot) {
            *k = site.next_key;
        }
        let probe = std::mem::take(&mut site.probe);
        if site.hold & RELEASED == 0 {
            self.in_flight -= 1;
        }
        site.set(RELEASED, false);
        Some((s, slot, probe))
    }

    fn reschedule(&mut self, s: usize, slot: usize, now: Timestamp) {
        let window = spread(self.site_intervals[s][slot], self.jitter);
        let next = due_again(&mut self.rng, window, now);
        *self.key_mut(s, slot) = key_soon(next, slot);
    }

    /// Check `id` is slow (a site that accepts the connection and then stalls): it stays in
    /// flight for its site, which gets no other check until it ends, but it no longer counts
    /// against the concurrency cap, so a few hanging sites cannot hold every other site up.
    /// Returns whether it was released (`false` for an id not in flight, or released before).
    /// The cap then bounds the checks that are making progress; the slow ones are bounded by
    /// the number of sites, one each.
    pub fn release_slot(&mut self, id: CheckId) -> bool {
        let (s, _) = split_id(id);
        let Some(site) = self.sites.get_mut(s) else {
            return false;
        };
        if !site.out_as(id) || site.hold & RELEASED != 0 {
            return false;
        }
        site.set(RELEASED, true);
        self.in_flight -= 1;
        true
    }

    /// The user refreshed the site's cookies: resume its searches.
    pub fn resume_site(&mut self, site: &SiteKey) {
        if let Some(&s) = self.site_index.get(site) {
            self.sites[s].set(PAUSED, false);
            self.arm(s);
        }
    }

    /// Marks a site paused (restored from the store at start-up).
    pub fn pause_site(&mut self, site: &SiteKey) {
        if let Some(&s) = self.site_index.get(site) {
            self.sites[s].set(PAUSED, true);
        }
    }

    /// The next instant at which [`Self::poll_due`] may return something, or `None` if nothing
    /// is scheduled (everything parked, or waiting for in-flight checks): a [`TICK`], or `0`
    /// when checks wait only for a concurrency slot. May be early (stale events): a spurious
    /// poll is harmless.
    #[must_use]
    #[inline(always)] // the driver's loop: see docs/benchmarks/scheduler.md, seventh round
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        if self.ready_head < self.ready.len() && self.in_flight < self.config.concurrency {
            return Some(Timestamp(0));
        }
        self.events.next_deadline().map(Timestamp)
    }

    /// Checks in flight that count against the concurrency cap (not the released ones: see
    /// [`Self::release_slot`]).
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// How a search looks right now, and when it will next be checked.
    #[must_use]
    pub fn search_state(&self, id: SearchId) -> Option<(SearchState, Option<Timestamp>)> {
        let &t = self.by_search.get(&id)?;
        let (s, slot) = self.homes[t];
        let site = &self.sites[s as usize];
        let entry = self.key(s as usize, slot as usize);
        if entry == GONE {
            return Some((SearchState::SearchGone, None));
        }
        if site.paused() {
            return Some((SearchState::SessionExpired, None));
        }
        let in_flight = u32::from(site.slot_in_flight()) == slot;
        if in_flight && site.probe {
            return Some((SearchState::Probing, None));
        }
        let due = Timestamp(key_due(entry));
        if let Some(entry) = self.registry.entry(&self.site_keys[s as usize]) {
            return Some((SearchState::Waiting, Some(entry.next_retry_at.max(due))));
        }
        // `next_start` is 0 before the site's first check: then only the due time counts.
        let next = (!in_flight).then(|| Timestamp(site.next_start).max(due));
        Some((SearchState::Ok, next))
    }

    /// How a site looks right now.
    #[must_use]
    pub fn site_state(&self, key: &SiteKey) -> SiteState {
        if self
            .site_index
            .get(key)
            .is_some_and(|&s| self.sites[s].paused())
        {
            return SiteState::SessionExpired;
        }
        if self.registry.is_probing(key) {
            return SiteState::Probing;
        }
        if self.registry.entry(key).is_some() {
            return SiteState::Waiting;
        }
        SiteState::Clear
    }

    /// The sites the scheduler knows.
    pub fn sites(&self) -> impl Iterator<Item = &SiteKey> {
        self.site_keys.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::{DUE_MAX, GONE, INLINE, Keys, SLOT_MASK, key, later, min_of};
    use proptest::prelude::*;

    /// A key as the scheduler makes them: any due time (tiny ones are subnormal doubles,
    /// the largest saturate), any slot, or `GONE`.
    fn any_key() -> impl Strategy<Value = u64> {
        prop_oneof![
            (0..=DUE_MAX + 5, 0..=SLOT_MASK).prop_map(|(due, slot)| key(due, slot as usize)),
            (0..1u64 << 20, 0..=SLOT_MASK).prop_map(|(due, slot)| key(due, slot as usize)),
            Just(GONE),
        ]
    }

    proptest! {
        /// The keys' smallest, taken as doubles, is their smallest as integers.
        #[test]
        fn min_of_is_the_smallest_key(keys in prop::array::uniform10(any_key())) {
            prop_assert_eq!(min_of(&Keys(keys)), keys.into_iter().min().unwrap_or(GONE));
            prop_assert_eq!(min_of(&Keys([GONE; INLINE])), GONE);
        }

        /// The hand-written conditional move is `max`, whatever the operands' order or their
        /// top bits (an unsigned compare).
        #[test]
        fn later_is_the_larger_of_two_times(a in any::<u64>(), b in any::<u64>()) {
            prop_assert_eq!(later(a, b), a.max(b));
            prop_assert_eq!(later(b, a), a.max(b));
            prop_assert_eq!(later(a, a), a);
        }
    }
}
