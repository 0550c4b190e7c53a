//! Checks shared by the sections: results against the host before timing, and the counts of one realize.

use crate::common::Case;
use crate::timing::inputs;
use lazor::{Device, Tensor};
use std::fmt::Display;

/// Reports a wrong result on stderr; false, for a section to return.
pub fn wrong(e: impl Display) -> bool {
    eprintln!("bench: wrong results: {e}");
    false
}

/// Whether tensors of `bytes` fit `dev`; where they do not, prints that `case` at `size` is skipped.
pub fn fits(dev: &Device, case: &str, size: &str, bytes: u64) -> bool {
    let fits = bytes <= dev.max_tensor_bytes();
    if !fits {
        println!(
            "- skipped {case} at {size}: its {bytes}-byte tensors exceed this device's max_tensor_bytes ({})",
            dev.max_tensor_bytes()
        );
    }
    fits
}

/// Largest relative difference between `got` and the host's value of each element, relative to `max(|v|, 1)`;
/// NaN if any value is NaN.
pub fn worst_error(got: &[f32], want: impl Fn(usize) -> f32) -> f32 {
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

/// [`worst_error`] of `got` against `want`, of the same length.
pub fn rel_error(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "result lengths differ");
    worst_error(got, |i| want[i])
}

/// `f()` with fusion on or off on `dev`; fusion is on again afterwards.
pub fn with_fusion<R>(dev: &Device, fuse: bool, f: impl FnOnce() -> R) -> R {
    dev.set_fusion(fuse);
    let r = f();
    dev.set_fusion(true);
    r
}

/// Submits and dispatches of one realize of `y()` on `dev`, then a synchronize.
pub fn realize_counts(dev: &Device, y: impl FnOnce() -> Tensor) -> (u64, u64) {
    let before = dev.stats();
    y().realize().expect("realize");
    dev.synchronize().expect("synchronize");
    let after = dev.stats();
    (after.submits - before.submits, after.dispatches - before.dispatches)
}

/// Every elementwise case, fused and unfused, against the host at 2^16 elements.
pub fn check_correctness(dev: &Device) -> Result<(), String> {
    let n = 1 << 16;
    let (ha, hb, hc) = (inputs(n, 1), inputs(n, 2), inputs(n, 3));
    let a = Tensor::from_vec_on(ha.clone(), [n], dev);
    let b = Tensor::from_vec_on(hb.clone(), [n], dev);
    let c = Tensor::from_vec_on(hc.clone(), [n], dev);
    for case in Case::ALL {
        for fuse in [true, false] {
            let got = with_fusion(dev, fuse, || case.build(&a, &b, &c).to_vec());
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
