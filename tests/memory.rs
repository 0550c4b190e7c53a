//! Read-back into the caller's memory and through a borrowed view, the buffer pool's budget, eviction and trim,
//! and a long run of mixed realizes whose memory stays flat; on every backend.

mod common;

use common::{devices, Rng};
use lazor::{DType, Device, Error, Tensor};

fn expr(x: &Tensor, y: &Tensor) -> Tensor {
    (x * y + 1.0).exp() - x
}

#[test]
fn read_into_and_read_with_agree_with_to_vec() {
    for dev in devices() {
        let mut rng = Rng::new(7);
        // Empty, odd, and past the size where the copy out runs on several threads.
        for n in [0usize, 5, 1000, (1 << 21) + 3] {
            let x = Tensor::from_vec_on(rng.vec(n, -1.0, 1.0), [n], &dev);
            let y = Tensor::from_vec_on(rng.vec(n, -1.0, 1.0), [n], &dev);
            let want = expr(&x, &y).to_vec();
            let mut got = vec![f32::NAN; n];
            expr(&x, &y).read_into(&mut got);
            assert_eq!(got, want, "{} read_into n={n}", dev.name());
            let (len, same) = expr(&x, &y).read_with(|v| (v.len(), v == want.as_slice()));
            assert_eq!((len, same), (n, true), "{} read_with n={n}", dev.name());
        }
        // A view (transpose) and a realized tensor read the same way.
        let m = Tensor::from_vec_on((0..12).map(|i| i as f32).collect(), [3, 4], &dev);
        let t = m.t();
        let mut out = vec![0.0; 12];
        t.read_into(&mut out);
        assert_eq!(out, t.to_vec(), "{}", dev.name());
        m.realize().unwrap();
        assert_eq!(m.read_with(|v| v.to_vec()), (0..12).map(|i| i as f32).collect::<Vec<_>>());
    }
}

#[test]
fn a_read_is_one_submit_and_counts_its_bytes() {
    for dev in devices() {
        let x = Tensor::from_vec_on(vec![1.0; 1024], [1024], &dev);
        x.realize().unwrap();
        let before = dev.stats();
        let mut out = vec![0.0; 1024];
        (&x * 3.0).read_into(&mut out);
        let s = dev.stats();
        assert_eq!((s.submits - before.submits, s.dispatches - before.dispatches), (1, 1), "{}", dev.name());
        let down = if dev.is_cpu() { 0 } else { 4096 };
        assert_eq!(s.bytes_downloaded - before.bytes_downloaded, down, "{}", dev.name());
        assert_eq!(out, vec![3.0; 1024]);
    }
}

#[test]
fn read_into_of_the_wrong_length_names_both_lengths() {
    let dev = Device::cpu();
    let t = Tensor::ones_on([2, 3], &dev);
    let mut short = vec![0.0; 5];
    match t.try_read_into(&mut short) {
        Err(Error::BadArgument { op: "read_into", message, .. }) => {
            assert!(message.contains('6') && message.contains('5'), "{message}")
        }
        other => panic!("expected a read_into error, got {other:?}"),
    }
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || t.read_into(&mut short)))
        .expect_err("a wrong length panics");
    let msg = caught.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("read_into") && msg.contains("6 elements") && msg.contains("has 5"), "{msg}");
}

#[test]
fn reads_of_other_dtypes_say_which_call_to_use() {
    for dev in devices() {
        let t = Tensor::from_vec_on(vec![1i32, 2], [2], &dev);
        let mut out = vec![0.0; 2];
        assert!(matches!(t.try_read_into(&mut out), Err(Error::DType { op: "read_into", .. })));
        let mut ran = false;
        assert!(matches!(t.try_read_with(|_| ran = true), Err(Error::DType { op: "read_with", .. })));
        assert!(!ran, "the closure does not run on an error");
        assert_eq!(t.to_dtype(DType::F32).read_with(|v| v.to_vec()), vec![1.0, 2.0]);
    }
}

