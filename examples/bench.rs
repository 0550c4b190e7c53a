//! Elementwise throughput of lazor, fused and unfused, next to the device's own copy rates on the same adapter.
//! Prints markdown tables; `docs/BENCHMARKS.md` records what it printed.
//!
//! ```text
//! cargo run --release --example bench
//! ```
//!
//! Knobs (environment):
//! - `LAZOR_BENCH_RUNS` (default 20): timed runs per cell, after warm-up; tables show the median.
//! - `LAZOR_BENCH_BUDGET_MS` (default 3000): a cell stops early once it has spent this long and has 5 runs.
//! - `LAZOR_BENCH_BIG=1`: on a CPU adapter (lavapipe) also run 2^24 and 2^26 elements, skipped by default.
//! - `LAZOR_BENCH_MAX_LOG2`: largest size to run, as a power of two.
//! - `LAZOR_BACKEND`, `LAZOR_ADAPTER`: as for lazor itself.
//!
//! Every case reads three f32 inputs and writes one f32 output, so the fused ideal moves 16 bytes per element;
//! GB/s is those bytes (10^9 per second) over the median wall time of building the expression, `realize()` and
//! `synchronize()`. Copy rates count bytes read plus bytes written (8 per element). Each size runs on a fresh lazor
//! `Device`, so buffers pooled at one size do not crowd the pool at the next.

#[path = "../benches/common/mod.rs"]
mod common;

use common::{Case, IDEAL_BYTES_PER_ELEMENT};
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

fn env_num(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Deterministic inputs in [-1, 1).
fn inputs(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
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
/// 256 threads per workgroup, scalars read from the parameter buffer.
#[derive(Clone, Copy, Debug)]
enum RawOp {
    Chain3Scalar,
    Chain3Vec4,
    CopyVec4,
}

impl RawOp {
    fn wgsl(self) -> String {
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
            _ => 3,
        }
    }

    fn per_thread(self) -> usize {
        match self {
            RawOp::Chain3Scalar => 1,
            _ => 4,
        }
    }

    fn host(self, x: [f32; 3]) -> f32 {
        match self {
            RawOp::CopyVec4 => x[0],
            _ => Case::Chain3.host(x[0], x[1], x[2]),
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
        let params = [threads as u32, 5.0f32.to_bits(), 2.0f32.to_bits(), 0];
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
        RawKernel { pipeline, bind_group, groups: dispatch_size(threads, self.max_groups), buffers }
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
        for op in [RawOp::Chain3Scalar, RawOp::Chain3Vec4, RawOp::CopyVec4] {
            let k = self.kernel(op, n);
            for (j, h) in host.iter().take(op.inputs()).enumerate() {
                self.queue.write_buffer(&k.buffers[2 + j], 0, bytemuck::cast_slice(h));
            }
            self.dispatch(&k, 1);
            let (got, _) = self.read(&k.buffers[1], &self.staging(n as u64 * 4));
            for (i, g) in got.iter().enumerate() {
                let want = op.host([host[0][i], host[1][i], host[2][i]]);
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

fn main() -> ExitCode {
    let dev = match Device::new() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bench: no GPU adapter could be opened: {e}");
            return ExitCode::FAILURE;
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
    let cfg = Config {
        runs: env_num("LAZOR_BENCH_RUNS").unwrap_or(20).max(1) as usize,
        budget: Duration::from_millis(env_num("LAZOR_BENCH_BUDGET_MS").unwrap_or(3000)),
        sizes,
        batch: if cpu { 8 } else { 32 },
    };
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
        return ExitCode::FAILURE;
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
    ExitCode::SUCCESS
}
