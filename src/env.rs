//! The `LAZOR_*` environment knobs, read in one place. `docs/ENVIRONMENT.md` documents each.

use std::path::PathBuf;

/// The value of `name`, or `None` when unset or empty.
pub fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether the switch `name` is on: set to anything but `0`.
fn flag(name: &str) -> bool {
    var(name).is_some_and(|v| v.trim() != "0")
}

/// `LAZOR_DEBUG`: 0 silent, 1 one line per realize, 2 also each new kernel's WGSL.
pub fn debug_level() -> u32 {
    var("LAZOR_DEBUG").and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// `LAZOR_PROFILE=1`: every device profiles all its kernels and prints the table at exit (or when dropped).
pub fn profile() -> bool {
    flag("LAZOR_PROFILE")
}

/// `LAZOR_NOFUSE=1`: one kernel per op, the unfused baseline.
pub fn nofuse() -> bool {
    flag("LAZOR_NOFUSE")
}

/// `LAZOR_COOP_TRIANGLES=1`: triangular products (causal attention's) run on the tensor cores too, where full ones
/// do. Off until checked on a GPU with cooperative matrices.
pub fn coop_triangles() -> bool {
    flag("LAZOR_COOP_TRIANGLES")
}

/// `LAZOR_COOP_SLAB`: halves per element of the tensor-core kernel's workgroup slabs (1, 2 or 4; default 2): how
/// wide each store that stages an operand is, and the element type its cooperative loads read.
pub fn coop_slab() -> u32 {
    var("LAZOR_COOP_SLAB").and_then(|v| v.trim().parse().ok()).filter(|w| [1, 2, 4].contains(w)).unwrap_or(2)
}

/// `LAZOR_GROUP=1`: kernels that neither read nor write what another writes share one dispatch.
pub fn group() -> bool {
    flag("LAZOR_GROUP")
}

/// `LAZOR_MAX_FUSED_OPS`: the most ops one generated kernel computes (default 256, at most 1024; longer chains
/// split). The cap bounds the depth of lowering's recursion as well as driver compile time.
pub fn max_fused_ops() -> usize {
    var("LAZOR_MAX_FUSED_OPS").and_then(|v| v.trim().parse().ok()).filter(|&n| n > 0).unwrap_or(256).min(1024)
}

/// `LAZOR_NO_F16=1`: f16 buffers are always packed two to a 32-bit word, as on adapters without `SHADER_F16`.
pub fn no_f16() -> bool {
    flag("LAZOR_NO_F16")
}

/// `LAZOR_NO_COOP=1`: f16 matmuls never run on cooperative matrices (tensor cores), only on the tiled kernel.
pub fn no_coop() -> bool {
    flag("LAZOR_NO_COOP")
}

/// `LAZOR_NO_SUBGROUPS=1`: generated kernels never use subgroup operations (the workgroup-memory path everywhere).
pub fn no_subgroups() -> bool {
    flag("LAZOR_NO_SUBGROUPS")
}

/// `LAZOR_SHADER_CHECKS=1`: every kernel gets wgpu's bounds checks on memory accesses, including the kinds whose
/// indices are in range by construction (matmul), which otherwise are compiled without them.
pub fn shader_checks() -> bool {
    flag("LAZOR_SHADER_CHECKS")
}

/// `LAZOR_MATMUL_TILE=bm,bn,bk,tm,tn`: every tiled matmul uses this blocking instead of the shape table (a tuning
/// knob: `docs/matmul.md` says how the table was tuned). Read once per process; an invalid value is ignored with a
/// warning. Valid: `tm` and `tn` in {4, 8}, `bm = 16 tm`, `bn = 16 tn`, `bk` in {4, 8, 16, 32}.
pub fn matmul_tile() -> Option<[u32; 5]> {
    static TILE: std::sync::OnceLock<Option<[u32; 5]>> = std::sync::OnceLock::new();
    *TILE.get_or_init(|| {
        let v = var("LAZOR_MATMUL_TILE")?;
        let n: Vec<u32> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
        let ok = |t: &[u32]| {
            matches!(t[3], 4 | 8) && matches!(t[4], 4 | 8) && t[0] == 16 * t[3] && t[1] == 16 * t[4] && matches!(t[2], 4 | 8 | 16 | 32)
        };
        match n[..] {
            [a, b, c, d, e] if ok(&n) => Some([a, b, c, d, e]),
            _ => {
                eprintln!("lazor: LAZOR_MATMUL_TILE={v}: expected bm,bn,bk,tm,tn with tm, tn in {{4, 8}}, bm = 16 tm, bn = 16 tn, bk in {{4, 8, 16, 32}}; ignored");
                None
            }
        }
    })
}

/// `LAZOR_QUEUE_DEPTH`: submits a wgpu device's submit thread keeps in flight (default 2; 0 holds every realize
/// until a read, `synchronize` or `flush`). A value that is not a non-negative integer is ignored with a warning.
pub fn queue_depth() -> Option<usize> {
    let v = var("LAZOR_QUEUE_DEPTH")?;
    let depth = v.trim().parse().ok();
    if depth.is_none() {
        eprintln!("lazor: LAZOR_QUEUE_DEPTH={v:?} is not a non-negative integer; using the default");
    }
    depth
}

/// `LAZOR_POOL_MB`: the most megabytes (2^20 bytes) of free buffers a device keeps for reuse, overriding the
/// budget derived from its memory (0 keeps none).
pub fn pool_budget() -> Option<u64> {
    var("LAZOR_POOL_MB").and_then(|v| v.trim().parse::<u64>().ok()).map(|mb| mb << 20)
}

/// `LAZOR_CACHE_DIR`: the pipeline cache directory when set (set and empty: no disk cache), else the user's cache
/// directory (`$XDG_CACHE_HOME/lazor`, `~/.cache/lazor`, or `%LOCALAPPDATA%\lazor` on Windows).
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(v) = std::env::var_os("LAZOR_CACHE_DIR") {
        return (!v.is_empty()).then(|| PathBuf::from(v));
    }
    let non_empty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if cfg!(windows) {
        return non_empty("LOCALAPPDATA").map(|d| d.join("lazor"));
    }
    non_empty("XDG_CACHE_HOME").or_else(|| non_empty("HOME").map(|h| h.join(".cache"))).map(|d| d.join("lazor"))
}

