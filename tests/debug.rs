//! Seeing what runs: tensor printing (golden strings, reading back only what is printed), kernel names, and the
//! graph as DOT grouped by kernel.

mod common;

use common::devices;
use lazor::half::f16;
use lazor::{DType, Device, Tensor};

/// `t` printed, without the device name (which differs per machine), checked to end with it.
fn shown(t: &Tensor) -> String {
    let s = format!("{t}");
    let suffix = format!(", device={})", t.device().name());
    assert!(s.ends_with(&suffix), "{s}");
    s[..s.len() - suffix.len()].to_string()
}

#[test]
fn printing_matches_pytorch_layout() {
    for dev in devices() {
        let x = Tensor::from_vec_on(vec![1.0f32, 2.5, -3.0, 4.0, 5.0, 6.0], [2, 3], &dev);
        assert_eq!(
            shown(&x),
            "tensor([[ 1.0000,  2.5000, -3.0000],\n        [ 4.0000,  5.0000,  6.0000]], shape=[2, 3], dtype=f32"
        );
        let i = Tensor::arange_on(8, &dev).reshape([2, 2, 2]);
        assert_eq!(
            shown(&i),
            "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]], shape=[2, 2, 2], dtype=i32"
        );
        let w = Tensor::from_vec_on(vec![1.0f32, -2.0, 30.0], [3], &dev);
        assert_eq!(shown(&w), "tensor([ 1., -2., 30.], shape=[3], dtype=f32");
        let s = Tensor::scalar_on(0.5f32, &dev);
        assert_eq!(shown(&s), "tensor(0.5000, shape=[], dtype=f32");
        let b = Tensor::from_vec_on(vec![true, false], [2], &dev);
        assert_eq!(shown(&b), "tensor([ true, false], shape=[2], dtype=bool");
        let e = Tensor::zeros_on([3, 0], &dev);
        assert_eq!(shown(&e), "tensor([], shape=[3, 0], dtype=f32");
        let h = Tensor::from_vec_on(vec![f16::from_f32(1.5), f16::from_f32(f32::NAN)], [2], &dev);
        assert_eq!(shown(&h), "tensor([1.5000,    nan], shape=[2], dtype=f16");
        let sci = Tensor::from_vec_on(vec![1e-5f32, 1.0, f32::NEG_INFINITY], [3], &dev);
        assert_eq!(shown(&sci), "tensor([1.0000e-05, 1.0000e+00,       -inf], shape=[3], dtype=f32");
    }
}

#[test]
fn long_tensors_print_their_ends_and_read_only_those() {
    for dev in devices() {
        let n = 1 << 20;
        let x = Tensor::arange_on(n, &dev).reshape([1024, 1024]);
        let before = dev.stats();
        let text = shown(&x);
        let after = dev.stats();
        assert_eq!(
            text,
            "tensor([[      0,       1,       2,     ...,    1021,    1022,    1023],\n        \
             [   1024,    1025,    1026,     ...,    2045,    2046,    2047],\n        \
             [   2048,    2049,    2050,     ...,    3069,    3070,    3071],\n        ...,\n        \
             [1045504, 1045505, 1045506,     ..., 1046525, 1046526, 1046527],\n        \
             [1046528, 1046529, 1046530,     ..., 1047549, 1047550, 1047551],\n        \
             [1047552, 1047553, 1047554,     ..., 1048573, 1048574, 1048575]], shape=[1024, 1024], dtype=i32"
        );
        // 36 printed elements of 4 bytes come back, not 4 MiB.
        let read = after.bytes_downloaded - before.bytes_downloaded;
        assert!(read <= 36 * 4 + 64, "{}: printing read {read} bytes", dev.name());
        assert!(!x.is_realized(), "printing realized the whole tensor");
    }
}

#[test]
fn debug_stays_cheap() {
    let dev = Device::cpu();
    let x = Tensor::from_vec_on(vec![1.0f32, 2.0], [2], &dev).exp();
    let realizes = dev.stats().realizes;
    let text = format!("{x:?}");
    assert!(text.contains("shape") && text.contains("realized: false"), "{text}");
    assert_eq!(dev.stats().realizes, realizes, "Debug ran something");
    let _ = x.to_dtype(DType::F16);
}

