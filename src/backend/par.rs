//! Data parallelism for the CPU backend and host copies: rayon's pool on native targets; on wasm32 (a browser page
//! has one thread, and spawning workers needs a cross-origin-isolated page) everything runs on the calling thread.

/// Threads a parallel loop spreads over: rayon's pool, or 1 on wasm32.
pub(crate) fn threads() -> usize {
    #[cfg(not(target_arch = "wasm32"))]
    return rayon::current_num_threads();
    #[cfg(target_arch = "wasm32")]
    return 1;
}

/// Whether the caller is one of the pool's threads (never on wasm32): nested loops then run in order, since a pool
/// thread waiting on nested tasks may run one of its caller's other tasks, which could lock a device again on the
/// same thread.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
pub(crate) fn on_pool_thread() -> bool {
    #[cfg(not(target_arch = "wasm32"))]
    return rayon::current_thread_index().is_some();
    #[cfg(target_arch = "wasm32")]
    return false;
}

/// Runs `f` for every index below `n` with a state made by `init` per worker (not per index): in parallel on
/// rayon's pool, or in order on the calling thread from a pool thread and on wasm32.
pub(crate) fn for_each_init<S>(n: usize, init: impl Fn() -> S + Send + Sync, f: impl Fn(&mut S, usize) + Send + Sync) {
    #[cfg(not(target_arch = "wasm32"))]
    if !on_pool_thread() {
        use rayon::prelude::*;
        (0..n).into_par_iter().for_each_init(init, f);
        return;
    }
    let mut state = init();
    (0..n).for_each(|t| f(&mut state, t));
}

/// Runs `f` on every pair of `chunk`-long pieces of `dst` and `src` (of equal lengths), in parallel where there are
/// threads.
pub(crate) fn zip_chunks<D: Send, S: Sync>(
    dst: &mut [D],
    src: &[S],
    chunk: usize,
    f: impl Fn(&mut [D], &[S]) + Send + Sync,
) {
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        dst.par_chunks_mut(chunk).zip(src.par_chunks(chunk)).for_each(|(d, s)| f(d, s));
    }
    #[cfg(target_arch = "wasm32")]
    dst.chunks_mut(chunk).zip(src.chunks(chunk)).for_each(|(d, s)| f(d, s));
}
