//! The user-facing API: the issue's example as written, constructors, operators, shapes and error messages.

mod common;

use common::{assert_close, devices};
use lazor::{Device, Error, Tensor};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The panic message of `f`, which must panic.
fn panic_message(f: impl FnOnce()) -> String {
    let err = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    err.downcast_ref::<String>().cloned().or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
}

#[test]
fn the_issue_example_runs_as_written() {
    let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
    let b = Tensor::from_slice(&[10.0f32, 20.0, 30.0], [3]); // broadcasts against [2, 3]
    let c = (a.clone() + &b) * 5.0; // lazy: builds graph nodes, no GPU work yet
    let d = 1.0 - &c / 2.0; // scalars on either side
    assert_eq!(c.shape(), &[2, 3]);
    let v: Vec<f32> = d.to_vec(); // realize + read back
    let want: Vec<f32> = [11.0f32, 22.0, 33.0, 14.0, 25.0, 36.0].iter().map(|x| 1.0 - x * 5.0 / 2.0).collect();
    assert_eq!(v, want);
    assert_eq!(a.device(), &Device::default());
}

#[test]
fn building_is_lazy() {
    for dev in devices() {
        let a = Tensor::from_vec_on(vec![1.0; 4], [4], &dev);
        let b = (&a + 1.0) * &a - 3.0;
        assert_eq!(dev.stats().submits, 0);
        assert_eq!(dev.stats().bytes_uploaded, 0);
        assert!(!b.is_realized());
        b.realize().unwrap();
        assert!(b.is_realized());
        assert_eq!(dev.stats().submits, 1);
    }
}

