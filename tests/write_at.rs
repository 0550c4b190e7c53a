//! `Tensor::write_at`: a slice written into a tensor in place, as a KV cache's new position is; checked against
//! the reference and a host computation on every backend, with its kernel, buffers and plans counted.

mod common;

use common::{check, devices, Rng};
use lazor::{DType, Device, Error, Position, Tensor};

/// `base` (of `dims`) with `value` written along `axis` from `start`, on the host.
fn written(base: &[f32], dims: &[usize], value: &[f32], len: usize, axis: usize, start: usize) -> Vec<f32> {
    let inner: usize = dims[axis + 1..].iter().product();
    let mut out = base.to_vec();
    for (j, &x) in value.iter().enumerate() {
        let (outer, rest) = (j / (len * inner), j % (len * inner));
        out[(outer * dims[axis] + start) * inner + rest] = x;
    }
    out
}

/// A realized tensor of `dims` and `dt` holding `values` (rounded to `dt`), and those rounded values.
fn stored(values: Vec<f32>, dims: &[usize], dt: DType, dev: &Device) -> (Vec<f32>, Tensor) {
    let t = Tensor::from_vec_on(values, dims, dev).to_dtype(dt);
    t.realize().unwrap();
    (t.to_dtype(DType::F32).to_vec(), t)
}

