//! Reading a page within bounds: whatever a page holds (its nesting, its size, the shape of a
//! selector), its reading ends within a CPU-time budget and bounded memory, on a thread of its
//! own, and a page over a bound is a classified outcome with a reason, never a stalled watcher.
//!
//! Why each bound (docs/sites.md#reading-within-bounds): the streaming reader (`lol_html`)
//! matches descendant selectors at a cost that grows as the page's depth to the power of their
//! number (a 64 KB page of 6,000 nested `<div>`s read with `div div article` took 17.7 s), and
//! nothing can interrupt it from outside. So:
//! - a page nested deeper than [`STREAMING_DEPTH_MAX`] levels, as a streaming reader counts
//!   them, is not given to it (real result pages stay under 40);
//! - a selector chains at most [`MAX_DESCENDANT_STEPS`] descendant steps, checked when the
//!   config or a profile file is read ([`check_selector`]); a JSONPath descends recursively
//!   (`..`) at most once ([`check_json_path`]);
//! - the page is handed over in small pieces, and the budget is looked at between them, so a
//!   reading that has used its [`CPU_BUDGET`] stops within one piece;
//! - the reading runs on the blocking pool (`pages::judge`), never on the thread that runs the
//!   checks, the dashboard and the shutdown.
//!
//! The budget is the calling thread's: [`within`] opens it, the readers ask [`over`]. Outside
//! [`within`] (tests, benchmarks) nothing is ever over.

use std::cell::RefCell;
use std::time::Duration;

/// The CPU time one page's reading may take: an ordinary page takes milliseconds (a debug
/// build tens of them), so only a page built to stall the reader comes near it.
pub const CPU_BUDGET: Duration = Duration::from_secs(2);

/// Deepest nesting a page may have, as a streaming reader counts it (an element ends at its own
/// end tag only), to be read by the streaming reader.
pub const STREAMING_DEPTH_MAX: usize = 256;

/// Most descendant steps (`a b`) one selector may chain. A field's selector is read inside its
/// card, which adds one step, so a field selector may chain one fewer.
pub const MAX_DESCENDANT_STEPS: usize = 3;

/// Most memory the streaming reader may hold for one page (its buffers and open elements).
pub const STREAMING_MEMORY_MAX: usize = 64 * 1024 * 1024;

/// Why a page was not read: it is over one of the bounds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unreadable {
    /// Nested deeper than [`STREAMING_DEPTH_MAX`].
    #[error(
        "the page nests elements more than {limit} levels deep (result pages stay under 40): not read, so that it cannot hold up the other searches"
    )]
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// Its reading used up [`CPU_BUDGET`].
    #[error(
        "reading the page took more than {} s of CPU time: stopped, so that it cannot hold up the other searches", budget.as_secs_f32()
    )]
    TooSlow {
        /// The budget.
        budget: Duration,
    },
    /// Its reading needed more than [`STREAMING_MEMORY_MAX`].
    #[error(
        "reading the page needed more than {} MB of memory: stopped", limit / (1024 * 1024)
    )]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
}

struct Budget {
    started: Duration,
    limit: Duration,
    tripped: Option<Unreadable>,
}

thread_local! {
    static BUDGET: RefCell<Option<Budget>> = const { RefCell::new(None) };
}

/// Runs `read` with a budget of `limit` CPU time on this thread: what it returns, and why it
/// was stopped if it was ([`over`] said so, or a reader [`trip`]ped a bound).
pub fn within<T>(limit: Duration, read: impl FnOnce() -> T) -> (T, Option<Unreadable>) {
    let outer = BUDGET.with(|b| {
        b.replace(Some(Budget {
            started: crate::clock::thread_cpu_time(),
            limit,
            tripped: None,
        }))
    });
    let out = read();
    let tripped = BUDGET.with(|b| {
        let mine = b.replace(outer);
        mine.and_then(|m| m.tripped)
    });
    (out, tripped)
}

/// Records that the reading is over a bound (the first reason recorded stands).
pub(crate) fn trip(why: Unreadable) {
    BUDGET.with(|b| {
        if let Some(budget) = b.borrow_mut().as_mut() {
            budget.tripped.get_or_insert(why);
        }
    });
}

/// Whether the reading on this thread is over its budget (or was stopped for another bound):
/// a reader asks between pieces of the page and stops when it is.
pub(crate) fn over() -> bool {
    BUDGET.with(|b| {
        let mut b = b.borrow_mut();
        let Some(budget) = b.as_mut() else {
            return false;
        };
        if budget.tripped.is_some() {
            return true;
        }
        let used = crate::clock::thread_cpu_time().saturating_sub(budget.started);
        if used > budget.limit {
            budget.tripped = Some(Unreadable::TooSlow {
                budget: budget.limit,
            });
            return true;
        }
        false
    })
}