#[test]
fn constructors() {
    for dev in devices() {
        assert_eq!(Tensor::zeros_on([2, 2], &dev).to_vec(), vec![0.0; 4]);
        assert_eq!(Tensor::ones_on(vec![3], &dev).to_vec(), vec![1.0; 3]);
        assert_eq!(Tensor::full_on(&[2usize, 1][..], 7.5, &dev).to_vec(), vec![7.5; 2]);
        let s = Tensor::scalar_on(4.0, &dev);
        assert_eq!(s.shape(), &[] as &[usize]);
        assert_eq!(s.ndim(), 0);
        assert_eq!(s.numel(), 1);
        assert_eq!(s.to_scalar(), 4.0);
        let shape: Vec<usize> = vec![3, 2];
        let t = Tensor::from_slice_on(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &shape, &dev);
        assert_eq!((t.ndim(), t.numel()), (2, 6));
        assert_eq!(t.to_vec(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        // Default-device twins.
        assert_eq!(Tensor::zeros([1]).to_vec(), vec![0.0]);
        assert_eq!(Tensor::ones([1]).to_vec(), vec![1.0]);
        assert_eq!(Tensor::full([1], 2.0).to_vec(), vec![2.0]);
        assert_eq!(Tensor::scalar(3.0).to_scalar(), 3.0);
    }
}

#[test]
fn every_operator_pairing() {
    for dev in devices() {
        let a = Tensor::from_vec_on(vec![6.0, 8.0], [2], &dev);
        let b = Tensor::from_vec_on(vec![2.0, 4.0], [2], &dev);
        let v = |t: Tensor| t.to_vec();
        assert_eq!(v(a.clone() + b.clone()), vec![8.0, 12.0]);
        assert_eq!(v(a.clone() - &b), vec![4.0, 4.0]);
        assert_eq!(v(&a * b.clone()), vec![12.0, 32.0]);
        assert_eq!(v(&a / &b), vec![3.0, 2.0]);
        assert_eq!(v(a.clone() + 1.0), vec![7.0, 9.0]);
        assert_eq!(v(&a - 1.0), vec![5.0, 7.0]);
        assert_eq!(v(2.0 * a.clone()), vec![12.0, 16.0]);
        assert_eq!(v(48.0 / &a), vec![8.0, 6.0]);
        assert_eq!(v(-a.clone()), vec![-6.0, -8.0]);
        assert_eq!(v(-&a), vec![-6.0, -8.0]);
        let mut c = a.clone();
        c += b.clone();
        c -= &b;
        c *= 2.0;
        c /= &b;
        c += 1.0;
        c -= 1.0;
        c *= b.clone();
        c /= 2.0;
        assert_eq!(v(c), vec![6.0, 8.0]);
        let d = a.try_add(&b).unwrap();
        assert_eq!(v(d), vec![8.0, 12.0]);
        assert_eq!(v(a.try_sub(&b).unwrap()), vec![4.0, 4.0]);
        assert_eq!(v(a.try_mul(&b).unwrap()), vec![12.0, 32.0]);
        assert_eq!(v(a.try_div(&b).unwrap()), vec![3.0, 2.0]);
        assert_eq!(v(a.try_maximum(&b).unwrap()), vec![6.0, 8.0]);
        assert_eq!(v(a.try_minimum(&b).unwrap()), vec![2.0, 4.0]);
    }
}

#[test]
fn broadcast_failure_panics_at_the_callers_line_naming_op_and_shapes() {
    for dev in devices() {
        let a = Tensor::zeros_on([2, 3], &dev);
        let b = Tensor::zeros_on([4], &dev);
        let msg = panic_message(|| drop(&a + &b));
        assert!(msg.contains("add") && msg.contains("[2, 3]") && msg.contains("[4]"), "{msg}");
        let msg = panic_message(|| drop(a.maximum(&b)));
        assert!(msg.contains("maximum") && msg.contains("[2, 3]"), "{msg}");
        match a.try_mul(&b) {
            Err(Error::Broadcast { op, lhs, rhs }) => {
                assert_eq!(op, "mul");
                assert_eq!(lhs.dims(), &[2, 3]);
                assert_eq!(rhs.dims(), &[4]);
            }
            other => panic!("expected a broadcast error, got {other:?}"),
        }
        // #[track_caller]: the panic location is the test's line, not lazor's.
        let location = std::sync::Arc::new(std::sync::Mutex::new(None));
        let loc = location.clone();
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            *loc.lock().unwrap() = info.location().map(|l| (l.file().to_string(), l.line()));
        }));
        #[rustfmt::skip]
    let (line, _) = (line!(), catch_unwind(AssertUnwindSafe(|| drop(&a + &b))));
        std::panic::set_hook(hook);
        let (file, at) = location.lock().unwrap().clone().unwrap();
        assert!(file.ends_with("api.rs"), "panic located in {file}");
        assert_eq!(at, line);
    }
}

#[test]
fn bad_data_length_panics_with_both_numbers() {
    let msg = panic_message(|| drop(Tensor::from_vec(vec![1.0; 5], [2, 3])));
    assert!(msg.contains('5') && msg.contains('6') && msg.contains("[2, 3]"), "{msg}");
}

#[test]
fn clamp_checks_its_bounds_like_f32() {
    for dev in devices() {
        let t = Tensor::from_vec_on(vec![-5.0, 0.5, 5.0, f32::NAN], [4], &dev);
        let got = t.clamp(-1.0, 1.0).to_vec();
        assert_eq!(&got[..3], &[-1.0, 0.5, 1.0]);
        assert!(got[3].is_nan());
        let msg = panic_message(|| drop(t.clamp(2.0, 1.0)));
        assert!(msg.contains("clamp"), "{msg}");
    }
}

