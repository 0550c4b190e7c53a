//! Elementwise throughput of lazor, fused and unfused, next to the device's own copy rates on the same adapter;
//! views and reductions; the CPU backend next to a hand-written rayon loop, lavapipe and ndarray.
//! Prints markdown tables; `docs/BENCHMARKS.md` records what it printed.
//!
//! ```text
//! cargo run --release --example bench                 # every section
//! cargo run --release --example bench -- views        # only the views section (or `elementwise`)
//! cargo run --release --example bench -- reductions   # only the reductions section
//! cargo run --release --example bench -- cpu          # only the CPU-backend section
//! cargo run --release --example bench -- matmul       # only the matmul section
//! cargo run --release --example bench -- dtypes       # only the element-type section
//! cargo run --release --example bench -- life         # only the process-life section (bench/life.rs)
//! ```
//!
//! The matmul section (in `bench/matmul.rs`) times the cases of `torch_reference.py matmul`: square products,
//! `relu(x.matmul(w) + bias)`, a transposed operand, matrix-vector products and a batch, on `Device::default()`.
//!
//! The views section times `a.t() + b` against `a + b` (square `[n, n]`, n = 4096 and 8192) and
//! `Tensor::cat(&[&a, &b], 0) * 2.0` against `a2 * 2.0` (2^24 and 2^26 elements), view and plain alternating run by
//! run on one device (`Device::default()`), batched and 1/sync; sizes over `max_tensor_bytes` are skipped with a
//! printed note.
//!
//! The reductions section times `x.sum_all()`, `(a * &b).sum_all()` (dot), `x.sum(-1)`, `x.sum(0)`,
//! `x.softmax(-1)` and a layer norm, fused and unfused, at the sizes of `../shared/bench/torch_reference.py`
//! (`reduce`, `softmax`) on one device, with the dispatches of one realize; on a CPU adapter at scaled-down sizes
//! (2^22 elements, `[2048, 1024]`).
//!
//! The CPU section runs chain3, chain16 and unary at 2^20 and 2^24 elements on `Device::cpu()`, fused, against a
//! hand-written rayon loop of the same math (timed alternately with lazor, run by run), the same graph on
//! `Device::new()` (lavapipe where there is no GPU; sizes it cannot bind skipped with a note), the expression in
//! ndarray, and lazor unfused; then `x.sum(-1)` and `x.softmax(-1)` of `[4096, 4096]` against ndarray.
//!
//! Knobs (environment):
//! - `LAZOR_BENCH_RUNS` (default 20): timed runs per cell, after warm-up; tables show the median.
//! - `LAZOR_BENCH_BUDGET_MS` (default 3000): a cell stops early once it has spent this long and has 5 runs.
//! - `LAZOR_BENCH_BIG=1`: on a CPU adapter (lavapipe) also run 2^24 and 2^26 elements, skipped by default.
//! - `LAZOR_BENCH_MAX_LOG2`: largest size to run, as a power of two (elementwise section).
//! - `LAZOR_BENCH_VIEW_LOG2` (default `24,26`): output elements of the view cases, comma-separated powers of two
//!   (transpose_add runs the even ones, as squares).
//! - `LAZOR_BENCH_REDUCE_SIZES` (`small` or `full`): the reductions' sizes; default `small` on a CPU adapter.
//! - `LAZOR_BENCH_CPU_LOG2` (default `20,24`): elements of the CPU section's elementwise cases, powers of two.
//! - `LAZOR_BACKEND`, `LAZOR_ADAPTER`: as for lazor itself.
//!
//! Every elementwise case reads three f32 inputs and writes one f32 output, so the fused ideal moves 16 bytes per
//! element; GB/s is those bytes (10^9 per second) over the median wall time of building the expression, `realize()`
//! and `synchronize()`. Copy rates count bytes read plus bytes written (8 per element). Each elementwise size runs on
//! a fresh lazor `Device`, so buffers pooled at one size do not crowd the pool at the next.

#[path = "../benches/common/mod.rs"]
mod common;
#[path = "bench/dtypes.rs"]
mod dtypes;
#[path = "bench/life.rs"]
mod life;
#[path = "bench/matmul.rs"]
mod matmul;

use common::{uniform, Case, ReduceCase, ViewCase, IDEAL_BYTES_PER_ELEMENT, REDUCE_TOLERANCE};
use lazor::{Device, Tensor};
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WARMUP: usize = 3;
/// Warm-up also lasts at least this long, so the GPU is busy (and clocked up) before timing starts.
const WARMUP_MIN: Duration = Duration::from_millis(200);
const MIN_RUNS: usize = 5;

struct Config {
    runs: usize,
    budget: Duration,
    sizes: Vec<usize>,
    /// Realizes, copies or dispatches per wait in the batched columns.
    batch: u32,
}

impl Config {
    /// Runs and budget from `LAZOR_BENCH_RUNS` and `LAZOR_BENCH_BUDGET_MS`.
    fn from_env(sizes: Vec<usize>, batch: u32) -> Config {
        Config {
            runs: env_num("LAZOR_BENCH_RUNS").unwrap_or(20).max(1) as usize,
            budget: Duration::from_millis(env_num("LAZOR_BENCH_BUDGET_MS").unwrap_or(3000)),
            sizes,
            batch,
        }
    }
}

