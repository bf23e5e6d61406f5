//! The allocator of nodekeeper's binaries: mimalloc under the options the
//! controller is measured with. One file for the `nodekeeper` binary and
//! for `nodekeeper-floor` (which includes it by path), so the benchmark's
//! floor runs under exactly the controller's allocator.

/// mimalloc: a push fleet allocates and frees per request on every worker
/// thread; glibc's malloc spent a quarter of the controller's CPU on it and
/// let RSS creep (README, Scale benchmark).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc hands freed pages back to the OS a while after they are freed
/// (`purge_delay`, 1 s), and only when the thread that owns them next frees
/// or allocates: pages freed by a burst (the start-up registration and
/// checkpoint, a list of every node) on threads that then go quiet stayed
/// resident, ~20 MiB of 166 at 10,000 probed nodes. With no delay they go
/// back at once; the CPU this costs is measured in the README (Scale
/// benchmark).
///
/// A page whose thread ended or let it go is *abandoned*; by default a
/// thread that frees into such a page may take it over and fill its holes.
/// At 10,000 probed nodes most live pages were abandoned ones (1.2 K of
/// 1.5 K, `mi_stats_print`), and taking them over on free kept 12–15 MiB
/// more resident; taking them over on every free doubled RSS. Never on
/// free (`page_reclaim_on_free` -1): allocation still takes them over.
///
/// The environment (`MIMALLOC_PURGE_DELAY`, `MIMALLOC_PAGE_RECLAIM_ON_FREE`)
/// still decides.
pub fn tune_allocator() {
    // Of mimalloc.h's `mi_option_e` in the crate's default (v3) mimalloc;
    // the crate names only some options.
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    const PAGE_RECLAIM_ON_FREE: libmimalloc_sys::mi_option_t = 35;
    for (option, variable, value) in [
        (PURGE_DELAY, "MIMALLOC_PURGE_DELAY", 0),
        (PAGE_RECLAIM_ON_FREE, "MIMALLOC_PAGE_RECLAIM_ON_FREE", -1),
    ] {
        if std::env::var_os(variable).is_none() {
            // SAFETY: mi_option_set stores an option's value (a plain store
            // read by later allocations and frees); any thread may call it
            // at any time.
            unsafe { libmimalloc_sys::mi_option_set(option, value) };
        }
    }
}
