//! The allocator of nodekeeper's binaries: jemalloc under the options the
//! controller is measured with. One file for the `nodekeeper` binary and
//! for `nodekeeper-floor` (which includes it by path), so the benchmark's
//! floor runs under exactly the controller's allocator.

/// jemalloc: a push fleet allocates and frees per request on every worker
/// thread, where glibc's malloc takes a quarter of the controller's CPU and
/// lets RSS creep, and mimalloc's RSS keeps rising while the bytes held stay
/// flat (docs/decisions/jemalloc.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main` (its `malloc_conf`):
/// - `background_thread`: pages freed are handed back to the OS by
///   jemalloc's own threads, on time, not only when the thread that freed
///   them next allocates (a thread that goes quiet after a burst, the
///   start-up registration say, would keep them);
/// - `dirty_decay_ms:1000`: freed pages go back within about a second
///   (the default is 10 s), `muzzy_decay_ms:0` at once after that: memory
///   follows what is held (docs/decisions/jemalloc.md).
///
/// `_RJEM_MALLOC_CONF` in the environment is read after these and wins,
/// e.g. `_RJEM_MALLOC_CONF=dirty_decay_ms:10000` to spend memory for CPU.
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: Option<&'static std::ffi::c_char> = Some(
    // SAFETY: the pointer is the first byte of a static, NUL-terminated
    // string, which is what jemalloc reads through it.
    unsafe { &*c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr() },
);

#[cfg(test)]
mod tests {
    use std::ffi::{c_void, CStr};

    /// jemalloc's value of a `mallctl` option.
    fn option<T: Default>(name: &CStr) -> T {
        let mut value = T::default();
        let mut len = std::mem::size_of::<T>();
        // SAFETY: `value` is a T of `len` bytes, the type the option has;
        // nothing is written (null new value).
        let rc = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                (&mut value as *mut T).cast::<c_void>(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(rc, 0, "mallctl {name:?}");
        value
    }

    /// The options are jemalloc's, not only written down: a misspelt
    /// symbol would leave its defaults (no background thread, 10 s decay).
    #[test]
    fn jemalloc_runs_under_the_options_given() {
        if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
            return; // the environment decides, by design
        }
        assert!(option::<bool>(c"opt.background_thread"));
        assert_eq!(option::<isize>(c"opt.dirty_decay_ms"), 1000);
        assert_eq!(option::<isize>(c"opt.muzzy_decay_ms"), 0);
    }
}