fn env_num(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Deterministic inputs in [-1, 1).
fn inputs(n: usize, seed: u64) -> Vec<f32> {
    uniform(n, seed).into_iter().map(|x| x * 2.0 - 1.0).collect()
}

/// Median of timed runs, after warm-up (the first run compiles pipelines and allocates buffers).
#[derive(Clone, Copy)]
struct Timing {
    median: Duration,
    runs: usize,
}

impl Timing {
    fn per(self, k: u32) -> Timing {
        Timing { median: self.median / k, runs: self.runs }
    }
}

fn measure(cfg: &Config, mut f: impl FnMut()) -> Timing {
    measure_parts::<1>(cfg, || {
        let t = Instant::now();
        f();
        [t.elapsed()]
    })[0]
}

/// As [`measure`], for a closure that times `K` parts of its own work and returns them: medians per part.
fn measure_parts<const K: usize>(cfg: &Config, mut f: impl FnMut() -> [Duration; K]) -> [Timing; K] {
    let warm = Instant::now();
    let mut n = 0;
    while n < WARMUP || warm.elapsed() < WARMUP_MIN {
        f();
        n += 1;
    }
    let started = Instant::now();
    let mut times: Vec<[Duration; K]> = Vec::with_capacity(cfg.runs);
    while times.len() < cfg.runs && (times.len() < MIN_RUNS || started.elapsed() < cfg.budget) {
        times.push(f());
    }
    std::array::from_fn(|k| {
        let mut v: Vec<Duration> = times.iter().map(|t| t[k]).collect();
        v.sort();
        Timing { median: v[v.len() / 2], runs: v.len() }
    })
}

fn gbs(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

fn ms(t: Duration) -> String {
    format!("{:.3}", t.as_secs_f64() * 1e3)
}

fn size_name(n: usize) -> String {
    format!("2^{}", n.trailing_zeros())
}

// ---------------------------------------------------------------------------------------------------------------
// Raw wgpu on lazor's own device: the device's copy rates, and hand-written kernels next to lazor's codegen.
// ---------------------------------------------------------------------------------------------------------------

struct Raw {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    max_groups: u32,
}

/// lazor's own wgpu device, so copies and hand-written kernels run on exactly the device lazor measures.
fn open_raw(dev: &Device) -> Raw {
    let device = dev.wgpu_device().clone();
    let max_groups = device.limits().max_compute_workgroups_per_dimension;
    Raw { device, queue: dev.wgpu_queue().clone(), info: dev.adapter_info(), max_groups }
}

const HEADER: &str = "@group(0) @binding(0) var<storage, read> p: array<u32>;\n";
const MAIN: &str = "@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= p[0]) { return; }
";

/// Hand-written kernels. `Scalar3` has the shape of lazor's generated chain3 kernel: one element per thread,
/// 256 threads per workgroup, scalars read from the parameter buffer. The transpose kernels compute `a.t() + b` over
/// square `[n, n]` inputs (`n` in the parameter buffer): `Gather4` in the shape of lazor's vec4 kernel for it (4
/// output elements per thread, `a` read by 4 scalar loads, `b` and the output as `vec4`), `Tiled` through a 32x32
/// tile in workgroup memory, so both reads and the write are coalesced.
#[derive(Clone, Copy, Debug)]
enum RawOp {
    Chain3Scalar,
    Chain3Vec4,
    CopyVec4,
    TransposeAddGather4,
    TransposeAddTiled,
}

const TRANSPOSE_GATHER4: &str = "    let n = p[3];
    let e = i * 4u;
    let r = e / n;
    let c = e % n;
    let t = vec4<f32>(i0[c * n + r], i0[(c + 1u) * n + r], i0[(c + 2u) * n + r], i0[(c + 3u) * n + r]);
    o0[i] = t + i1[i];
}
";

const TRANSPOSE_TILED: &str = "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read_write> o0: array<f32>;
@group(0) @binding(2) var<storage, read> i0: array<f32>;
@group(0) @binding(3) var<storage, read> i1: array<f32>;
var<workgroup> tile: array<array<f32, 33>, 32>;
@compute @workgroup_size(32, 8)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {
    let n = p[3];
    let r0 = wg.y * 32u;
    let c0 = wg.x * 32u;
    for (var k = 0u; k < 32u; k += 8u) {
        tile[l.y + k][l.x] = i0[(c0 + l.y + k) * n + r0 + l.x];
    }
    workgroupBarrier();
    for (var k = 0u; k < 32u; k += 8u) {
        let o = (r0 + l.y + k) * n + c0 + l.x;
        o0[o] = tile[l.x][l.y + k] + i1[o];
    }
}
";

impl RawOp {
    fn wgsl(self) -> String {
        if let RawOp::TransposeAddTiled = self {
            return TRANSPOSE_TILED.to_string();
        }
        if let RawOp::TransposeAddGather4 = self {
            return HEADER.to_string()
                + "@group(0) @binding(1) var<storage, read_write> o0: array<vec4<f32>>;
\
                   @group(0) @binding(2) var<storage, read> i0: array<f32>;
\
                   @group(0) @binding(3) var<storage, read> i1: array<vec4<f32>>;
" + MAIN + TRANSPOSE_GATHER4;
        }
        let (ty, inputs, body) = match self {
            RawOp::Chain3Scalar => (
                "f32",
                3,
                "    let t0 = i0[i];\n    let t1 = i1[i];\n    let t2 = t0 + t1;\n    \
                 let t3 = bitcast<f32>(p[1]);\n    let t4 = t2 * t3;\n    let t5 = i2[i];\n    \
                 let t6 = t4 - t5;\n    let t7 = bitcast<f32>(p[2]);\n    let t8 = t6 / t7;\n    o0[i] = t8;\n",
            ),
            RawOp::Chain3Vec4 => {
                ("vec4<f32>", 3, "    o0[i] = ((i0[i] + i1[i]) * bitcast<f32>(p[1]) - i2[i]) / bitcast<f32>(p[2]);\n")
            }
            RawOp::CopyVec4 => ("vec4<f32>", 1, "    o0[i] = i0[i];\n"),
            RawOp::TransposeAddGather4 | RawOp::TransposeAddTiled => unreachable!("written out above"),
        };
        let mut s = HEADER.to_string();
        s += &format!("@group(0) @binding(1) var<storage, read_write> o0: array<{ty}>;\n");
        for k in 0..inputs {
            s += &format!("@group(0) @binding({}) var<storage, read> i{k}: array<{ty}>;\n", k + 2);
        }
        s + MAIN + body + "}\n"
    }

    fn inputs(self) -> usize {
        match self {
            RawOp::CopyVec4 => 1,
            RawOp::TransposeAddGather4 | RawOp::TransposeAddTiled => 2,
            _ => 3,
        }
    }

    fn per_thread(self) -> usize {
        match self {
            RawOp::Chain3Scalar => 1,
            _ => 4,
        }
    }

    /// Element `i` on the host, from the inputs `x` (of `x[0].len()` elements each).
    fn host(self, x: &[Vec<f32>], i: usize) -> f32 {
        match self {
            RawOp::CopyVec4 => x[0][i],
            RawOp::TransposeAddGather4 | RawOp::TransposeAddTiled => ViewCase::TransposeAdd.host_view(x, i),
            _ => Case::Chain3.host(x[0][i], x[1][i], x[2][i]),
        }
    }

    /// Workgroups for `n` output elements.
    fn groups(self, n: usize, max_per_dim: u32) -> (u32, u32) {
        match self {
            RawOp::TransposeAddTiled => {
                let side = ViewCase::TransposeAdd.side(n);
                assert!(side % 32 == 0, "the tiled transpose needs a multiple of 32, not {side}");
                ((side / 32) as u32, (side / 32) as u32)
            }
            _ => dispatch_size(n / self.per_thread(), max_per_dim),
        }
    }
}

struct RawKernel {
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    groups: (u32, u32),
    /// Parameters, output, inputs.
    buffers: Vec<wgpu::Buffer>,
}

impl Raw {
    fn buffer(&self, bytes: u64, label: &str) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    fn staging(&self, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("staging"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    fn wait(&self) {
        self.device.poll(wgpu::PollType::wait_indefinitely()).expect("wgpu poll");
    }

    /// `batch` copies of `src` into `dst` in one submit, then wait.
    fn copy(&self, src: &wgpu::Buffer, dst: &wgpu::Buffer, batch: u32) {
        let mut enc = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("copy") });
        for _ in 0..batch {
            enc.copy_buffer_to_buffer(src, 0, dst, 0, src.size());
        }
        self.queue.submit([enc.finish()]);
        self.wait();
    }

    /// `op` over `n` elements, with fresh buffers.
    fn kernel(&self, op: RawOp, n: usize) -> RawKernel {
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("raw"),
            source: wgpu::ShaderSource::Wgsl(op.wgsl().into()),
        });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("raw"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let threads = n / op.per_thread();
        // The side of a square of n elements, for the transpose kernels.
        let side = if ViewCase::TransposeAdd.valid(n) { ViewCase::TransposeAdd.side(n) } else { 0 };
        let params = [threads as u32, 5.0f32.to_bits(), 2.0f32.to_bits(), side as u32];
        let p = self.buffer(16, "params");
        self.queue.write_buffer(&p, 0, &params.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
        let mut buffers = vec![p];
        for _ in 0..1 + op.inputs() {
            buffers.push(self.buffer(n as u64 * 4, "raw"));
        }
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(b, buf)| wgpu::BindGroupEntry { binding: b as u32, resource: buf.as_entire_binding() })
            .collect();
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        RawKernel { pipeline, bind_group, groups: op.groups(n, self.max_groups), buffers }
    }

    /// `batch` dispatches of `k` in one compute pass and one submit, then wait.
    fn dispatch(&self, k: &RawKernel, batch: u32) {
        let mut enc = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("k") });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(&k.pipeline);
            pass.set_bind_group(0, &k.bind_group, &[]);
            for _ in 0..batch {
                pass.dispatch_workgroups(k.groups.0, k.groups.1, 1);
            }
        }
        self.queue.submit([enc.finish()]);
        self.wait();
    }

    /// Copies `src` into `staging`, maps it and copies it out as lazor's read-back does. Returns the values and the
    /// time of each step: copy + submit + wait, map + wait, copy out of the mapping.
    fn read(&self, src: &wgpu::Buffer, staging: &wgpu::Buffer) -> (Vec<f32>, [Duration; 3]) {
        let bytes = src.size();
        let t0 = Instant::now();
        let mut enc = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("read") });
        enc.copy_buffer_to_buffer(src, 0, staging, 0, bytes);
        self.queue.submit([enc.finish()]);
        self.wait();
        let t1 = Instant::now();
        let done = Arc::new(Mutex::new(None));
        let slot = done.clone();
        staging.map_async(wgpu::MapMode::Read, 0..bytes, move |r| *slot.lock().unwrap() = Some(r.is_ok()));
        self.wait();
        assert_eq!(*done.lock().unwrap(), Some(true), "map_async failed");
        let t2 = Instant::now();
        let values = {
            let view = staging.get_mapped_range(0..bytes).expect("mapped range");
            bytemuck::pod_collect_to_vec::<u8, f32>(&view)
        };
        staging.unmap();
        let t3 = Instant::now();
        (values, [t1 - t0, t2 - t1, t3 - t2])
    }

    /// Runs each kernel once on small data and compares with the host.
    fn check(&self) -> Result<(), String> {
        let n = 1 << 12;
        let host: Vec<Vec<f32>> = (1..=3).map(|s| inputs(n, s)).collect();
        let ops = [
            RawOp::Chain3Scalar,
            RawOp::Chain3Vec4,
            RawOp::CopyVec4,
            RawOp::TransposeAddGather4,
            RawOp::TransposeAddTiled,
        ];
        for op in ops {
            let k = self.kernel(op, n);
            for (j, h) in host.iter().take(op.inputs()).enumerate() {
                self.queue.write_buffer(&k.buffers[2 + j], 0, bytemuck::cast_slice(h));
            }
            self.dispatch(&k, 1);
            let (got, _) = self.read(&k.buffers[1], &self.staging(n as u64 * 4));
            for (i, g) in got.iter().enumerate() {
                let want = op.host(&host, i);
                if (g - want).abs() > 1e-5 * want.abs().max(1.0) {
                    return Err(format!("raw kernel {op:?}: element {i} is {g}, want {want}"));
                }
            }
        }
        Ok(())
    }
}

/// Workgroups of 256 for `threads` threads, folded into y past the per-dimension limit (as lazor does).
fn dispatch_size(threads: usize, max_per_dim: u32) -> (u32, u32) {
    let groups = threads.div_ceil(256) as u64;
    if groups <= max_per_dim as u64 {
        return (groups as u32, 1);
    }
    let y = groups.div_ceil(max_per_dim as u64);
    (groups.div_ceil(y) as u32, y as u32)
}

// ---------------------------------------------------------------------------------------------------------------

#[derive(Default)]
struct Row {
    resident: [Option<Timing>; 2],
    readback: [Option<Timing>; 2],
}

/// A single (1 per wait) and batched (`batch` per wait, time per unit) measurement.
#[derive(Clone, Copy)]
struct Pair {
    one: Timing,
    many: Timing,
}

struct SizeResult {
    n: usize,
    rows: Vec<(Case, Row)>,
    /// lazor chain3 fused: `batch` realizes (each output dropped at once), then one synchronize; per realize.
    chain3_pipelined: Timing,
    /// lazor chain3 fused: CPU time of building the expression and `realize()` returning (the wait not counted).
    chain3_cpu: Timing,
    copy: Pair,
    copy_kernel: Pair,
    chain3_scalar: Pair,
    chain3_vec4: Pair,
    /// Read-back of 4 bytes x n with a reused staging buffer: copy + wait, map + wait, copy out.
    read_reused: [Timing; 3],
    /// The same with a new staging buffer each time (what lazor does above 64 MiB): creating it, then as above.
    read_fresh: [Timing; 4],
}

impl SizeResult {
    fn chain3_fused(&self) -> Timing {
        self.rows[0].1.resident[0].expect("chain3 fused")
    }
}

