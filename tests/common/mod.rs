//! What the allocation tests share: a global allocator that counts the
//! allocations (and reallocations) of the thread that makes them, so a test
//! can count what one request or one heartbeat allocates, deterministically,
//! where a timing would be noise. A test installs it with
//! `#[global_allocator] static ALLOCATOR: common::Counting = common::Counting;`.

// Each test uses the part it needs.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting each thread's allocations.
pub struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    static COUNTING: Cell<bool> = const { Cell::new(true) };
    static TRACING: Cell<bool> = const { Cell::new(false) };
}

fn count_one() {
    // `try_with`: a thread being torn down still allocates.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
            if TRACING.try_with(Cell::get).unwrap_or(false) {
                // Not counted, and not traced: the trace allocates too.
                on.set(false);
                trace_one();
                on.set(true);
            }
        }
    });
}

/// Prints the frames that made an allocation, without the allocator's own.
fn trace_one() {
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    let frames: Vec<&str> = trace
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("at "))
        .filter(|l| {
            !["common::", "alloc::", "core::", "std::"]
                .iter()
                .any(|p| l.contains(p))
        })
        .take(6)
        .collect();
    eprintln!("allocation: {}", frames.join(" <- "));
}

// SAFETY: every call is passed to the system allocator unchanged; the
// counters are const-initialized thread locals without destructors, which
// never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations this thread has made so far.
pub fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Runs `f` without counting what it allocates.
pub fn uncounted<R>(f: impl FnOnce() -> R) -> R {
    let was = COUNTING.with(|on| on.replace(false));
    let r = f();
    COUNTING.with(|on| on.set(was));
    r
}

/// Prints where each allocation this thread makes comes from, while `on`.
pub fn set_tracing(on: bool) {
    TRACING.with(|t| t.set(on));
}