/// `LAZOR_VIZ`: a directory where every realize writes its graph as Graphviz DOT. Read once per process.
pub fn viz_dir() -> Option<&'static PathBuf> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| var("LAZOR_VIZ").map(PathBuf::from)).as_ref()
}

/// The host clock: std's `Instant` on native targets; in the browser, where std's panics, the same type over the
/// page's `performance.now()`.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) use std::time::Instant;
#[cfg(target_arch = "wasm32")]
pub(crate) use web_time::Instant;

/// `LAZOR_SPIRV`: which kernels take the Vulkan backend's SPIR-V path, where the device has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpirvMode {
    /// `0`: none; every kernel is WGSL compiled by wgpu.
    Off,
    /// The default (`1`): the kernels that gain by it (bf16 products on tensor cores, random numbers computed
    /// exactly).
    Hot,
    /// `all`: every kernel, for testing the path on any Vulkan adapter.
    All,
}

/// The mode `LAZOR_SPIRV` asks for; an unknown value is the default, with a warning. Read when a device opens.
pub fn spirv_mode() -> SpirvMode {
    match var("LAZOR_SPIRV").as_deref().map(str::trim) {
        None | Some("1") => SpirvMode::Hot,
        Some("0") => SpirvMode::Off,
        Some("all") => SpirvMode::All,
        Some(other) => {
            eprintln!("lazor: LAZOR_SPIRV={other:?} is not 0, 1 or all; using 1");
            SpirvMode::Hot
        }
    }
}