fn check_correctness(dev: &Device) -> Result<(), String> {
    let n = 1 << 16;
    let (ha, hb, hc) = (inputs(n, 1), inputs(n, 2), inputs(n, 3));
    let a = Tensor::from_vec_on(ha.clone(), [n], dev);
    let b = Tensor::from_vec_on(hb.clone(), [n], dev);
    let c = Tensor::from_vec_on(hc.clone(), [n], dev);
    for case in Case::ALL {
        for fuse in [true, false] {
            dev.set_fusion(fuse);
            let got = case.build(&a, &b, &c).to_vec();
            dev.set_fusion(true);
            let mut worst = 0.0f32;
            for i in 0..n {
                let want = case.host(ha[i], hb[i], hc[i]);
                worst = worst.max((got[i] - want).abs() / want.abs().max(1.0));
            }
            if worst.is_nan() || worst > 1e-4 {
                return Err(format!("{} (fused: {fuse}) differs from the host by {worst:e}", case.name()));
            }
        }
    }
    Ok(())
}

/// Submits and dispatches of one chain3 realize, fused and unfused: `(submits, dispatches)` each.
fn chain3_counts(dev: &Device) -> [(u64, u64); 2] {
    let n = 1 << 10;
    let a = Tensor::from_vec_on(inputs(n, 1), [n], dev);
    let b = Tensor::from_vec_on(inputs(n, 2), [n], dev);
    let c = Tensor::from_vec_on(inputs(n, 3), [n], dev);
    lazor::realize(&[&a, &b, &c]).expect("upload");
    [true, false].map(|fuse| {
        dev.set_fusion(fuse);
        let before = dev.stats();
        Case::Chain3.build(&a, &b, &c).realize().expect("realize");
        dev.synchronize().expect("synchronize");
        let after = dev.stats();
        dev.set_fusion(true);
        (after.submits - before.submits, after.dispatches - before.dispatches)
    })
}

fn run_size(raw: &Raw, cfg: &Config, n: usize) -> SizeResult {
    let batch = cfg.batch;
    // A fresh device per size: lazor's pool keeps at most 1 GiB of free buffers and does not evict old ones, so
    // buffers left from another size would crowd out this size's intermediates (see docs/BENCHMARKS.md).
    let dev = Device::new().expect("device");
    let a = Tensor::from_vec_on(inputs(n, 1), [n], &dev);
    let b = Tensor::from_vec_on(inputs(n, 2), [n], &dev);
    let c = Tensor::from_vec_on(inputs(n, 3), [n], &dev);
    lazor::realize(&[&a, &b, &c]).expect("upload inputs");
    dev.synchronize().expect("synchronize");

    // All device-resident cells first: the read-back cells at large sizes keep the GPU idle for seconds, and the
    // cells measured right after them came out slower on the H200 (see docs/BENCHMARKS.md).
    let mut rows: Vec<(Case, Row)> = Case::ALL.iter().map(|&c| (c, Row::default())).collect();
    for readback in [false, true] {
        for (case, row) in rows.iter_mut() {
            let case = *case;
            for (k, fuse) in [true, false].into_iter().enumerate() {
                dev.set_fusion(fuse);
                let t = if readback {
                    measure(cfg, || {
                        black_box(case.build(&a, &b, &c).to_vec());
                    })
                } else {
                    measure(cfg, || {
                        let y = case.build(&a, &b, &c);
                        y.realize().expect("realize");
                        dev.synchronize().expect("synchronize");
                    })
                };
                if readback {
                    row.readback[k] = Some(t);
                } else {
                    row.resident[k] = Some(t);
                }
                dev.set_fusion(true);
            }
        }
        eprintln!("  {} {}: done", size_name(n), if readback { "read-back" } else { "device-resident" });
    }
    let [chain3_cpu] = measure_parts(cfg, || {
        let t = Instant::now();
        let y = Case::Chain3.build(&a, &b, &c);
        y.realize().expect("realize");
        let spent = t.elapsed();
        dev.synchronize().expect("synchronize");
        [spent]
    });
    let chain3_pipelined = measure(cfg, || {
        for _ in 0..batch {
            // Dropped at once: its buffer goes back to the pool and the next realize reuses it (in queue order).
            Case::Chain3.build(&a, &b, &c).realize().expect("realize");
        }
        dev.synchronize().expect("synchronize");
    })
    .per(batch);
    drop((a, b, c, dev));

    let bytes = n as u64 * 4;
    let (src, dst) = (raw.buffer(bytes, "copy src"), raw.buffer(bytes, "copy dst"));
    let copy = Pair {
        one: measure(cfg, || raw.copy(&src, &dst, 1)),
        many: measure(cfg, || raw.copy(&src, &dst, batch)).per(batch),
    };
    drop(dst);
    let staging = raw.staging(bytes);
    let read_reused = measure_parts(cfg, || raw.read(&src, &staging).1);
    drop(staging);
    let read_fresh = measure_parts(cfg, || {
        let t = Instant::now();
        let staging = raw.staging(bytes);
        let created = t.elapsed();
        let [a, b, c] = raw.read(&src, &staging).1;
        [created, a, b, c]
    });
    drop(src);
    let kernel = |op| {
        let k = raw.kernel(op, n);
        let one = measure(cfg, || raw.dispatch(&k, 1));
        let many = measure(cfg, || raw.dispatch(&k, batch)).per(batch);
        Pair { one, many }
    };
    let copy_kernel = kernel(RawOp::CopyVec4);
    let chain3_scalar = kernel(RawOp::Chain3Scalar);
    let chain3_vec4 = kernel(RawOp::Chain3Vec4);
    raw.wait();
    eprintln!("  {}: raw wgpu done", size_name(n));
    SizeResult {
        n,
        rows,
        chain3_pipelined,
        chain3_cpu,
        copy,
        copy_kernel,
        chain3_scalar,
        chain3_vec4,
        read_reused,
        read_fresh,
    }
}

fn print_lazor_table(results: &[SizeResult], title: &str, pick: impl Fn(&Row) -> [Option<Timing>; 2]) {
    println!("\n### {title}\n");
    println!("| case | elements | fused ms | fused GB/s | unfused ms | unfused GB/s | fused speedup | runs (f/u) |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for case in Case::ALL {
        for r in results {
            let row = &r.rows.iter().find(|(c, _)| *c == case).expect("case").1;
            let [Some(f), Some(u)] = pick(row) else {
                continue;
            };
            let bytes = r.n as u64 * IDEAL_BYTES_PER_ELEMENT;
            println!(
                "| {} | {} | {} | {:.1} | {} | {:.1} | {:.2}x | {}/{} |",
                case.name(),
                size_name(r.n),
                ms(f.median),
                gbs(bytes, f.median),
                ms(u.median),
                gbs(bytes, u.median),
                u.median.as_secs_f64() / f.median.as_secs_f64(),
                f.runs,
                u.runs
            );
        }
    }
}

