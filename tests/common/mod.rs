//! Shared test helpers: a real device (never skipped), deterministic random data, and reference comparison.
#![allow(dead_code)]

use lazor::op::BinaryOp;
use lazor::{DType, Device, Tensor};

/// `op(a, b)` through the user-facing API.
pub fn apply_binary(a: &Tensor, b: &Tensor, op: BinaryOp) -> Tensor {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Rem => a % b,
        BinaryOp::Max => a.maximum(b),
        BinaryOp::Min => a.minimum(b),
        BinaryOp::And => a & b,
        BinaryOp::Or => a | b,
        BinaryOp::Xor => a ^ b,
        BinaryOp::Lt => a.lt(b),
        BinaryOp::Le => a.le(b),
        BinaryOp::Gt => a.gt(b),
        BinaryOp::Ge => a.ge(b),
        BinaryOp::Eq => a.eq(b),
        BinaryOp::Ne => a.ne(b),
        BinaryOp::Pow => a.pow(b),
    }
}

/// Fresh devices, one per backend a test runs on, so each test reads its own counters: the CPU backend always,
/// and a wgpu device when one opens. `LAZOR_TEST_BACKENDS` (e.g. `cpu,vulkan`, as `.ci/run` sets it) names the
/// backends a run must cover: one that does not open fails the test, it is never skipped.
pub fn devices() -> Vec<Device> {
    let wanted = std::env::var("LAZOR_TEST_BACKENDS").unwrap_or_default().to_ascii_lowercase();
    if wanted.trim().is_empty() {
        let mut devs = vec![Device::cpu()];
        match Device::new() {
            Ok(d) => devs.push(d),
            Err(e) => eprintln!("no wgpu adapter, testing the CPU backend only: {e}"),
        }
        return devs;
    }
    wanted
        .split(',')
        .map(|name| match name.trim() {
            "cpu" => Device::cpu(),
            name => {
                let dev = Device::new().unwrap_or_else(|e| {
                    panic!(
                        "LAZOR_TEST_BACKENDS asks for {name} but no wgpu adapter opens (on Linux without a GPU: \
                         apt-get install mesa-vulkan-drivers): {e}"
                    )
                });
                assert!(
                    dev.backend().eq_ignore_ascii_case(name) || name == "wgpu",
                    "LAZOR_TEST_BACKENDS asks for {name}, got {}",
                    dev.name()
                );
                dev
            }
        })
        .collect()
}

/// The devices of [`devices`] that run on wgpu, for tests of what only a GPU has (pipelines, subgroups).
pub fn gpu_devices() -> Vec<Device> {
    devices().into_iter().filter(|d| !d.is_cpu()).collect()
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }
    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Whether `got` matches `want` to `rel` relative / `abs` absolute tolerance, NaN matching NaN and infinities
/// matching exactly.
pub fn close(got: f32, want: f32, rel: f32, abs: f32) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return want == got;
    }
    (got - want).abs() <= abs + rel * want.abs()
}

/// Asserts elementwise closeness, naming the first mismatch.
#[track_caller]
pub fn assert_close(got: &[f32], want: &[f32], rel: f32, abs: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(close(g, w, rel, abs), "{what}: element {i}: got {g}, want {w}");
    }
}

/// Computes `t` on the CPU reference, then on the device, and compares: floats to the tolerance, integers and
/// bools exactly. Returns the device's values as f32.
///
/// Check an expression before anything realizes it: a realized tensor is a buffer, and the reference reads its
/// values back from the device, a check that cannot fail. To check tensors realized together (counting their
/// dispatches), take their reference values first with [`expect`] and compare with [`check_with`].
#[track_caller]
pub fn check(t: &Tensor, rel: f32, abs: f32, what: &str) -> Vec<f32> {
    let want = lazor::reference::eval_lanes(&[t]).pop().unwrap();
    check_with(t, &want, rel, abs, what)
}

/// The reference's values of `ts` (as lanes of their types), taken before anything realizes them, for
/// [`check_with`].
pub fn expect(ts: &[&Tensor]) -> Vec<Vec<u32>> {
    assert!(ts.iter().all(|t| !t.is_realized()), "expect: a realized tensor's reference is its own buffer");
    lazor::reference::eval_lanes(ts)
}

/// [`check`] of `t` against the reference's values `want`, from [`expect`].
#[track_caller]
pub fn check_with(t: &Tensor, want: &[u32], rel: f32, abs: f32, what: &str) -> Vec<f32> {
    let want = want.to_vec();
    let got = lazor::reference::device_lanes(t);
    let dt = t.dtype();
    let as_f32 =
        |lanes: &[u32]| -> Vec<f32> { lanes.iter().map(|&l| f32::from_bits(DType::F32.cast_lane(dt, l))).collect() };
    if dt.is_float() {
        assert_close(&as_f32(&got), &as_f32(&want), rel, abs, &format!("{what} ({dt})"));
    } else {
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{what} ({dt}): element {i}: got {g:#x}, want {w:#x}");
        }
        assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    }
    as_f32(&got)
}

/// Values uniform in `[-bound, bound)` of shape `dims`, and the tensor holding them on `dev`, realized.
pub fn stored_within(dev: &Device, rng: &mut Rng, dims: &[usize], bound: f32) -> (Vec<f32>, Tensor) {
    let v = rng.vec(dims.iter().product(), -bound, bound);
    let t = Tensor::from_slice_on(&v, dims, dev);
    t.realize().unwrap();
    (v, t)
}

/// Kernels dispatched on `dev` while `f` runs.
pub fn kernels(dev: &Device, f: impl FnOnce()) -> u64 {
    let s = dev.stats().dispatches;
    f();
    dev.stats().dispatches - s
}
