//! Counters of what a device's engine did, for tests, benchmarks and curious users.

/// What a [`Device`](crate::Device) has done since it was made. Read with [`Device::stats`](crate::Device::stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls that realized something (`realize`, `to_vec` and friends).
    pub realizes: u64,
    /// `queue.submit` calls: one per realize that had GPU work, except that realizes made while the GPU is busy are
    /// batched into one (see [`Device::flush`](crate::Device::flush)).
    pub submits: u64,
    /// Compute dispatches: a kernel each, or several kernels side by side where none reads what another writes
    /// (the backends count alike: the CPU backend counts a dispatch where a GPU would run one).
    pub dispatches: u64,
    /// Kernels run: as many as `dispatches`, plus those that ran in one dispatch with another.
    pub kernels: u64,
    /// Realizes whose plan (fusion, kernels, memory plan) came from the plan cache: an earlier realize had the same
    /// structure (ops, shapes, types, views, requested outputs; constants' values may differ).
    pub plans_reused: u64,
    /// Pipelines compiled from new WGSL.
    pub pipelines_compiled: u64,
    /// Kernels whose pipeline came from the cache.
    pub pipeline_cache_hits: u64,
    /// Bytes written from host to device.
    pub bytes_uploaded: u64,
    /// Bytes read back from device to host.
    pub bytes_downloaded: u64,
    /// Kernel parameter blocks written to the device: a realize whose kernels' parameters (sizes, strides,
    /// constants) equal a recent realize's reuses that block and writes none. Always 0 on the CPU backend.
    pub param_uploads: u64,
    /// Device buffers created (pool misses), read-back staging buffers included.
    pub buffers_allocated: u64,
    /// Bytes of storage buffers holding values now: realized tensors and a realize's intermediates, not the pool's
    /// free buffers or staging buffers.
    pub live_buffer_bytes: u64,
    /// The most `live_buffer_bytes` has ever been.
    pub peak_buffer_bytes: u64,
    /// Bytes of free buffers the device keeps for reuse (storage and read-back staging): at most twice its
    /// [`pool_budget`](crate::Device::pool_budget), once for each kind. [`Device::trim`](crate::Device::trim)
    /// gives them back.
    pub pool_bytes: u64,
}