/// The elementwise section: fused and unfused cases, copies, raw kernels, read-back. False on a failure.
fn elementwise() -> bool {
    let dev = match Device::new() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bench: no GPU adapter could be opened: {e}");
            return false;
        }
    };
    let raw = open_raw(&dev);
    let cpu = raw.info.device_type == wgpu::DeviceType::Cpu;
    let big = std::env::var("LAZOR_BENCH_BIG").is_ok_and(|v| v.trim() == "1");
    let max_log2 = env_num("LAZOR_BENCH_MAX_LOG2").unwrap_or(64);
    let mut sizes: Vec<usize> = vec![1 << 10, 1 << 16, 1 << 20, 1 << 24];
    if dev.max_tensor_bytes() >= 4 << 26 {
        sizes.push(1 << 26);
    }
    let keep = |n: usize| !(cpu && !big && n >= 1 << 24) && n.trailing_zeros() as u64 <= max_log2;
    let skipped: Vec<String> = sizes.iter().filter(|&&n| !keep(n)).map(|&n| size_name(n)).collect();
    sizes.retain(|&n| keep(n));
    let cfg = Config::from_env(sizes, if cpu { 8 } else { 32 });
    let batch = cfg.batch;

    println!("## lazor elementwise benchmark\n");
    println!(
        "- adapter: {} ({}, {:?}); raw wgpu baselines on: {} ({:?})",
        dev.adapter_name(),
        dev.backend(),
        raw.info.device_type,
        raw.info.name,
        raw.info.backend
    );
    println!("- driver: {} {}; max tensor bytes: {}", raw.info.driver, raw.info.driver_info, dev.max_tensor_bytes());
    println!(
        "- median of up to {} runs after at least {WARMUP} warm-up runs and {} ms (a cell stops after {} ms \
         once it has {MIN_RUNS}); GB/s = 10^9 bytes/s; batched columns: {batch} per wait",
        cfg.runs,
        WARMUP_MIN.as_millis(),
        cfg.budget.as_millis()
    );
    if !skipped.is_empty() {
        println!(
            "- skipped sizes: {} (CPU adapter without LAZOR_BENCH_BIG=1, or LAZOR_BENCH_MAX_LOG2)",
            skipped.join(", ")
        );
    }

    if let Err(e) = check_correctness(&dev).and_then(|()| raw.check()) {
        eprintln!("bench: wrong results: {e}");
        return false;
    }
    println!(
        "- correctness: all cases, fused and unfused, match the host within 1e-4 (relative) at 2^16; the raw \
         kernels match at 2^12"
    );
    let [(fs, fd), (us, ud)] = chain3_counts(&dev);
    let ok = fs == 1 && fd == 1 && us == 1;
    println!(
        "- dispatch/submit counts for one chain3 realize: fused {fs} submit, {fd} dispatch; unfused {us} submit, \
         {ud} dispatches{}",
        if ok { " (as expected)" } else { " (UNEXPECTED: fused should be 1 submit, 1 dispatch)" }
    );
    drop(dev);

    let mut results = Vec::new();
    for &n in &cfg.sizes {
        eprintln!("size {}", size_name(n));
        results.push(run_size(&raw, &cfg, n));
    }

    print_lazor_table(&results, "Device-resident: build, realize(), synchronize()", |r| r.resident);
    print_lazor_table(&results, "With read-back: build, to_vec()", |r| r.readback);

    println!("\n### chain3 fused vs the device's own copy\n");
    println!(
        "chain3: lazor, fused, device-resident (16 bytes/element). copy: `copy_buffer_to_buffer` (vkCmdCopyBuffer \
         on Vulkan) of 4 bytes x elements; kernel copy: a raw WGSL compute kernel, vec4 per thread. Both count \
         read + write (8 bytes/element). `1/submit` = one per submit, then wait (the method of lazor's rows); \
         `x{batch}` = {batch} in one submit, time per copy.\n"
    );
    println!(
        "| elements | chain3 fused GB/s | copy GB/s | copy x{batch} GB/s | kernel copy GB/s | kernel copy x{batch} \
         GB/s | chain3 / copy | chain3 / copy x{batch} | chain3 / kernel copy | chain3 / kernel copy x{batch} |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results {
        let cb = r.n as u64 * 8;
        let ch = gbs(r.n as u64 * IDEAL_BYTES_PER_ELEMENT, r.chain3_fused().median);
        let c = [r.copy.one, r.copy.many, r.copy_kernel.one, r.copy_kernel.many].map(|t| gbs(cb, t.median));
        println!(
            "| {} | {ch:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0}% | {:.0}% | {:.0}% | {:.0}% |",
            size_name(r.n),
            c[0],
            c[1],
            c[2],
            c[3],
            100.0 * ch / c[0],
            100.0 * ch / c[1],
            100.0 * ch / c[2],
            100.0 * ch / c[3]
        );
    }

    println!("\n### Where the time goes: chain3 in GB/s (16 bytes/element)\n");
    println!(
        "lazor 1/sync = the fused row above; lazor x{batch}/sync = {batch} realizes then one synchronize, per \
         realize; raw = hand-written WGSL on a raw wgpu device, `scalar` the same shape as lazor's generated kernel \
         (1 element per thread, 256 per workgroup, scalars from the parameter buffer), `vec4` 4 elements per \
         thread with 16-byte loads; `1/submit` = one dispatch per submit then wait, `x{batch}` = {batch} dispatches \
         in one pass, per dispatch.\n"
    );
    println!(
        "| elements | lazor 1/sync | lazor x{batch}/sync | raw scalar 1/submit | raw scalar x{batch} | raw vec4 \
         1/submit | raw vec4 x{batch} | lazor realize() CPU ms |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results {
        let b = r.n as u64 * IDEAL_BYTES_PER_ELEMENT;
        let t = [
            r.chain3_fused(),
            r.chain3_pipelined,
            r.chain3_scalar.one,
            r.chain3_scalar.many,
            r.chain3_vec4.one,
            r.chain3_vec4.many,
        ]
        .map(|t| gbs(b, t.median));
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            size_name(r.n),
            t[0],
            t[1],
            t[2],
            t[3],
            t[4],
            t[5],
            ms(r.chain3_cpu.median)
        );
    }
    println!(
        "\nMedian ms: lazor chain3 fused 1/sync, x{batch}/sync | copy 1/submit, x{batch} | kernel copy 1/submit, \
         x{batch} | raw scalar 1/submit, x{batch} | raw vec4 1/submit, x{batch}\n"
    );
    for r in &results {
        let t = |p: Pair| format!("{}, {}", ms(p.one.median), ms(p.many.median));
        println!(
            "- {}: {}, {} | {} | {} | {} | {}",
            size_name(r.n),
            ms(r.chain3_fused().median),
            ms(r.chain3_pipelined.median),
            t(r.copy),
            t(r.copy_kernel),
            t(r.chain3_scalar),
            t(r.chain3_vec4)
        );
    }

    println!("\n### Read-back of one output (4 bytes/element), raw wgpu, ms\n");
    println!(
        "Steps as in lazor's `to_vec`: copy into a MAP_READ staging buffer + submit + wait, `map_async` + wait, \
         copy out of the mapping into a new Vec. `fresh` creates the staging buffer each time (lazor does so above \
         64 MiB). Last column: lazor chain3 fused `to_vec` minus device-resident.\n"
    );
    println!(
        "| elements | copy+wait | map+wait | copy out | total | GB/s | fresh: create | fresh: copy+wait | fresh: \
         map+wait | fresh: copy out | fresh total | lazor to_vec - resident |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results {
        let reused: Duration = r.read_reused.iter().map(|t| t.median).sum();
        let fresh: Duration = r.read_fresh.iter().map(|t| t.median).sum();
        let lazor =
            r.rows[0].1.readback[0].expect("chain3").median.as_secs_f64() - r.chain3_fused().median.as_secs_f64();
        let f = |t: &[Timing]| t.iter().map(|t| ms(t.median)).collect::<Vec<_>>().join(" | ");
        println!(
            "| {} | {} | {} | {:.1} | {} | {} | {:.3} |",
            size_name(r.n),
            f(&r.read_reused),
            ms(reused),
            gbs(r.n as u64 * 4, reused),
            f(&r.read_fresh),
            ms(fresh),
            lazor * 1e3
        );
    }
    true
}

// ---------------------------------------------------------------------------------------------------------------
// Views: each view case against its plain twin of the same size, on one device for the whole section.
// ---------------------------------------------------------------------------------------------------------------

struct ViewResult {
    case: ViewCase,
    numel: usize,
    /// `batch` realizes then one synchronize, per realize: view, plain (interleaved run by run).
    many: [Timing; 2],
    /// realize then synchronize every time: view, plain (interleaved).
    one: [Timing; 2],
    /// Raw vec4 copy kernel of `numel` elements on the same device: 1/submit, `batch` per submit.
    copy_kernel: Pair,
    /// `transpose_add` only: hand-written `a.t() + b`, in lazor's vec4 gather shape and tiled.
    raw_transpose: Option<[Pair; 2]>,
    /// Submits and dispatches of one realize: view, plain.
    counts: [(u64, u64); 2],
}

/// Largest relative difference between `got` and the host's value of each element.
fn worst_error(got: &[f32], want: impl Fn(usize) -> f32) -> f32 {
    got.iter().enumerate().fold(0.0f32, |w, (i, g)| {
        let want = want(i);
        let e = (g - want).abs() / want.abs().max(1.0);
        if e.is_nan() || w.is_nan() {
            f32::NAN
        } else {
            w.max(e)
        }
    })
}

/// Host values of the inputs of `case` at `numel` output elements.
fn view_host_inputs(case: ViewCase, numel: usize) -> Vec<Vec<f32>> {
    case.input_shapes(numel).iter().enumerate().map(|(j, s)| inputs(s.iter().product(), 11 + j as u64)).collect()
}

/// Compares the view case and its twin at `numel` elements with the host, over inputs already on the device.
fn check_view(case: ViewCase, host: &[Vec<f32>], x: &[Tensor]) -> Result<(), String> {
    let view = case.build_view(x).try_to_vec().map_err(|e| e.to_string())?;
    let plain = case.build_plain(x).try_to_vec().map_err(|e| e.to_string())?;
    for (what, got, worst) in [
        ("view", &view, worst_error(&view, |i| case.host_view(host, i))),
        ("plain", &plain, worst_error(&plain, |i| case.host_plain(host, i))),
    ] {
        if worst.is_nan() || worst > 1e-6 {
            return Err(format!(
                "{} ({what}) at {} elements differs from the host by {worst:e}",
                case.name(),
                got.len()
            ));
        }
    }
    Ok(())
}

/// Inputs of `case` at `numel` output elements, on the default device (as `Tensor::from_vec` puts them), realized.
fn view_inputs(case: ViewCase, numel: usize, host: &[Vec<f32>]) -> Vec<Tensor> {
    let x: Vec<Tensor> =
        host.iter().zip(case.input_shapes(numel)).map(|(h, s)| Tensor::from_vec(h.clone(), s)).collect();
    lazor::realize(&x.iter().collect::<Vec<_>>()).expect("upload view inputs");
    x
}

fn run_view(dev: &Device, raw: &Raw, cfg: &Config, case: ViewCase, numel: usize) -> Result<ViewResult, String> {
    let batch = cfg.batch;
    let host = view_host_inputs(case, numel);
    let x = view_inputs(case, numel, &host);
    dev.synchronize().map_err(|e| e.to_string())?;
    // The kernels timed below, checked in full first.
    check_view(case, &host, &x)?;
    drop(host);
    let counts = [true, false].map(|view| {
        let before = dev.stats();
        let y = if view { case.build_view(&x) } else { case.build_plain(&x) };
        y.realize().expect("realize");
        dev.synchronize().expect("synchronize");
        let after = dev.stats();
        (after.submits - before.submits, after.dispatches - before.dispatches)
    });
    let run = |view: bool, k: u32| {
        let t = Instant::now();
        for _ in 0..k {
            // Dropped at once: its buffer goes back to the pool and the next realize reuses it (in queue order).
            let y = if view { case.build_view(&x) } else { case.build_plain(&x) };
            y.realize().expect("realize");
        }
        dev.synchronize().expect("synchronize");
        t.elapsed()
    };
    // View and plain alternate run by run, so drifts of clock or temperature reach both alike.
    let many = measure_parts(cfg, || [run(true, batch), run(false, batch)]).map(|t| t.per(batch));
    let one = measure_parts(cfg, || [run(true, 1), run(false, 1)]);
    drop(x);
    dev.synchronize().map_err(|e| e.to_string())?;
    let kernel = |op| {
        let k = raw.kernel(op, numel);
        Pair { one: measure(cfg, || raw.dispatch(&k, 1)), many: measure(cfg, || raw.dispatch(&k, batch)).per(batch) }
    };
    let copy_kernel = kernel(RawOp::CopyVec4);
    let raw_transpose = (case == ViewCase::TransposeAdd && ViewCase::TransposeAdd.side(numel) % 32 == 0)
        .then(|| [RawOp::TransposeAddGather4, RawOp::TransposeAddTiled].map(kernel));
    raw.wait();
    Ok(ViewResult { case, numel, many, one, copy_kernel, raw_transpose, counts })
}