#[test]
fn trim_gives_free_buffers_back_and_work_goes_on() {
    for dev in devices() {
        let x = Tensor::from_vec_on(vec![2.0; 1 << 16], [1 << 16], &dev);
        for _ in 0..3 {
            drop((&x * &x + 1.0).exp().to_vec());
        }
        let before = dev.stats();
        assert!(before.pool_bytes > 0, "{}: a finished read leaves free buffers", dev.name());
        let given = dev.trim();
        assert_eq!(given, before.pool_bytes, "{}", dev.name());
        let after = dev.stats();
        assert_eq!(after.pool_bytes, 0, "{}", dev.name());
        assert_eq!(after.live_buffer_bytes, before.live_buffer_bytes, "{}: live tensors are untouched", dev.name());
        assert_eq!((&x * 2.0).to_vec(), vec![4.0; 1 << 16], "{}", dev.name());
        assert!(dev.stats().buffers_allocated > after.buffers_allocated, "{}: allocates again", dev.name());
    }
}

#[test]
fn the_pool_keeps_its_budget_and_evicts_the_oldest_sizes() {
    for dev in devices() {
        let budget = 1 << 20;
        dev.set_pool_budget(budget);
        assert_eq!(dev.pool_budget(), budget);
        // A 64 KiB buffer, then nine of about 256 KiB (too big for a 64 KiB request to take), freed in turn: only
        // the most recent four fit.
        let size = |k: usize| if k == 0 { 1 << 14 } else { (1 << 16) + 64 * k };
        for k in 0..10usize {
            let n = size(k);
            let t = (Tensor::ones_on([n], &dev) * 2.0).exp();
            t.realize().unwrap();
            drop(t);
            let s = dev.stats();
            assert!(s.pool_bytes <= 2 * budget, "{}: pool {} over twice the budget", dev.name(), s.pool_bytes);
        }
        // The last size is still pooled: computing it again allocates nothing.
        let n = size(9);
        let before = dev.stats().buffers_allocated;
        (Tensor::ones_on([n], &dev) * 2.0).exp().realize().unwrap();
        assert_eq!(dev.stats().buffers_allocated, before, "{}: reuse before allocate", dev.name());
        // The first size was evicted: computing it again allocates.
        let before = dev.stats().buffers_allocated;
        (Tensor::ones_on([size(0)], &dev) * 2.0).exp().realize().unwrap();
        assert!(dev.stats().buffers_allocated > before, "{}: the oldest size was evicted", dev.name());
        dev.set_pool_budget(0);
        assert_eq!(dev.stats().pool_bytes, 0, "{}: a zero budget keeps nothing", dev.name());
    }
}

/// Thousands of realizes of mixed sizes, shapes and ops, some read back, some kept a while: live memory returns to
/// what the kept tensors hold, the pool stays within its budget, and once every size has been seen almost nothing
/// is allocated.
#[test]
fn memory_stays_flat_over_a_long_mixed_run() {
    for dev in devices() {
        let mut rng = Rng::new(42);
        let big = if dev.is_cpu() { 1 << 20 } else { 1 << 19 };
        let sizes = [1usize, 3, 1000, 4096, 65537, big];
        let inputs: Vec<Tensor> =
            sizes.iter().map(|&n| Tensor::from_vec_on(rng.vec(n, -1.0, 1.0), [n], &dev)).collect();
        lazor::realize(&inputs.iter().collect::<Vec<_>>()).unwrap();
        let base = dev.stats().live_buffer_bytes;
        let budget = dev.pool_budget();
        let rounds = 3000;
        let mut allocated_at_half = 0;
        let mut kept: Vec<Tensor> = Vec::new();
        for round in 0..rounds {
            let k = rng.below(sizes.len());
            let x = &inputs[k];
            let y = match rng.below(4) {
                0 => (x * 2.0 + 1.0).tanh(),
                1 => x.exp().sum_all(),
                2 => (x - x.max_all()).exp() / 3.0,
                _ => x.lt(0.0).where_cond(x, 0.0) * x,
            };
            match rng.below(3) {
                0 => drop(y.to_vec()),
                1 => kept.push(y),
                _ => y.realize().unwrap(),
            }
            if kept.len() > 8 {
                kept.clear();
            }
            let s = dev.stats();
            assert!(s.pool_bytes <= 2 * budget, "{}: round {round}: pool {} bytes", dev.name(), s.pool_bytes);
            if round == rounds / 2 {
                allocated_at_half = s.buffers_allocated;
            }
        }
        kept.clear();
        let s = dev.stats();
        assert_eq!(s.live_buffer_bytes, base, "{}: only the inputs stay live", dev.name());
        let late = s.buffers_allocated - allocated_at_half;
        assert!(late <= 4, "{}: {late} buffers allocated in the second half of the run", dev.name());
        dev.trim();
        assert_eq!(dev.stats().pool_bytes, 0);
    }
}