/// The descendant steps (`a b`: a space between two compound selectors) of each selector in a
/// list; child (`>`) and sibling (`+`, `~`) steps are not counted.
fn descendant_steps(list: &str) -> Vec<usize> {
    let mut counts = vec![0usize];
    let (mut depth, mut quote) = (0i32, None::<char>);
    // Whether a compound selector has begun since the last combinator.
    let mut in_compound = false;
    let mut pending_space = false;
    for c in list.chars() {
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => {
                quote = Some(c);
                in_compound = true;
            }
            '[' | '(' => {
                depth += 1;
                in_compound = true;
            }
            ']' | ')' => depth -= 1,
            _ if depth > 0 => {}
            ',' => {
                counts.push(0);
                in_compound = false;
                pending_space = false;
            }
            '>' | '+' | '~' => {
                in_compound = false;
                pending_space = false;
            }
            c if c.is_whitespace() => pending_space = in_compound,
            _ => {
                if pending_space {
                    if let Some(last) = counts.last_mut() {
                        *last += 1;
                    }
                    pending_space = false;
                }
                in_compound = true;
            }
        }
    }
    counts
}

/// Refuses a selector that chains more than `max` descendant steps in one of its selectors.
///
/// # Errors
/// What is wrong and what to write instead.
pub fn check_selector(selector: &str, max: usize) -> Result<(), String> {
    let steps = descendant_steps(selector).into_iter().max().unwrap_or(0);
    if steps > max {
        return Err(format!(
            "it chains {steps} descendant steps (spaces between selectors); at most {max} are \
             allowed here, so that a deeply nested page cannot make matching explode: name the \
             element by a class or an attribute, or use `>` for a direct child"
        ));
    }
    Ok(())
}

/// Refuses a JSONPath that descends recursively (`..`) more than once: each `..` multiplies the
/// nodes visited by the document's size (five took 3 GB on a 13 KB page).
///
/// # Errors
/// What is wrong.
pub fn check_json_path(path: &str) -> Result<(), String> {
    let mut quote = None::<char>;
    let mut descents = 0;
    let mut prev = ' ';
    for c in path.chars() {
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '.' if prev == '.' => {
                descents += 1;
                prev = ' ';
                continue;
            }
            _ => {}
        }
        prev = c;
    }
    if descents > 1 {
        return Err(format!(
            "it descends recursively (`..`) {descents} times; at most once is allowed, so that a \
             page's data cannot make the search explode: name the keys on the way instead"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendant_steps_are_counted_per_selector() {
        assert_eq!(descendant_steps("article"), [0]);
        assert_eq!(descendant_steps("div div article"), [2]);
        assert_eq!(descendant_steps("ul > li.card  h2"), [1]);
        assert_eq!(descendant_steps(" a b , c>d ~ e + f"), [1, 0]);
        assert_eq!(
            descendant_steps(r#"[data-x="a b c"] span:not(.x y) a[title='p q']"#),
            [2]
        );
        assert!(check_selector("main section ul li", 3).is_ok());
        let err = check_selector(&"div ".repeat(1000), 3).unwrap_err();
        assert!(err.contains("999 descendant steps"), "{err}");
    }

    #[test]
    fn one_recursive_descent_is_allowed() {
        assert!(check_json_path("$..items[*]").is_ok());
        assert!(check_json_path("$.props['a..b'].x").is_ok());
        assert!(check_json_path("$.a.b[0]").is_ok());
        let err = check_json_path("$..*..*..*..*..*").unwrap_err();
        assert!(err.contains("5 times"), "{err}");
    }

    #[test]
    fn a_budget_trips_once_used_up_and_only_inside_within() {
        assert!(!over(), "no budget outside `within`");
        let ((), why) = within(Duration::ZERO, || {
            // Burn a little CPU so the thread's clock moves past zero.
            let mut x = 0u64;
            while !over() {
                x = x.wrapping_add(1);
                std::hint::black_box(x);
            }
        });
        assert_eq!(
            why,
            Some(Unreadable::TooSlow {
                budget: Duration::ZERO
            })
        );
        let ((), why) = within(Duration::from_secs(60), || {
            trip(Unreadable::TooDeep { limit: 1 });
            trip(Unreadable::TooLarge { limit: 1 });
            assert!(over());
        });
        assert_eq!(
            why,
            Some(Unreadable::TooDeep { limit: 1 }),
            "the first stands"
        );
        assert!(!over());
    }
}
