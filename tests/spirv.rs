//! The Vulkan backend's SPIR-V path with every kernel sent through it (`LAZOR_SPIRV=all`): the same values as the
//! CPU backend, and profiles that say which path compiled each kernel. On lavapipe (CI) this is the passthrough
//! machinery itself (naga's SPIR-V, lazor's bind group layouts, the `NoContraction` edit); the bf16 tensor-core
//! edit needs an adapter with bf16 cooperative matrices (`LAZOR_TEST_TENSOR_CORES=1`, checked in tests/matmul.rs).

mod common;

use lazor::{DType, Device, Tensor};

/// Every kernel of this process takes the SPIR-V path: set before any device opens (each test file is a process).
fn all_spirv() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::env::set_var("LAZOR_SPIRV", "all"));
}

/// The wgpu device the run asks for (`LAZOR_TEST_BACKENDS`), whose SPIR-V path must be open where it is Vulkan.
fn gpu() -> Option<Device> {
    all_spirv();
    let dev = common::gpu_devices().into_iter().next()?;
    if dev.backend().eq_ignore_ascii_case("vulkan") {
        assert!(dev.wgpu().unwrap().spirv(), "a Vulkan device has the SPIR-V path");
    }
    Some(dev)
}

fn data(n: usize, seed: u64) -> Vec<f32> {
    common::Rng::new(seed).vec(n, -1.0, 1.0)
}

#[test]
fn fused_elementwise_reductions_and_products_match_the_cpu_backend_through_spirv() {
    let Some(dev) = gpu() else { return };
    let cpu = Device::cpu();
    let run = |d: &Device| {
        let a = Tensor::from_vec_on(data(300 * 70, 1), [300, 70], d);
        let b = Tensor::from_vec_on(data(70 * 130, 2), [70, 130], d);
        let bias = Tensor::from_vec_on(data(130, 3), [130], d);
        let y = (a.matmul(&b) + &bias).relu();
        let s = y.softmax(-1).sum(0);
        let e = (&a * 2.0 + 1.0).exp().mean_all();
        (y.to_vec(), s.to_vec(), e.to_vec())
    };
    let profile = dev.profile(|| run(&dev));
    let (g, c) = (run(&dev), run(&cpu));
    common::assert_close(&g.0, &c.0, 1e-4, 1e-5, "relu(a b + bias)");
    common::assert_close(&g.1, &c.1, 1e-4, 1e-5, "softmax sums");
    common::assert_close(&g.2, &c.2, 1e-4, 1e-5, "mean of exp");
    if dev.backend().eq_ignore_ascii_case("vulkan") {
        let names: Vec<&str> = profile.kernels().iter().map(|k| k.name.as_str()).collect();
        assert!(names.len() >= 3, "{names:?}");
        assert!(names.iter().all(|n| n.contains(" [spirv]")), "every kernel through SPIR-V: {names:?}");
        let fused = names.iter().filter(|n| n.starts_with("matmul+add+relu")).count();
        assert_eq!(fused, 1, "the product, its bias and its activation in one kernel: {names:?}");
    }
}

#[test]
fn random_numbers_through_spirv_are_the_cpu_backends_bits() {
    let Some(dev) = gpu() else { return };
    let cpu = Device::cpu();
    let w = dev.wgpu().unwrap();
    for int64 in [true, false] {
        w.set_int64(int64);
        for n in [1usize, 5, 4099] {
            let g = Tensor::rand_on([n], 7, &dev).to_vec();
            let c = Tensor::rand_on([n], 7, &cpu).to_vec();
            assert_eq!(g, c, "rand, n {n}, int64 {int64}");
            let g = Tensor::randn_on([n], 9, &dev).to_vec();
            let c = Tensor::randn_on([n], 9, &cpu).to_vec();
            for (i, (x, y)) in g.iter().zip(&c).enumerate() {
                let ulp = (x.to_bits() as i64 - y.to_bits() as i64).unsigned_abs();
                assert!(ulp <= 2, "randn[{i}] {x} vs {y} ({ulp} ulp), n {n}, int64 {int64}");
            }
        }
    }
    w.set_int64(true);
}

#[test]
fn half_precision_kernels_match_through_spirv() {
    let Some(dev) = gpu() else { return };
    let cpu = Device::cpu();
    for dt in [DType::F16, DType::BF16] {
        let run = |d: &Device| {
            let a = Tensor::from_vec_on(data(96 * 40, 4), [96, 40], d).to_dtype(dt);
            let b = Tensor::from_vec_on(data(40 * 72, 5), [40, 72], d).to_dtype(dt);
            (a.matmul(&b).gelu() * 0.5).to_dtype(DType::F32).to_vec()
        };
        common::assert_close(&run(&dev), &run(&cpu), 2e-2, 2e-2, &format!("{dt:?} gelu(a b) / 2"));
    }
}