#[test]
fn mixing_devices_is_refused() {
    for d1 in devices() {
        let d2 = Device::cpu();
        let a = Tensor::ones_on([2], &d1);
        let b = Tensor::ones_on([2], &d2);
        let msg = panic_message(|| drop(&a + &b));
        assert!(msg.contains("different devices") && msg.contains("add"), "{msg}");
        assert!(matches!(a.try_sub(&b), Err(Error::DeviceMismatch { op: "sub" })));
        // Several devices in one realize: each realizes its own.
        let (x, y) = (&a * 2.0, &b * 3.0);
        lazor::realize(&[&x, &y]).unwrap();
        assert_eq!((x.to_vec(), y.to_vec()), (vec![2.0; 2], vec![3.0; 2]));
        // to_device moves a tensor between any two devices: one copy.
        let moved = (&a * 5.0).to_device(&d2);
        assert_eq!(moved.device(), &d2);
        assert_eq!((moved + &b).to_vec(), vec![6.0; 2]);
    }
}

#[test]
fn to_scalar_needs_one_element() {
    for dev in devices() {
        let msg = panic_message(|| {
            Tensor::ones_on([2], &dev).to_scalar();
        });
        assert!(msg.contains("to_scalar") && msg.contains("[2]"), "{msg}");
        assert_eq!(Tensor::full_on([1, 1], 3.0, &dev).to_scalar(), 3.0);
    }
}

#[test]
fn handles_are_send_sync_clone_debug() {
    fn assert_send_sync<T: Send + Sync + Clone + std::fmt::Debug>() {}
    assert_send_sync::<Tensor>();
    assert_send_sync::<Device>();
    for dev in devices() {
        let t = Tensor::ones_on([2, 2], &dev);
        let dbg = format!("{t:?}");
        assert!(dbg.contains("[2, 2]"), "{dbg}");
        // A tensor built on one thread, realized on another.
        let u = &t * 4.0;
        let got = std::thread::spawn(move || u.to_vec()).join().unwrap();
        assert_eq!(got, vec![4.0; 4]);
    }
}

#[test]
fn to_vec_async_resolves() {
    for dev in devices() {
        let a = Tensor::from_vec_on(vec![1.0, 2.0, 3.0], [3], &dev);
        let fut = (&a * &a).to_vec_async();
        assert_eq!(dev.stats().submits, 0, "lazy until polled");
        let got = pollster::block_on(fut).unwrap();
        assert_eq!(got, vec![1.0, 4.0, 9.0]);
        assert_eq!(dev.stats().submits, 1);
    }
}

#[test]
fn elementwise_methods_exist_with_f32_names() {
    for dev in devices() {
        let x = Tensor::from_vec_on(vec![0.25, 1.0, 2.0], [3], &dev);
        let all = [
            x.exp(),
            x.ln(),
            x.sqrt(),
            x.rsqrt(),
            x.abs(),
            x.relu(),
            x.sigmoid(),
            x.tanh(),
            x.sin(),
            x.cos(),
            x.recip(),
            x.square(),
            x.powf(3.0),
            x.gelu(),
            x.silu(),
            x.maximum(&x),
            x.minimum(&x),
            x.clamp(0.5, 1.5),
            x.log1p(),
            x.expm1(),
            x.erf(),
            x.floor(),
            x.ceil(),
            x.round(),
            x.sign(),
            x.pow(&x),
        ];
        let refs: Vec<&Tensor> = all.iter().collect();
        let want = lazor::reference::eval(&refs);
        let got = lazor::to_vecs(&refs).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(g, w, 1e-5, 1e-6, &format!("method {i}"));
        }
        assert_eq!(dev.stats().submits, 1, "all read back in one submit");
        assert_eq!(dev.stats().dispatches, 1, "one fused kernel writes all 26 outputs");
    }
}