/// Small sizes, below and above the vec4 threshold, aligned and not: every view path against the host.
fn check_views_small() -> Result<(), String> {
    for case in ViewCase::ALL {
        let sizes: &[usize] = match case {
            ViewCase::TransposeAdd => &[36 * 36, 100 * 100, 256 * 256, 1024 * 1024],
            ViewCase::Cat => &[2 * 1001, 1 << 12, 2 * 65_538, 1 << 17, 1 << 20],
        };
        for &numel in sizes {
            let host = view_host_inputs(case, numel);
            check_view(case, &host, &view_inputs(case, numel, &host))?;
        }
    }
    Ok(())
}

/// The views section. False on a failure.
fn views() -> bool {
    // The way a user runs: the process-wide default device, for every case and size, one after another.
    let dev = Device::default();
    if dev.is_cpu() {
        println!(
            "\n## lazor views benchmark\n\n- skipped: the default device is {}, lazor's CPU backend, and this \
             section needs a wgpu device for its raw kernels (LAZOR_BACKEND=vulkan picks a software Vulkan adapter)",
            dev.name()
        );
        return true;
    }
    let raw = open_raw(&dev);
    let cpu = raw.info.device_type == wgpu::DeviceType::Cpu;
    let log2s: Vec<u32> = match std::env::var("LAZOR_BENCH_VIEW_LOG2") {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => ViewCase::DEFAULT_LOG2.to_vec(),
    };
    let cfg = Config::from_env(Vec::new(), if cpu { 8 } else { 32 });
    let batch = cfg.batch;

    println!("\n## lazor views benchmark\n");
    println!(
        "- adapter: {} ({}, {:?}); driver: {} {}; max tensor bytes: {}; one device (`Device::default()`) for the \
         whole section",
        dev.adapter_name(),
        dev.backend(),
        raw.info.device_type,
        raw.info.driver,
        raw.info.driver_info,
        dev.max_tensor_bytes()
    );
    println!(
        "- median of up to {} runs after at least {WARMUP} warm-up runs and {} ms (a cell stops after {} ms once it \
         has {MIN_RUNS}); view and plain alternate run by run; x{batch}/sync = {batch} realizes then one \
         synchronize, per realize; 1/sync = realize then synchronize; GB/s = 10^9 bytes/s of the ideal kernel \
         (transpose_add 12 bytes/element, cat 8, kernel copy 8)",
        cfg.runs,
        WARMUP_MIN.as_millis(),
        cfg.budget.as_millis()
    );
    if let Err(e) = check_views_small().and_then(|()| raw.check()) {
        eprintln!("bench: wrong results: {e}");
        return false;
    }
    println!(
        "- correctness: view and plain match the host within 1e-6 (relative) at small sizes (transpose_add 36^2, \
         100^2, 256^2, 1024^2; cat 2002, 2^12, 131076, 2^17, 2^20) and in full at every timed size before timing; \
         the raw kernels match at 2^12"
    );

    let mut results = Vec::new();
    for case in ViewCase::ALL {
        for &k in &log2s {
            let Some(numel) = 1usize.checked_shl(k) else {
                println!("- skipped {} at 2^{k}: too large", case.name());
                continue;
            };
            if !case.valid(numel) {
                println!("- skipped {} at 2^{k}: not a valid size (transpose_add needs a square)", case.name());
                continue;
            }
            let bytes = numel as u64 * 4;
            if bytes > dev.max_tensor_bytes() {
                let label = case.size_label(numel);
                let label = if label == format!("2^{k}") { label } else { format!("{label} (2^{k} elements)") };
                println!(
                    "- skipped {} at {label}: its {bytes}-byte tensors exceed this device's max_tensor_bytes ({})",
                    case.name(),
                    dev.max_tensor_bytes()
                );
                continue;
            }
            eprintln!("views: {} {}", case.name(), case.size_label(numel));
            match run_view(&dev, &raw, &cfg, case, numel) {
                Ok(r) => results.push(r),
                Err(e) => {
                    eprintln!("bench: wrong results: {e}");
                    return false;
                }
            }
        }
    }

    println!("\n### Views vs plain, device-resident\n");
    println!(
        "view / plain = plain time / view time (the view's bytes/s as a share of the plain twin's). kernel copy: a \
         raw WGSL vec4 copy of as many elements on the same device.\n"
    );
    println!(
        "| case | size | view | plain | view x{batch} ms | GB/s | plain x{batch} ms | GB/s | view / plain x{batch} | \
         view 1/sync ms | GB/s | plain 1/sync ms | GB/s | view / plain 1/sync | kernel copy x{batch} GB/s | \
         kernel copy 1/submit GB/s | dispatches view/plain | runs x{batch}; 1/sync |"
    );
    println!("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results {
        let bytes = r.numel as u64 * r.case.bytes_per_element();
        let copy = r.numel as u64 * 8;
        println!(
            "| {} | {} | `{}` | `{}` | {} | {:.1} | {} | {:.1} | {:.0}% | {} | {:.1} | {} | {:.1} | {:.0}% | {:.1} | \
             {:.1} | {}/{} | {}; {} |",
            r.case.name(),
            r.case.size_label(r.numel),
            r.case.view_name(),
            r.case.plain_name(),
            ms(r.many[0].median),
            gbs(bytes, r.many[0].median),
            ms(r.many[1].median),
            gbs(bytes, r.many[1].median),
            100.0 * r.many[1].median.as_secs_f64() / r.many[0].median.as_secs_f64(),
            ms(r.one[0].median),
            gbs(bytes, r.one[0].median),
            ms(r.one[1].median),
            gbs(bytes, r.one[1].median),
            100.0 * r.one[1].median.as_secs_f64() / r.one[0].median.as_secs_f64(),
            gbs(copy, r.copy_kernel.many.median),
            gbs(copy, r.copy_kernel.one.median),
            r.counts[0].1,
            r.counts[1].1,
            r.many[0].runs,
            r.one[0].runs
        );
    }
    let transposes: Vec<&ViewResult> = results.iter().filter(|r| r.raw_transpose.is_some()).collect();
    if !transposes.is_empty() {
        println!("\n### transpose_add: lazor next to hand-written kernels, GB/s (12 bytes/element)\n");
        println!(
            "raw gather4: WGSL in the shape of lazor's vec4 kernel (4 outputs per thread, `a` by 4 scalar loads down a \
             column, `b` and the output as vec4); raw tiled: a 32x32 tile of `a` through workgroup memory (32x8 \
             threads, 4 outputs each), so every global access is coalesced. `1` = 1/sync (lazor) or 1/submit (raw).\n"
        );
        println!(
            "| size | lazor view x{batch} | raw gather4 x{batch} | raw tiled x{batch} | lazor plain x{batch} | lazor view 1 \
             | raw gather4 1 | raw tiled 1 | lazor view / raw gather4 x{batch} | lazor view / raw tiled x{batch} | raw \
             tiled / lazor plain x{batch} |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in transposes {
            let b = r.numel as u64 * 12;
            let [g, t] = r.raw_transpose.expect("raw transpose");
            let x = [r.many[0], g.many, t.many, r.many[1], r.one[0], g.one, t.one].map(|t| gbs(b, t.median));
            println!(
                "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0}% | {:.0}% | {:.0}% |",
                r.case.size_label(r.numel),
                x[0],
                x[1],
                x[2],
                x[3],
                x[4],
                x[5],
                x[6],
                100.0 * x[0] / x[1],
                100.0 * x[0] / x[2],
                100.0 * x[2] / x[3]
            );
        }
    }
    let odd: Vec<String> = results
        .iter()
        .filter(|r| r.counts.iter().any(|&c| c != (1, 1)))
        .map(|r| format!("{} {}: {:?}", r.case.name(), r.case.size_label(r.numel), r.counts))
        .collect();
    if odd.is_empty() {
        println!("\n- every realize above: 1 submit, 1 dispatch (as expected)");
    } else {
        println!("\n- UNEXPECTED (submits, dispatches) per realize, view then plain: {}", odd.join("; "));
    }
    true
}

// ---------------------------------------------------------------------------------------------------------------
// Reductions: fused and unfused, on one device for the whole section.
// ---------------------------------------------------------------------------------------------------------------

/// The acceptance targets of the reductions issue, from PyTorch figures the issue quotes (the same script's figures
/// in the same device call are the ones to compare with; docs/BENCHMARKS.md does): case, shape, share of the
/// PyTorch rate, that rate (GB/s), where it comes from.
const REDUCE_TARGETS: [(ReduceCase, &[usize], f64, f64, &str); 5] = [
    (ReduceCase::Dot, &[1 << 26], 0.85, 4120.0, "85% of torch.compile (eager 2076)"),
    (ReduceCase::SumRows, &[16384, 4096], 0.85, 3923.0, "85% of eager"),
    (ReduceCase::SumCols, &[16384, 4096], 0.85, 3556.0, "85% of eager"),
    (ReduceCase::Softmax, &[4096, 4096], 1.0, 2930.0, "100% of torch.compile (eager 2369)"),
    (ReduceCase::LayerNorm, &[4096, 4096], 0.85, 3747.0, "85% of torch.compile"),
];

struct ReduceResult {
    case: ReduceCase,
    shape: Vec<usize>,
    /// `batch` realizes then one synchronize, per realize: fused, unfused.
    many: [Timing; 2],
    /// realize then synchronize every time: fused, unfused.
    one: [Timing; 2],
    /// Raw vec4 copy kernel of as many elements on the same device (8 bytes/element): 1/submit, `batch` per submit;
    /// none on lazor's CPU backend.
    copy_kernel: Option<Pair>,
    /// Submits and dispatches of one realize: fused, unfused.
    counts: [(u64, u64); 2],
    /// Submits per realize in a fused x`batch` run: below 1 where realizes made while the GPU was busy were
    /// batched into one submit.
    submits: f64,
    /// Largest relative error against the host: fused, unfused.
    errors: [f64; 2],
}

