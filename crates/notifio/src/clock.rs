//! The wall clock: the one place Notifio reads it.
//!
//! The policy crate never reads a clock (time comes in as `now`); this is where the shell gets
//! that `now`, as Unix epoch milliseconds, for the scheduler, the store's times, the status
//! view, cookie expiry and the notification sender. Elapsed time (timeouts, sleeps, how long a
//! row waited) is tokio's or std's monotonic `Instant`, which tests can pause; it is not read
//! here.

use notifio_policy::Timestamp;
use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in Unix epoch milliseconds (0 on a clock set before 1970).
#[must_use]
#[allow(clippy::disallowed_methods)] // the one reading of the wall clock
pub fn now() -> Timestamp {
    Timestamp(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    )
}

/// How long ago `t` was on the wall clock (zero for a time in the future): the age of a
/// file's modification time.
#[must_use]
#[allow(clippy::disallowed_methods)] // the wall clock, as `now` reads it
pub fn since(t: SystemTime) -> std::time::Duration {
    SystemTime::now().duration_since(t).unwrap_or_default()
}

/// The user's offset from UTC at `t`, as the system's time zone says (UTC when it says
/// nothing): what their `active_hours = "07:00-23:00"` and the hours of the week a budget
/// learns by mean. Worked out again now and then by its users, so a change to or from summer
/// time follows.
#[must_use]
pub fn local_offset(t: Timestamp) -> notifio_policy::LocalOffset {
    let tz = jiff::tz::TimeZone::system();
    let at = i64::try_from(t.as_millis())
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    notifio_policy::LocalOffset(tz.to_offset(at).seconds())
}

/// The machine's time zone, as the system says (UTC when it says nothing): what a channel's
/// `quiet_hours` are in, and how a heartbeat writes its times.
#[must_use]
pub fn time_zone() -> jiff::tz::TimeZone {
    jiff::tz::TimeZone::system()
}

/// The CPU time the calling thread has used so far: what bounds the reading of one page
/// (`extract::bounds`), so that a loaded machine does not cut a page short that would have
/// been read in time, and a hostile page costs at most that much CPU. Where the system has no
/// per-thread clock, the time since this thread first asked.
#[must_use]
pub fn thread_cpu_time() -> std::time::Duration {
    #[cfg(unix)]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        std::time::Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_nsec).unwrap_or(0),
        )
    }
    #[cfg(not(unix))]
    {
        thread_local! {
            static FIRST: std::time::Instant = std::time::Instant::now();
        }
        FIRST.with(std::time::Instant::elapsed)
    }
}