#[test]
fn write_at_matches_the_reference_on_every_axis_dtype_and_position() {
    let mut rng = Rng::new(48);
    for dev in devices() {
        for dt in [DType::F32, DType::F16, DType::BF16, DType::I32] {
            for dims in [vec![7], vec![2, 5, 3], vec![2, 3, 8, 4], vec![3, 1, 33]] {
                for axis in 0..dims.len() {
                    let extent = dims[axis];
                    let len = 1 + rng.below(extent);
                    for (case, start) in [0, extent - len, rng.below(extent - len + 1)].into_iter().enumerate() {
                        let n: usize = dims.iter().product();
                        let (base, cache) = stored(rng.vec(n, -8.0, 8.0), &dims, dt, &dev);
                        // The last case keeps a lazy reader of the old value: the write copies the buffer.
                        let held = (case == 2).then(|| cache.reshape([1, n]));
                        let mut part = dims.clone();
                        part[axis] = len;
                        let m: usize = part.iter().product();
                        let (value, v) = stored(rng.vec(m, -8.0, 8.0), &part, dt, &dev);
                        cache.write_at(axis, start, &v);
                        let what = format!("{} {dt} {dims:?} axis {axis} len {len} at {start}", dev.name());
                        let got = check(&cache, 0.0, 0.0, &what);
                        assert_eq!(got, written(&base, &dims, &value, len, axis, start), "{what}");
                        assert!(cache.is_realized(), "{what}");
                        if let Some(old) = held {
                            assert_eq!(old.to_dtype(DType::F32).to_vec(), base, "{what}: the old value");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_position_on_the_device_is_read_there_and_clamped_inside_the_axis() {
    for dev in devices() {
        let base: Vec<f32> = (0..24).map(|i| i as f32).collect();
        let value = Tensor::full_on([2, 2, 2], -1.0f32, &dev);
        let host = value.to_vec();
        // I32 and U32, of shape [] and [1]; out of range on either side: the slice stays inside the axis.
        let cases: [(Tensor, usize); 5] = [
            (Tensor::scalar_on(3i32, &dev), 3),
            (Tensor::from_vec_on(vec![1u32], [1], &dev), 1),
            (Tensor::scalar_on(-5i32, &dev), 0),
            (Tensor::scalar_on(99i32, &dev), 4),
            ((Tensor::scalar_on(1i32, &dev) + 1), 2),
        ];
        for (pos, at) in cases {
            let c = Tensor::from_slice_on(&base, [2, 6, 2], &dev);
            c.realize().unwrap();
            c.write_at(1, &pos, &value);
            let what = format!("{} at {at}", dev.name());
            assert_eq!(check(&c, 0.0, 0.0, &what), written(&base, &[2, 6, 2], &host, 2, 1, at), "{what}");
        }
    }
}

#[test]
fn a_write_into_a_buffer_nothing_else_reads_is_one_kernel_over_the_slice_and_no_new_buffer() {
    for dev in devices() {
        let dims = [2, 4, 64, 16];
        let (mut want, cache) = stored(vec![0.5; 2 * 4 * 64 * 16], &dims, DType::F32, &dev);
        // The cache's buffer is all this device ever held: a second buffer, even for a moment, raises the peak.
        let s = dev.stats();
        let (live, compiled) = (s.live_buffer_bytes, s.pipelines_compiled);
        assert_eq!(s.peak_buffer_bytes, live, "{}", dev.name());
        for pos in 0..8 {
            let value = Tensor::full_on([2, 4, 1, 16], pos as f32, &dev);
            let before = dev.stats();
            cache.write_at(2, pos, &value);
            cache.realize().unwrap();
            let s = dev.stats();
            let what = format!("{} position {pos}", dev.name());
            assert_eq!(s.dispatches - before.dispatches, 1, "{what}: one kernel");
            assert_eq!((s.live_buffer_bytes, s.peak_buffer_bytes), (live, live), "{what}: no buffer but the cache's");
            if pos > 0 {
                assert_eq!(s.plans_reused - before.plans_reused, 1, "{what}: the plan is reused");
            }
            want = written(&want, &dims, &vec![pos as f32; 2 * 4 * 16], 1, 2, pos);
        }
        assert_eq!(cache.to_vec(), want, "{}", dev.name());
        if !dev.is_cpu() {
            assert!(dev.stats().pipelines_compiled - compiled <= 1, "{}: one kernel compiled at most", dev.name());
        }
        let profile = dev.profile(|| {
            cache.write_at(2, 9usize, &Tensor::full_on([2, 4, 1, 16], 1.0f32, &dev));
            cache.realize().unwrap();
        });
        let names: Vec<&str> = profile.kernels().iter().map(|k| k.name.as_str()).collect();
        assert!(names.len() == 1 && names[0].ends_with("[2x4x1x16]"), "{}: {names:?}", dev.name());
    }
}

#[test]
fn lazy_results_of_the_old_value_keep_it_and_the_write_copies_then() {
    for dev in devices() {
        let (base, cache) = stored((0..12).map(|i| i as f32).collect(), &[3, 4], DType::F32, &dev);
        let alias = cache.clone();
        let old = &cache * 2.0;
        cache.write_at(0, 1usize, &Tensor::full_on([1, 4], 100.0f32, &dev));
        let new = written(&base, &[3, 4], &[100.0; 4], 1, 0, 1);
        // Realized together: the old value is still read, so the write copies it.
        lazor::realize(&[&old, &cache]).unwrap();
        assert_eq!(old.to_vec(), base.iter().map(|x| x * 2.0).collect::<Vec<_>>(), "{}", dev.name());
        assert_eq!(cache.to_vec(), new, "{}", dev.name());
        assert_eq!(alias.to_vec(), new, "{}: every handle sees the write", dev.name());
    }
}

#[test]
fn writes_to_a_lazy_tensor_and_two_writes_before_a_realize_are_realized_with_their_readers() {
    for dev in devices() {
        let cache = Tensor::zeros_on([4, 3], &dev);
        cache.write_at(0, 0usize, &Tensor::ones_on([2, 3], &dev));
        cache.write_at(0, 3usize, &Tensor::full_on([1, 3], 5.0f32, &dev));
        let total = cache.sum_all();
        let want = expected_sum(&total);
        assert_eq!(total.to_vec(), want, "{}", dev.name());
        assert!(cache.is_realized(), "{}: realized with its reader", dev.name());
        assert_eq!(cache.to_vec(), vec![1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 5.0, 5.0, 5.0]);
    }
}

/// The reference's value of `t`, taken before it is realized.
fn expected_sum(t: &Tensor) -> Vec<f32> {
    lazor::reference::eval(&[t]).remove(0)
}

#[test]
fn a_value_computed_from_the_tensor_itself_reads_the_old_value() {
    for dev in devices() {
        let (base, cache) = stored((0..8).map(|i| i as f32).collect(), &[8], DType::F32, &dev);
        // Shift the first half into the second: the value reads the old first half.
        let first = cache.narrow(0, 0, 4) * 10.0;
        cache.write_at(0, 4usize, &first);
        let want: Vec<f32> = base[..4].iter().copied().chain(base[..4].iter().map(|x| x * 10.0)).collect();
        assert_eq!(check(&cache, 0.0, 0.0, &dev.name()), want);
        // Writing a tensor over itself changes nothing.
        cache.write_at(0, 0usize, &cache.clone());
        assert_eq!(cache.to_vec(), want);
    }
}

#[test]
fn bad_writes_name_the_problem() {
    let dev = Device::cpu();
    let cache = Tensor::zeros_on([2, 5], &dev);
    let v = Tensor::ones_on([2, 2], &dev);
    let bad = |r: lazor::Result<()>| r.expect_err("an error").to_string();
    assert!(bad(cache.try_write_at(2, 0usize, &v)).contains("dim 2 is out of range"));
    assert!(bad(cache.try_write_at(1, 4usize, &v)).contains("start 4 + length 2 exceeds axis 1 of extent 5"));
    assert!(matches!(cache.try_write_at(0, 0usize, &v), Err(Error::ShapeMismatch { .. })));
    assert!(matches!(cache.try_write_at(1, 0usize, &v.to_dtype(DType::F16)), Err(Error::DType { .. })));
    assert!(matches!(
        cache.try_write_at(1, 0usize, &Tensor::ones_on([2, 2, 1], &dev)),
        Err(Error::ShapeMismatch { .. })
    ));
    let pos = Tensor::from_vec_on(vec![0.0f32], [1], &dev);
    assert!(bad(cache.try_write_at(1, Position::On(&pos), &v)).contains("I32 or U32 scalar"));
    let pair = Tensor::from_vec_on(vec![0i32, 1], [2], &dev);
    assert!(bad(cache.try_write_at(1, &pair, &v)).contains("I32 or U32 scalar"));
    let tracked = lazor::Var::new(Tensor::zeros_on([2, 5], &dev));
    assert!(bad(tracked.tensor().try_write_at(1, 0usize, &v)).contains("tracked by autograd"));
    let other = Device::cpu();
    assert!(matches!(
        cache.try_write_at(1, 0usize, &Tensor::ones_on([2, 2], &other)),
        Err(Error::DeviceMismatch { .. })
    ));
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cache.write_at(1, 9usize, &v)));
    assert!(panicked.is_err());
}