impl ReduceResult {
    fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    fn gbs(&self, t: Timing) -> f64 {
        gbs(self.numel() as u64 * self.case.bytes_per_element(), t.median)
    }
}

fn run_reduce(
    dev: &Device,
    raw: Option<&Raw>,
    cfg: &Config,
    case: ReduceCase,
    shape: &[usize],
) -> Result<ReduceResult, String> {
    let batch = cfg.batch;
    let numel: usize = shape.iter().product();
    let host: Vec<Vec<f32>> = (0..case.inputs()).map(|j| uniform(numel, 21 + j as u64)).collect();
    let want = case.host(&host, shape);
    // As a user's program does: `Tensor::from_vec` onto the default device, realized before anything is timed.
    let x: Vec<Tensor> = host.into_iter().map(|h| Tensor::from_vec(h, shape.to_vec())).collect();
    lazor::realize(&x.iter().collect::<Vec<_>>()).map_err(|e| e.to_string())?;
    dev.synchronize().map_err(|e| e.to_string())?;
    // The kernels timed below, checked in full first, fused and unfused.
    let mut errors = [0.0; 2];
    for (k, fuse) in [true, false].into_iter().enumerate() {
        dev.set_fusion(fuse);
        let got = case.build(&x).try_to_vec();
        dev.set_fusion(true);
        let got = got.map_err(|e| e.to_string())?;
        errors[k] = ReduceCase::worst_error(&got, &want);
        if errors[k].is_nan() || errors[k] > REDUCE_TOLERANCE {
            return Err(format!(
                "{} {} (fused: {fuse}) differs from the host by {:e} (relative; allowed {REDUCE_TOLERANCE:e})",
                case.name(),
                ReduceCase::shape_label(shape),
                errors[k]
            ));
        }
    }
    drop(want);
    let counts = [true, false].map(|fuse| {
        dev.set_fusion(fuse);
        let before = dev.stats();
        case.build(&x).realize().expect("realize");
        dev.synchronize().expect("synchronize");
        let after = dev.stats();
        dev.set_fusion(true);
        (after.submits - before.submits, after.dispatches - before.dispatches)
    });
    let run = |k: u32| {
        for _ in 0..k {
            // Dropped at once: its buffer goes back to the pool and the next realize reuses it (in queue order).
            case.build(&x).realize().expect("realize");
        }
        dev.synchronize().expect("synchronize");
    };
    let mut many = [None; 2];
    let mut one = [None; 2];
    let mut submits = 0.0;
    for (k, fuse) in [true, false].into_iter().enumerate() {
        dev.set_fusion(fuse);
        many[k] = Some(measure(cfg, || run(batch)).per(batch));
        if fuse {
            // Realizes made while the GPU is busy share submits: how many, in one more timed-like run.
            let before = dev.stats().submits;
            run(batch);
            submits = (dev.stats().submits - before) as f64 / batch as f64;
        }
        one[k] = Some(measure(cfg, || run(1)));
        dev.set_fusion(true);
    }
    drop(x);
    dev.synchronize().map_err(|e| e.to_string())?;
    let copy_kernel = raw.map(|raw| {
        let k = raw.kernel(RawOp::CopyVec4, numel);
        let one = measure(cfg, || raw.dispatch(&k, 1));
        let many = measure(cfg, || raw.dispatch(&k, batch)).per(batch);
        drop(k);
        raw.wait();
        Pair { one, many }
    });
    Ok(ReduceResult {
        case,
        shape: shape.to_vec(),
        many: many.map(|t| t.expect("timed")),
        one: one.map(|t| t.expect("timed")),
        copy_kernel,
        counts,
        submits,
        errors,
    })
}

/// The reductions section. False on a failure.
fn reductions() -> bool {
    // The way a user runs: the process-wide default device, for every case and size, one after another.
    let dev = Device::default();
    // The raw copy kernel needs a wgpu device; lazor's CPU backend (the default where no hardware GPU exists) has none.
    let raw = (!dev.is_cpu()).then(|| open_raw(&dev));
    let cpu = raw.as_ref().is_none_or(|r| r.info.device_type == wgpu::DeviceType::Cpu);
    let small = match std::env::var("LAZOR_BENCH_REDUCE_SIZES").as_deref().map(str::trim) {
        Ok("small") => true,
        Ok("full") => false,
        _ => cpu,
    };
    let cfg = Config::from_env(Vec::new(), if cpu { 8 } else { 32 });
    let batch = cfg.batch;

    println!("\n## lazor reductions benchmark\n");
    let adapter = match &raw {
        Some(r) => format!(
            "{} ({:?}, {:?}); driver: {} {}",
            r.info.name, r.info.backend, r.info.device_type, r.info.driver, r.info.driver_info
        ),
        None => format!("{}, lazor's CPU backend (LAZOR_BACKEND=vulkan picks a software Vulkan adapter)", dev.name()),
    };
    println!(
        "- device: {adapter}; max tensor bytes: {}; one device (`Device::default()`) for the whole section",
        dev.max_tensor_bytes()
    );
    println!(
        "- sizes: {}",
        if small {
            "scaled down (CPU adapter or LAZOR_BENCH_REDUCE_SIZES=small): 2^22 elements, [2048, 1024]"
        } else {
            "those of torch_reference.py (reduce, softmax); the first of each case is the one its target names"
        }
    );
    println!(
        "- median of up to {} runs after at least {WARMUP} warm-up runs and {} ms (a cell stops after {} ms once it \
         has {MIN_RUNS}); x{batch}/sync = {batch} realizes then one synchronize, per realize; 1/sync = realize then \
         synchronize; unfused = `dev.set_fusion(false)` (= LAZOR_NOFUSE=1); GB/s = 10^9 bytes/s of the ideal kernel \
         (inputs read once, a full-size output written once; unfused rows count the same bytes); inputs uniform in \
         [0, 1)",
        cfg.runs,
        WARMUP_MIN.as_millis(),
        cfg.budget.as_millis()
    );
    if let Some(Err(e)) = raw.as_ref().map(Raw::check) {
        eprintln!("bench: wrong results: {e}");
        return false;
    }

    let mut results = Vec::new();
    for case in ReduceCase::ALL {
        for shape in if small { case.small_shapes() } else { case.shapes() } {
            let label = ReduceCase::shape_label(&shape);
            let bytes = shape.iter().product::<usize>() as u64 * 4;
            if bytes > dev.max_tensor_bytes() {
                println!(
                    "- skipped {} at {label}: its {bytes}-byte tensors exceed this device's max_tensor_bytes ({})",
                    case.name(),
                    dev.max_tensor_bytes()
                );
                continue;
            }
            eprintln!("reductions: {} {label}", case.name());
            match run_reduce(&dev, raw.as_ref(), &cfg, case, &shape) {
                Ok(r) => results.push(r),
                Err(e) => {
                    eprintln!("bench: wrong results: {e}");
                    return false;
                }
            }
        }
    }
    let worst = results.iter().flat_map(|r| r.errors).fold(0.0f64, f64::max);
    println!(
        "- correctness: every timed case and size, fused and unfused, matches an f64 host computation in full before \
         timing (worst relative error {worst:.1e}, allowed {REDUCE_TOLERANCE:e}; sums relative to the sum of \
         absolute terms)"
    );

    println!("\n### Reductions, device-resident\n");
    println!("fused / unfused = unfused time / fused time. kernel copy: a raw WGSL vec4 copy of as many elements.\n");
    println!(
        "| case | expression | shape | bytes/element | fused x{batch} ms | GB/s | fused 1/sync ms | GB/s | unfused \
         x{batch} ms | GB/s | unfused 1/sync ms | GB/s | fused / unfused x{batch} | dispatches fused/unfused | \
         submits per realize, fused x{batch} | kernel copy x{batch} GB/s | runs x{batch}; 1/sync |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results {
        let copy =
            r.copy_kernel.map_or("-".to_string(), |k| format!("{:.1}", gbs(r.numel() as u64 * 8, k.many.median)));
        println!(
            "| {} | `{}` | {} | {} | {} | {:.1} | {} | {:.1} | {} | {:.1} | {} | {:.1} | {:.2}x | {}/{} | {:.2} | \
             {copy} | {}; {} |",
            r.case.name(),
            r.case.expr(),
            ReduceCase::shape_label(&r.shape),
            r.case.bytes_per_element(),
            ms(r.many[0].median),
            r.gbs(r.many[0]),
            ms(r.one[0].median),
            r.gbs(r.one[0]),
            ms(r.many[1].median),
            r.gbs(r.many[1]),
            ms(r.one[1].median),
            r.gbs(r.one[1]),
            r.many[1].median.as_secs_f64() / r.many[0].median.as_secs_f64(),
            r.counts[0].1,
            r.counts[1].1,
            r.submits,
            r.many[0].runs,
            r.one[0].runs
        );
    }
    let odd: Vec<String> = results
        .iter()
        .filter(|r| r.counts.iter().any(|&(s, _)| s != 1))
        .map(|r| format!("{} {}: {:?}", r.case.name(), ReduceCase::shape_label(&r.shape), r.counts))
        .collect();
    if odd.is_empty() {
        println!("\n- every realize above: 1 submit");
    } else {
        println!("\n- UNEXPECTED (submits, dispatches) per realize, fused then unfused: {}", odd.join("; "));
    }

    let targeted: Vec<_> = REDUCE_TARGETS
        .iter()
        .filter_map(|&(case, shape, share, torch, what)| {
            results.iter().find(|r| r.case == case && r.shape == shape).map(|r| (r, share, torch, what))
        })
        .collect();
    if !targeted.is_empty() && !cpu {
        println!("\n### Against the issue's targets (PyTorch figures quoted in the issue)\n");
        println!(
            "lazor fused x{batch}/sync against the target rate; PyTorch's figures from the same device call are the \
             ones to compare with (`torch_reference.py reduce softmax`).\n"
        );
        println!("| case | shape | lazor x{batch} GB/s | target | target GB/s | lazor / target | met? |");
        println!("|---|---|---:|---|---:|---:|---|");
        for (r, share, torch, what) in targeted {
            let got = r.gbs(r.many[0]);
            let target = share * torch;
            println!(
                "| {} | {} | {got:.1} | {what} ({torch:.0}) | {target:.1} | {:.0}% | {} |",
                r.case.name(),
                ReduceCase::shape_label(&r.shape),
                100.0 * got / target,
                if got >= target { "yes" } else { "no" }
            );
        }
    }
    true
}

