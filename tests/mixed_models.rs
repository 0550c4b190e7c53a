//! Models of several types: `Var::set_dtype` and `Module::to_dtype` (values, gradients, buffers given back, a model
//! stepped after the cast), and safetensors checkpoints of mixed models keeping each tensor's type. On every
//! backend.

mod common;

use common::{assert_close, devices};
use lazor::nn::{self, Module};
use lazor::optim::{AdamW, AdamWConfig};
use lazor::{DType, Device, Tensor, Var};

/// The values of a float tensor of any type, as f32.
fn values(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).to_vec()
}

fn mlp(dev: &Device, seed: u64) -> nn::Sequential {
    nn::Sequential::new(vec![
        Box::new(nn::Linear::new_on(6, 8, true, seed, dev)),
        Box::new(nn::LayerNorm::new_on(8, 1e-5, dev)),
        Box::new(nn::relu),
        Box::new(nn::Linear::new_on(8, 3, true, seed + 1, dev)),
    ])
}

#[test]
fn set_dtype_casts_a_var_in_place() {
    for dev in devices() {
        let w = Var::new(Tensor::from_slice_on(&[1.5f32, -2.25, 1.0 / 3.0], [3], &dev));
        let clone = w.clone();
        w.set_dtype(DType::BF16);
        assert_eq!((w.dtype(), clone.dtype(), w.tensor().dtype()), (DType::BF16, DType::BF16, DType::BF16));
        let third = half::bf16::from_f32(1.0 / 3.0).to_f32();
        assert_eq!(values(&w), vec![1.5, -2.25, third], "{}", dev.name());
        // Its gradients take the new type; `set` takes values of it.
        let g = (w.tensor() * 2.0).sum_all().backward();
        assert_eq!(g[&w].dtype(), DType::BF16);
        w.set(w.tensor() * 2.0);
        assert_eq!(values(&w), vec![3.0, -4.5, 2.0 * third]);
        assert!(w.try_set(Tensor::zeros_on([3], &dev)).is_err(), "an f32 value is not the Var's type any more");
        // And back, through the type's old node.
        w.set_dtype(DType::F32);
        assert_eq!((w.dtype(), values(&w)), (DType::F32, vec![3.0, -4.5, 2.0 * third]));
        // A lazy result built before keeps the value it read.
        let before = w.tensor() + 1.0;
        w.set_dtype(DType::F16);
        assert_eq!(values(&before), vec![4.0, -3.5, 2.0 * third + 1.0]);
        assert_eq!(w.dtype(), DType::F16);
    }
}

#[test]
fn to_dtype_casts_every_float_parameter_and_gives_the_old_buffers_back() {
    for dev in devices() {
        let model = mlp(&dev, 1);
        let x = Tensor::rand_on([4, 6], 2, &dev);
        let want = model.forward(&x).to_vec();
        let before = model.vars().iter().map(|v| values(v)).collect::<Vec<_>>();
        dev.synchronize().unwrap();
        let live = dev.stats().live_buffer_bytes;
        let realizes = dev.stats().realizes;
        model.to_dtype(DType::BF16);
        dev.synchronize().unwrap();
        assert_eq!(dev.stats().realizes - realizes, 1, "{}: the casts in one realize", dev.name());
        // Each parameter's f32 buffer given back for one of half its size: exactly so on the CPU backend (whole
        // 4-byte words), where a GPU's pool may hand out a larger free buffer, at least no growth.
        let after = dev.stats().live_buffer_bytes;
        if dev.is_cpu() {
            let saved: usize = model.vars().iter().map(|v| 4 * v.numel() - (2 * v.numel()).next_multiple_of(4)).sum();
            assert_eq!(live - after, saved as u64, "{}: bytes given back", dev.name());
        } else {
            assert!(after <= live, "{}: {after} live bytes after the cast, {live} before", dev.name());
        }
        for ((name, v), old) in model.parameters().iter().zip(&before) {
            assert_eq!(v.dtype(), DType::BF16, "{name}");
            let rounded: Vec<f32> = old.iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect();
            assert_eq!(values(v), rounded, "{}: {name}", dev.name());
        }
        // Pure-bf16 inference, close to the f32 model's.
        let y = model.forward(&x.to_dtype(DType::BF16));
        assert_eq!(y.dtype(), DType::BF16);
        assert_close(&values(&y), &want, 5e-2, 5e-2, &format!("{}: bf16 inference", dev.name()));
        // It trains in its new type.
        let mut opt = AdamW::new(&model.vars(), AdamWConfig { lr: 1e-2, ..Default::default() });
        let labels = Tensor::from_vec_on(vec![0i32, 1, 2, 1], [4], &dev);
        let loss = model.forward(&x.to_dtype(DType::BF16)).cross_entropy(&labels);
        opt.step_with(&loss.backward(), &[&loss]);
        assert!(model.vars().iter().all(|v| v.dtype() == DType::BF16));
        // Non-float types are refused, and nothing changes.
        assert!(matches!(model.try_to_dtype(DType::I32), Err(lazor::Error::DType { op: "Module::to_dtype", .. })));
        model.to_dtype(DType::F32);
        assert!(model.vars().iter().all(|v| v.dtype() == DType::F32));
    }
}

#[test]
fn checkpoints_of_mixed_models_keep_each_tensor_s_type() {
    let dir = std::env::temp_dir().join(format!("lazor-mixed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for dev in devices() {
        let model = mlp(&dev, 3);
        // The first layer in bf16, the norm in f16, the last in f32.
        let fc1 = model.parameters().into_iter().filter(|(n, _)| n.starts_with("0.")).collect::<Vec<_>>();
        let norm = model.parameters().into_iter().filter(|(n, _)| n.starts_with("1.")).collect::<Vec<_>>();
        fc1.iter().for_each(|(_, v)| v.set_dtype(DType::BF16));
        norm.iter().for_each(|(_, v)| v.set_dtype(DType::F16));
        let types = |m: &nn::Sequential| m.parameters().iter().map(|(n, v)| (n.clone(), v.dtype())).collect::<Vec<_>>();
        let path = dir.join(format!("{}.safetensors", dev.backend()));
        model.save(&path).unwrap();
        // Read back as tensors, each of its type and value.
        let loaded = lazor::safetensors::load(&path).unwrap();
        for (name, v) in model.parameters() {
            let (_, t) = loaded.iter().find(|(n, _)| *n == name).unwrap();
            assert_eq!(t.dtype(), v.dtype(), "{name}");
            assert_eq!(values(t), values(&v), "{name}");
        }
        // Into a model of the same types.
        let other = mlp(&dev, 9);
        for ((_, a), (_, b)) in other.parameters().iter().zip(model.parameters()) {
            a.set_dtype(b.dtype());
        }
        other.load(&path).unwrap();
        assert_eq!(types(&other), types(&model));
        for ((n, a), (_, b)) in other.parameters().iter().zip(model.parameters()) {
            assert_eq!(values(a), values(&b), "{}: {n}", dev.name());
        }
        // A model of other types is refused by name.
        let f32_model = mlp(&dev, 9);
        match f32_model.load(&path) {
            Err(lazor::Error::TensorMismatch { name, .. }) => assert!(name.starts_with("0.") || name.starts_with("1.")),
            other => panic!("loading bf16 tensors into f32 parameters gave {other:?}"),
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