#[test]
fn dot_groups_nodes_by_kernel() {
    for dev in devices() {
        let x = Tensor::from_vec_on(vec![1.0f32; 12], [3, 4], &dev);
        let w = Tensor::from_vec_on(vec![0.5f32; 20], [4, 5], &dev);
        let b = Tensor::from_vec_on(vec![0.1f32; 5], [5], &dev);
        let h = (x.matmul(&w) + &b).relu();
        let y = h.softmax(-1);
        // Only the softmax asked for: its rows kernel evaluates the bias and relu on its loads.
        let text = lazor::debug::dot(&[&y]);
        assert!(text.starts_with("digraph lazor {"), "{text}");
        assert_eq!(text.matches("subgraph cluster_").count(), 2, "{text}");
        assert!(text.contains("label=\"kernel 0: matmul [3x5]\""), "{text}");
        assert!(text.contains("label=\"kernel 1: add+relu+max+sub+exp+sum+div [3x5]\""), "{text}");
        assert!(text.contains("n0 [label=\"data\\n[3, 4] f32\", shape=ellipse];"), "data is a buffer: {text}");
        // Both asked for: the bias and relu run in the product's epilogue, the softmax reads its result.
        let text = lazor::debug::dot(&[&h, &y]);
        let clusters = text.matches("subgraph cluster_").count();
        assert_eq!(clusters, 2, "{text}");
        assert!(text.contains("label=\"kernel 0: matmul+add+relu [3x5]\""), "{text}");
        assert!(text.contains("label=\"kernel 1: max+sub+exp+sum+div [3x5]\""), "{text}");
        // Drawing runs nothing; the realize runs the kernels drawn.
        assert!(!y.is_realized());
        let before = dev.stats().dispatches;
        lazor::realize(&[&h, &y]).unwrap();
        dev.synchronize().unwrap();
        assert_eq!(dev.stats().dispatches - before, clusters as u64, "{}", dev.name());
    }
}

#[test]
fn a_profile_names_times_and_counts_every_kernel() {
    for dev in devices() {
        let n = 64;
        let x = Tensor::from_vec_on(vec![0.5f32; n * n], [n, n], &dev);
        let w = Tensor::from_vec_on(vec![0.25f32; n * n], [n, n], &dev);
        let b = Tensor::from_vec_on(vec![0.1f32; n], [n], &dev);
        lazor::realize(&[&x, &w, &b]).unwrap();
        let before = dev.stats().dispatches;
        let profile = dev.profile(|| {
            for _ in 0..3 {
                let h = (x.matmul(&w) + &b).relu();
                let y = h.softmax(-1);
                lazor::realize(&[&h, &y]).unwrap();
            }
        });
        assert_eq!(profile.dispatches(), dev.stats().dispatches - before, "{profile}");
        let names: Vec<&str> = profile.kernels().iter().map(|k| k.name.as_str()).collect();
        assert_eq!(profile.kernels().len(), 2, "{profile}");
        assert!(
            names.contains(&"matmul+add+relu [64x64]") && names.contains(&"max+sub+exp+sum+div [64x64]"),
            "{names:?}"
        );
        for k in profile.kernels() {
            assert_eq!(k.dispatches, 3, "{profile}");
            assert!(k.time.is_some_and(|t| !t.is_zero()), "{}: {profile}", dev.name());
            // Each reads and writes 64 x 64 f32 values at least.
            assert!(k.bytes >= 3 * 2 * 64 * 64 * 4, "{profile}");
        }
        let mm = profile.kernels().iter().find(|k| k.name.starts_with("matmul")).unwrap();
        assert_eq!(mm.flops, 3 * 2 * 64 * 64 * 64);
        assert!(mm.tflop_per_s().is_some());
        let table = profile.to_string();
        assert!(table.contains("6 dispatches") && table.contains("matmul+add+relu [64x64]"), "{table}");
        // Outside a profile nothing is recorded, and realizes batch again.
        let again = dev.profile(|| ());
        assert_eq!(again.dispatches(), 0);
    }
}