// ---------------------------------------------------------------------------------------------------------------
// The CPU backend against a hand-written rayon loop, lavapipe, ndarray and itself unfused, in one process.
// ---------------------------------------------------------------------------------------------------------------

/// One elementwise case at one size on the CPU backend and its yardsticks, each a median per call.
struct CpuRow {
    case: Case,
    n: usize,
    /// lazor on `Device::cpu()`, fused, and the hand-written rayon loop, timed alternately run by run.
    lazor: Timing,
    rayon: Timing,
    ndarray: Timing,
    unfused: Timing,
    /// The same graph on `Device::new()` (lavapipe here), fused; none where it cannot bind the tensors.
    wgpu: Option<Timing>,
    /// Dispatches of one realize on the CPU backend: fused, unfused.
    dispatches: [u64; 2],
    /// Largest relative error against the host: lazor fused, unfused, rayon, ndarray, wgpu (0 when not run).
    errors: [f32; 5],
}

impl CpuRow {
    fn gbs(&self, t: Timing) -> f64 {
        gbs(self.n as u64 * IDEAL_BYTES_PER_ELEMENT, t.median)
    }
}

/// `x.sum(-1)` or `x.softmax(-1)` on the CPU backend against ndarray.
struct CpuReduceRow {
    case: ReduceCase,
    shape: Vec<usize>,
    /// lazor fused and ndarray, timed alternately run by run.
    lazor: Timing,
    ndarray: Timing,
    unfused: Timing,
    dispatches: [u64; 2],
    /// Largest relative error against the f64 host: lazor fused, unfused, ndarray.
    errors: [f64; 3],
}

/// Dispatches of one realize of `y()` on `dev`, fused then unfused.
fn cpu_dispatches(dev: &Device, y: impl Fn() -> Tensor) -> [u64; 2] {
    [true, false].map(|fuse| {
        dev.set_fusion(fuse);
        let before = dev.stats().dispatches;
        y().realize().expect("realize");
        dev.synchronize().expect("synchronize");
        dev.set_fusion(true);
        dev.stats().dispatches - before
    })
}

/// The largest error of `got` against `want`, relative to `max(|want|, 1)`; NaN if any value is NaN.
fn rel_error(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "result lengths differ");
    got.iter().zip(want).fold(0.0f32, |w, (&g, &v)| {
        let e = (g - v).abs() / v.abs().max(1.0);
        if e.is_nan() || w.is_nan() {
            f32::NAN
        } else {
            w.max(e)
        }
    })
}

fn run_cpu_case(cpu: &Device, gpu: Option<&Device>, cfg: &Config, case: Case, n: usize) -> Result<CpuRow, String> {
    let host: Vec<Vec<f32>> = (1..=3).map(|s| inputs(n, s)).collect();
    let want: Vec<f32> = (0..n).map(|i| case.host(host[0][i], host[1][i], host[2][i])).collect();
    let on = |dev: &Device| -> Vec<Tensor> {
        let x: Vec<Tensor> = host.iter().map(|h| Tensor::from_vec_on(h.clone(), [n], dev)).collect();
        lazor::realize(&x.iter().collect::<Vec<_>>()).expect("upload inputs");
        dev.synchronize().expect("synchronize");
        x
    };
    let x = on(cpu);
    let nd: Vec<ndarray::Array1<f32>> = host.iter().map(|h| ndarray::Array1::from_vec(h.clone())).collect();
    let mut out = vec![0.0f32; n];

    // Every result checked in full against the host before anything is timed.
    let mut errors = [0.0f32; 5];
    for (k, fuse) in [true, false].into_iter().enumerate() {
        cpu.set_fusion(fuse);
        let got = case.build(&x[0], &x[1], &x[2]).try_to_vec();
        cpu.set_fusion(true);
        errors[k] = rel_error(&got.map_err(|e| e.to_string())?, &want);
    }
    case.rayon_into(&host[0], &host[1], &host[2], &mut out);
    errors[2] = rel_error(&out, &want);
    errors[3] = rel_error(case.ndarray(&nd[0], &nd[1], &nd[2]).as_slice().expect("contiguous"), &want);
    let g = gpu.map(on);
    if let (Some(gpu), Some(g)) = (gpu, &g) {
        let got = case.build(&g[0], &g[1], &g[2]).try_to_vec().map_err(|e| e.to_string())?;
        gpu.synchronize().map_err(|e| e.to_string())?;
        errors[4] = rel_error(&got, &want);
    }
    drop(want);
    let names = ["lazor CPU fused", "lazor CPU unfused", "rayon loop", "ndarray", "wgpu"];
    if let Some(k) = errors.iter().position(|e| e.is_nan() || *e > 1e-4) {
        return Err(format!("{} {}: {} differs from the host by {:e}", case.name(), size_name(n), names[k], errors[k]));
    }
    let dispatches = cpu_dispatches(cpu, || case.build(&x[0], &x[1], &x[2]));

    let realize = |dev: &Device, x: &[Tensor]| {
        // Built, realized, and dropped at once: its buffer goes back to the pool for the next run.
        case.build(&x[0], &x[1], &x[2]).realize().expect("realize");
        dev.synchronize().expect("synchronize");
    };
    let [lazor, rayon] = measure_parts(cfg, || {
        let t = Instant::now();
        realize(cpu, &x);
        let l = t.elapsed();
        let t = Instant::now();
        case.rayon_into(&host[0], &host[1], &host[2], &mut out);
        black_box(&mut out);
        [l, t.elapsed()]
    });
    let ndarray = measure(cfg, || {
        black_box(case.ndarray(&nd[0], &nd[1], &nd[2]));
    });
    cpu.set_fusion(false);
    let unfused = measure(cfg, || realize(cpu, &x));
    cpu.set_fusion(true);
    drop((x, nd, out, host));
    let wgpu = gpu.zip(g).map(|(gpu, g)| measure(cfg, || realize(gpu, &g)));
    Ok(CpuRow { case, n, lazor, rayon, ndarray, unfused, wgpu, dispatches, errors })
}

fn run_cpu_reduce(cpu: &Device, cfg: &Config, case: ReduceCase, shape: &[usize]) -> Result<CpuReduceRow, String> {
    let (rows, cols) = (shape[0], shape[1]);
    let h = uniform(rows * cols, 21);
    let want = case.host(std::slice::from_ref(&h), shape);
    let nd = ndarray::Array2::from_shape_vec((rows, cols), h.clone()).expect("shape");
    let x = [Tensor::from_vec_on(h, shape.to_vec(), cpu)];
    x[0].realize().map_err(|e| e.to_string())?;
    let nd_run = || -> Vec<f32> {
        match case {
            ReduceCase::SumRows => common::ndarray_sum_rows(&nd).into_raw_vec_and_offset().0,
            ReduceCase::Softmax => common::ndarray_softmax(&nd).into_raw_vec_and_offset().0,
            _ => unreachable!("the CPU section runs sum(-1) and softmax(-1)"),
        }
    };
    let mut errors = [0.0; 3];
    for (k, fuse) in [true, false].into_iter().enumerate() {
        cpu.set_fusion(fuse);
        let got = case.build(&x).try_to_vec();
        cpu.set_fusion(true);
        errors[k] = ReduceCase::worst_error(&got.map_err(|e| e.to_string())?, &want);
    }
    errors[2] = ReduceCase::worst_error(&nd_run(), &want);
    drop(want);
    let names = ["lazor CPU fused", "lazor CPU unfused", "ndarray"];
    if let Some(k) = errors.iter().position(|e| e.is_nan() || *e > REDUCE_TOLERANCE) {
        return Err(format!(
            "{} {}: {} differs from the host by {:e} (allowed {REDUCE_TOLERANCE:e})",
            case.name(),
            ReduceCase::shape_label(shape),
            names[k],
            errors[k]
        ));
    }
    let dispatches = cpu_dispatches(cpu, || case.build(&x));
    let realize = || {
        case.build(&x).realize().expect("realize");
        cpu.synchronize().expect("synchronize");
    };
    let [lazor, ndarray] = measure_parts(cfg, || {
        let t = Instant::now();
        realize();
        let l = t.elapsed();
        let t = Instant::now();
        black_box(nd_run());
        [l, t.elapsed()]
    });
    cpu.set_fusion(false);
    let unfused = measure(cfg, realize);
    cpu.set_fusion(true);
    Ok(CpuReduceRow { case, shape: shape.to_vec(), lazor, ndarray, unfused, dispatches, errors })
}

fn met(ok: bool) -> &'static str {
    if ok {
        "**yes**"
    } else {
        "**no**"
    }
}

