//! Raw wgpu on lazor's own device: buffer copies, read-back steps and hand-written WGSL reference kernels.

use crate::common::{Case, ViewCase};
use crate::timing::{inputs, measure, Config, Pair};
use lazor::Device;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// lazor's own wgpu device and queue, for copies and hand-written kernels beside what lazor runs.
pub struct Raw {
    device: wgpu::Device,
    queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    max_groups: u32,
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
pub enum RawOp {
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

/// The FMA ceiling: each thread runs 64 independent chains of fused multiply-adds on registers (16 `vec4`s, the
/// tiled matmul's 8 x 8 accumulators), written out one statement each (a loop over an array of accumulators was
/// left rolled by NVIDIA's compiler, which then kept the array in memory: 1.3 TFLOP/s), with operands from the
/// parameter buffer so nothing folds, and no memory traffic but one store per thread at the end. `p[0]` is the
/// number of rounds of 4 x 64 FMAs.
fn fma_peak() -> String {
    use std::fmt::Write;
    let mut s = String::from(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read_write> o0: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let m = vec4<f32>(bitcast<f32>(p[1]));
    let c = vec4<f32>(bitcast<f32>(p[2]));
",
    );
    for j in 0..16 {
        let _ = writeln!(s, "    var a{j} = vec4<f32>(f32(gid.x + {j}u));");
    }
    s += "    for (var i = 0u; i < p[0]; i++) {\n";
    for _ in 0..4 {
        for j in 0..16 {
            let _ = writeln!(s, "        a{j} = fma(a{j}, m, c);");
        }
    }
    s += "    }\n    let t = ";
    s += &(0..16).map(|j| format!("a{j}")).collect::<Vec<_>>().join(" + ");
    s + ";\n    o0[gid.x] = t.x + t.y + t.z + t.w;\n}\n"
}

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
    /// lazor's own wgpu device, so copies and hand-written kernels run on exactly the device lazor measures.
    pub fn open(dev: &Device) -> Raw {
        let device = dev.wgpu().expect("a wgpu device").device().clone();
        let max_groups = device.limits().max_compute_workgroups_per_dimension;
        Raw { device, queue: dev.wgpu().expect("a wgpu device").queue().clone(), info: dev.adapter_info(), max_groups }
    }

    pub fn buffer(&self, bytes: u64, label: &str) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    pub fn staging(&self, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("staging"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    pub fn wait(&self) {
        self.device.poll(wgpu::PollType::wait_indefinitely()).expect("wgpu poll");
    }

    /// `batch` copies of `src` into `dst` in one submit, then wait.
    pub fn copy(&self, src: &wgpu::Buffer, dst: &wgpu::Buffer, batch: u32) {
        let mut enc = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("copy") });
        for _ in 0..batch {
            enc.copy_buffer_to_buffer(src, 0, dst, 0, src.size());
        }
        self.queue.submit([enc.finish()]);
        self.wait();
    }

    /// A compute pipeline of WGSL `src`, entry point `main`, its layout derived from the shader.
    fn pipeline(&self, label: &str, src: String) -> wgpu::ComputePipeline {
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(label),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        });
        self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(label),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        })
    }

    /// `op` over `n` elements, with fresh buffers.
    fn kernel(&self, op: RawOp, n: usize) -> RawKernel {
        let pipeline = self.pipeline("raw", op.wgsl());
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
    pub fn read(&self, src: &wgpu::Buffer, staging: &wgpu::Buffer) -> (Vec<f32>, [Duration; 3]) {
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

    /// `op` over `n` elements, with fresh buffers: one dispatch per submit, then `cfg.batch` (time per dispatch).
    pub fn time(&self, cfg: &Config, op: RawOp, n: usize) -> Pair {
        let k = self.kernel(op, n);
        let one = measure(cfg, || self.dispatch(&k, 1));
        let many = measure(cfg, || self.dispatch(&k, cfg.batch)).per(cfg.batch);
        Pair { one, many }
    }

    /// The FMA rate (TFLOP/s, 2 per FMA) of [`fma_peak`] over `groups` workgroups of 256 threads: what this
    /// device's shader compiler makes of register FMAs from WGSL, the ceiling for a matmul kernel's inner loop.
    pub fn fma_rate(&self, cfg: &Config, groups: u32, rounds: u32) -> f64 {
        let pipeline = self.pipeline("fma peak", fma_peak());
        let p = self.buffer(16, "params");
        let params = [rounds, 0.999f32.to_bits(), 1e-3f32.to_bits(), 0];
        self.queue.write_buffer(&p, 0, bytemuck::cast_slice(&params));
        let out = self.buffer(groups as u64 * 256 * 4, "fma out");
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: p.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: out.as_entire_binding() },
            ],
        });
        let k = RawKernel { pipeline, bind_group, groups: (groups, 1), buffers: vec![p, out] };
        let t = measure(cfg, || self.dispatch(&k, cfg.batch)).per(cfg.batch);
        2.0 * 256.0 * 64.0 * 4.0 * f64::from(groups) * f64::from(rounds) / t.median.as_secs_f64() / 1e12
    }

    /// Runs each kernel once on small data and compares with the host.
    pub fn check(&self) -> Result<(), String> {
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