#[test]
fn mask_window_and_convolution_methods_take_torchs_arguments() {
    for dev in devices() {
        let x = Tensor::from_vec_on((1..=6).map(|v| v as f32).collect::<Vec<f32>>(), [2, 3], &dev);
        let mask = Tensor::from_vec_on(vec![true, false, false], [3], &dev);
        let k: isize = -1;
        let dims: [isize; 1] = [-1];
        let all = [
            x.tril(0),
            x.triu(k),
            x.masked_fill(&mask, -1.0),
            x.pad(&[(1, 0)], 0.0).narrow(1, 0, 3),
            x.flip(&dims[..]),
            x.unfold(1, 2, 1).sum(-1).pad(&[(0, 1)], 0.0),
            x.cumsum(1),
        ];
        let want: [&[f32]; 7] = [
            &[1.0, 0.0, 0.0, 4.0, 5.0, 0.0],
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            &[-1.0, 2.0, 3.0, -1.0, 5.0, 6.0],
            &[0.0, 1.0, 2.0, 0.0, 4.0, 5.0],
            &[3.0, 2.0, 1.0, 6.0, 5.0, 4.0],
            &[3.0, 5.0, 0.0, 9.0, 11.0, 0.0],
            &[1.0, 3.0, 6.0, 4.0, 9.0, 15.0],
        ];
        for (i, (t, w)) in all.iter().zip(want).enumerate() {
            assert_eq!(t.to_vec(), w, "method {i}");
        }
        assert!(x.try_tril(0).is_ok() && x.try_triu(0).is_ok() && x.try_masked_fill(&mask, 0.0).is_ok());
        assert!(x.try_pad(&[(1, 1), (1, 1)], 0.0).is_ok() && x.try_flip([0, 1]).is_ok());
        assert!(x.try_unfold(-1, 3, 1).is_ok() && x.try_cumsum(-2).is_ok());
        // Convolution and pooling, with torch's argument forms: (along H, along W) pairs.
        let img = x.reshape([1, 1, 2, 3]);
        let w = Tensor::ones_on([2, 1, 2, 2], &dev);
        let b = Tensor::from_vec_on(vec![0.5, -0.5], [2], &dev);
        let y = img.conv2d(&w, Some(&b), (1, 1), (0, 0));
        assert_eq!((y.shape(), y.to_vec()), (&[1usize, 2, 1, 2][..], vec![12.5, 16.5, 11.5, 15.5]));
        assert_eq!(img.conv2d(&w, None, (1, 2), (1, 0)).shape(), &[1, 2, 3, 1]);
        assert_eq!(img.max_pool2d((2, 2), (1, 1)).to_vec(), vec![5.0, 6.0]);
        assert_eq!(img.avg_pool2d((1, 2), (1, 1)).to_vec(), vec![1.5, 2.5, 4.5, 5.5]);
        assert!(img.try_conv2d(&w, None, (1, 1), (0, 0)).is_ok());
        assert!(img.try_max_pool2d((2, 2), (2, 2)).is_ok() && img.try_avg_pool2d((2, 2), (2, 2)).is_ok());
    }
}

/// The README's mixed-type example, as written there.
#[test]
fn the_readme_mixed_example_runs_as_written() {
    use lazor::half::f16;
    use lazor::DType;

    let x = Tensor::from_vec(vec![0.5f32, -1.0, 2.0, 3.0, -0.5, 1.5], [2, 3]).to_dtype(DType::F16);
    let w = Tensor::from_vec(vec![f16::from_f32(1.0); 9], [3, 3]); // f16 weights
    let h = x.matmul(&w); // f16: tensor cores where the GPU has them
    let mask = h.gt(0.0); // Bool, 1 byte per element
    let y = mask.where_cond(&h, 0.0); // relu through a mask
    let best: Vec<i32> = y.argmax(-1).to_vec_as::<i32>(); // I32 indices, first on ties
    assert_eq!(best, vec![0, 0]);
    assert_eq!((h.dtype(), mask.dtype(), y.dtype()), (DType::F16, DType::Bool, DType::F16));
    assert_eq!(
        y.to_vec_as::<f16>(),
        vec![f16::from_f32(1.5); 3].into_iter().chain(vec![f16::from_f32(4.0); 3]).collect::<Vec<_>>()
    );
}