/// The CPU-backend section. False on a failure.
fn cpu() -> bool {
    let sizes = std::env::var("LAZOR_BENCH_CPU_LOG2")
        .unwrap_or_else(|_| "20,24".into())
        .split(',')
        .filter_map(|s| s.trim().parse::<u32>().ok())
        .map(|k| 1usize << k)
        .collect();
    let cfg = Config::from_env(sizes, 1);
    // One CPU device for the whole section, as a program has; inputs realized on it before anything is timed.
    let cpu = Device::cpu();
    let gpu = match Device::new() {
        Ok(d) => Some(d),
        Err(e) => {
            println!("- no wgpu adapter ({e}): the lavapipe column is left out");
            None
        }
    };
    println!("\n## lazor CPU backend benchmark\n");
    println!(
        "- lazor: `Device::cpu()`, {}; rayon's pool: {} threads (shared with the hand-written loop); {} logical CPUs",
        cpu.name(),
        rayon::current_num_threads(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if let Some(g) = &gpu {
        let info = g.adapter_info();
        println!(
            "- wgpu: `Device::new()`: {} ({:?}, {:?}; driver {} {}); max tensor bytes {}",
            info.name,
            info.backend,
            info.device_type,
            info.driver,
            info.driver_info,
            g.max_tensor_bytes()
        );
    }
    println!(
        "- per run: lazor builds the expression over realized inputs, `realize()`, `synchronize()` (output dropped, \
         its buffer pooled); rayon: `par_chunks_mut({})` over a reused output, inputs as `Vec<f32>`; ndarray: the \
         expression on `Array1<f32>` (single-threaded, a new array per op on borrowed operands); unfused: \
         `set_fusion(false)`. lazor and the rayon loop (and lazor and ndarray for the reductions) alternate run by \
         run.",
        common::RAYON_CHUNK
    );
    println!(
        "- median of up to {} runs after at least {WARMUP} warm-up runs and {} ms (a cell stops after {} ms once it \
         has {MIN_RUNS}); GB/s = 10^9 bytes/s of the ideal kernel: 16 bytes/element elementwise, 4 for `sum(-1)`, 8 \
         for softmax, every column counted the same",
        cfg.runs,
        WARMUP_MIN.as_millis(),
        cfg.budget.as_millis()
    );

    let mut rows = Vec::new();
    for &n in &cfg.sizes {
        let gpu = gpu.as_ref().filter(|g| {
            let fits = g.max_tensor_bytes() >= n as u64 * 4;
            if !fits {
                println!(
                    "- skipped the wgpu column at {}: its {}-byte tensors exceed max_tensor_bytes ({})",
                    size_name(n),
                    n * 4,
                    g.max_tensor_bytes()
                );
            }
            fits
        });
        for case in Case::ALL {
            eprintln!("cpu: {} {}", case.name(), size_name(n));
            match run_cpu_case(&cpu, gpu, &cfg, case, n) {
                Ok(r) => rows.push(r),
                Err(e) => {
                    eprintln!("bench: wrong results: {e}");
                    return false;
                }
            }
        }
    }
    let mut reduce_rows = Vec::new();
    for case in [ReduceCase::SumRows, ReduceCase::Softmax] {
        eprintln!("cpu: {} 4096x4096", case.name());
        match run_cpu_reduce(&cpu, &cfg, case, &[4096, 4096]) {
            Ok(r) => reduce_rows.push(r),
            Err(e) => {
                eprintln!("bench: wrong results: {e}");
                return false;
            }
        }
    }
    let worst = rows.iter().flat_map(|r| r.errors).fold(0.0f32, f32::max);
    let worst_reduce = reduce_rows.iter().flat_map(|r| r.errors).fold(0.0f64, f64::max);
    println!(
        "- correctness: every result of every timed case and size (lazor fused and unfused, rayon, ndarray, wgpu) \
         matches the host in full before timing: elementwise worst {worst:.1e} (relative to max(|v|, 1); allowed \
         1e-4), reductions worst {worst_reduce:.1e} against f64 (allowed {REDUCE_TOLERANCE:e})"
    );

    println!("\n### Elementwise on the CPU backend, device-resident\n");
    println!(
        "| case | elements | lazor CPU ms | GB/s | rayon loop ms | GB/s | ndarray ms | GB/s | lavapipe ms | GB/s | \
         lazor CPU unfused ms | GB/s | dispatches f/u | runs |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let wgpu = r.wgpu.map_or("- | -".to_string(), |t| format!("{} | {:.1}", ms(t.median), r.gbs(t)));
        println!(
            "| {} | {} | {} | {:.1} | {} | {:.1} | {} | {:.1} | {wgpu} | {} | {:.1} | {}/{} | {} |",
            r.case.name(),
            size_name(r.n),
            ms(r.lazor.median),
            r.gbs(r.lazor),
            ms(r.rayon.median),
            r.gbs(r.rayon),
            ms(r.ndarray.median),
            r.gbs(r.ndarray),
            ms(r.unfused.median),
            r.gbs(r.unfused),
            r.dispatches[0],
            r.dispatches[1],
            r.lazor.runs
        );
    }

    println!("\n### Against the targets\n");
    println!(
        "lazor / rayon = rayon time / lazor time (target >= 70%); lavapipe / lazor = lavapipe time / lazor time \
         (target >= 3x); ndarray / lazor (target > 1x: lazor faster); fused speedup = unfused / fused time.\n"
    );
    println!(
        "| case | elements | lazor / rayon | >= 70%? | lavapipe / lazor CPU | >= 3x? | ndarray / lazor | faster? | fused \
         speedup |"
    );
    println!("|---|---:|---:|---|---:|---|---:|---|---:|");
    let ratio = |a: Timing, b: Timing| a.median.as_secs_f64() / b.median.as_secs_f64();
    for r in &rows {
        let vs_rayon = ratio(r.rayon, r.lazor);
        let (vs_wgpu, wgpu_met) = match r.wgpu {
            Some(t) => (format!("{:.2}x", ratio(t, r.lazor)), met(ratio(t, r.lazor) >= 3.0)),
            None => ("-".into(), "not run"),
        };
        let vs_nd = ratio(r.ndarray, r.lazor);
        println!(
            "| {} | {} | {:.0}% | {} | {vs_wgpu} | {wgpu_met} | {vs_nd:.2}x | {} | {:.2}x |",
            r.case.name(),
            size_name(r.n),
            100.0 * vs_rayon,
            met(vs_rayon >= 0.7),
            met(vs_nd > 1.0),
            ratio(r.unfused, r.lazor)
        );
    }

    println!("\n### Reductions on the CPU backend, [4096, 4096]\n");
    println!(
        "ndarray: `x.sum_axis(Axis(1))`; softmax: max by `fold_axis`, `(x - &max.insert_axis(Axis(1))).mapv(f32::exp)`, \
         divided by its `sum_axis(Axis(1)).insert_axis(Axis(1))`.\n"
    );
    println!(
        "| case | lazor CPU ms | GB/s | ndarray ms | GB/s | ndarray / lazor | faster? | lazor CPU unfused ms | GB/s | \
         dispatches f/u | runs |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|");
    for r in &reduce_rows {
        let bytes = r.shape.iter().product::<usize>() as u64 * r.case.bytes_per_element();
        println!(
            "| `{}` | {} | {:.1} | {} | {:.1} | {:.2}x | {} | {} | {:.1} | {}/{} | {} |",
            r.case.expr(),
            ms(r.lazor.median),
            gbs(bytes, r.lazor.median),
            ms(r.ndarray.median),
            gbs(bytes, r.ndarray.median),
            ratio(r.ndarray, r.lazor),
            met(ratio(r.ndarray, r.lazor) > 1.0),
            ms(r.unfused.median),
            gbs(bytes, r.unfused.median),
            r.dispatches[0],
            r.dispatches[1],
            r.lazor.runs
        );
    }
    true
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    // One cell of the process-life section, run in a fresh process by that section.
    if args.first().is_some_and(|a| a == "life-compile") {
        life::compile_child();
        return ExitCode::SUCCESS;
    }
    if let [mode, case, n] = &args[..] {
        if mode == "life-cell" {
            life::child(case, n.parse().expect("a size"));
            return ExitCode::SUCCESS;
        }
    }
    const SECTIONS: [&str; 7] = ["elementwise", "views", "reductions", "cpu", "matmul", "dtypes", "life"];
    if let Some(a) = args.iter().find(|a| !SECTIONS.contains(&a.as_str())) {
        eprintln!("bench: unknown section {a:?}; usage: bench [elementwise] [views] [reductions] [cpu] [matmul] [dtypes] [life] (default: all)");
        return ExitCode::FAILURE;
    }
    let wanted = |s: &str| args.is_empty() || args.iter().any(|a| a == s);
    if wanted("elementwise") && !elementwise() {
        return ExitCode::FAILURE;
    }
    if wanted("views") && !views() {
        return ExitCode::FAILURE;
    }
    if wanted("reductions") && !reductions() {
        return ExitCode::FAILURE;
    }
    if wanted("cpu") && !cpu() {
        return ExitCode::FAILURE;
    }
    if wanted("matmul") {
        // The way a user runs: the process-wide default device, every case one after another.
        let dev = Device::default();
        let small = dev.is_cpu() || dev.adapter_info().device_type == wgpu::DeviceType::Cpu;
        let cfg = Config::from_env(Vec::new(), if small { 2 } else { 8 });
        if !matmul::run(&dev, &cfg, small) {
            return ExitCode::FAILURE;
        }
    }
    if wanted("dtypes") {
        let dev = Device::default();
        let small = dev.is_cpu() || dev.adapter_info().device_type == wgpu::DeviceType::Cpu;
        let cfg = Config::from_env(Vec::new(), if small { 2 } else { 8 });
        let (log2, mm): (&[u32], usize) = if small { (&[20], 256) } else { (&[24, 26], 4096) };
        if !dtypes::run(&dev, &cfg, log2, mm) {
            return ExitCode::FAILURE;
        }
    }
    if wanted("life") {
        let dev = Device::default();
        let small = dev.is_cpu() || dev.adapter_info().device_type == wgpu::DeviceType::Cpu;
        let cfg = Config::from_env(Vec::new(), 8);
        if !life::run(&dev, &cfg, small) {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
