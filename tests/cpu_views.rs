//! Transposed and concatenated reads against the reference, bit for bit, at sizes that cross the CPU backend's
//! tiles (64 rows x 4096 columns, staged 8 x 8 at a time), batches (1024 elements) and parts: odd sizes, slices,
//! broadcasts, empty parts. They run on every backend of `LAZOR_TEST_BACKENDS`.

mod common;

use common::{check, devices, stored_within, Rng};
use lazor::{DType, Device, Tensor};

/// A realized tensor of random values in [-2, 2).
fn stored(dev: &Device, rng: &mut Rng, shape: &[usize]) -> Tensor {
    stored_within(dev, rng, shape, 2.0).1
}

/// `t` equals the reference exactly: these kernels only move values and add or multiply them once.
#[track_caller]
fn exact(t: &Tensor, what: &str) {
    check(t, 0.0, 0.0, what);
}

#[test]
fn two_d_transposes_of_odd_sizes_match() {
    for dev in devices() {
        let mut rng = Rng::new(1);
        for (m, n) in
            [(1023, 517), (517, 1023), (17, 33), (1, 300), (300, 1), (5, 4100), (4100, 9), (70, 4099), (4100, 70)]
        {
            let a = stored(&dev, &mut rng, &[m, n]);
            let b = stored(&dev, &mut rng, &[n, m]);
            let what = |s: &str| format!("{s} of [{m}, {n}]");
            exact(&(a.t() + &b), &what("a.t() + b"));
            exact(&(a.t() * 2.0), &what("a.t() * 2"));
            exact(&a.t().contiguous(), &what("a.t().contiguous()"));
            exact(&(a.t() + b.t().t().t().t()), &what("two transposed operands"));
        }
    }
}

#[test]
fn three_d_permutes_match() {
    for dev in devices() {
        let mut rng = Rng::new(2);
        let shape = [13, 37, 29];
        let a = stored(&dev, &mut rng, &shape);
        for perm in [[0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
            let p = a.permute(perm);
            let b = stored(&dev, &mut rng, p.shape());
            exact(&(&p + &b), &format!("permute {perm:?} of {shape:?} plus a contiguous tensor"));
        }
        // Batched transposes, rows wider than a tile, and a permute whose contiguous axis is the outermost.
        for shape in [[3, 130, 2050], [2, 4500, 40]] {
            let a = stored(&dev, &mut rng, &shape);
            for perm in [[0, 2, 1], [2, 1, 0], [1, 2, 0]] {
                exact(&(a.permute(perm) * 3.0), &format!("permute {perm:?} of {shape:?}"));
            }
        }
    }
}

#[test]
fn sliced_broadcast_and_flipped_transposes_match() {
    for dev in devices() {
        let mut rng = Rng::new(3);
        let a = stored(&dev, &mut rng, &[1023, 517]);
        let t = a.t(); // [517, 1023]
        let row = stored(&dev, &mut rng, &[1, 1023]);
        let col = stored(&dev, &mut rng, &[517, 1]);
        exact(&(t.narrow(0, 3, 100).narrow(1, 5, 1001) * 2.0), "a narrowed transpose");
        exact(&(a.narrow(1, 7, 300).narrow(0, 2, 1000).t() + 1.0), "a transposed slice");
        exact(&(&t + &row), "a transpose plus a broadcast row");
        exact(&(&t * &col + &row), "a transpose times a broadcast column");
        exact(&(t.flip([1]) - &t), "a flipped transpose");
        let v = stored(&dev, &mut rng, &[517]);
        exact(&(v.unsqueeze(1).expand([517, 1023]) + &t), "an expanded column beside a transpose");
        exact(&(a.t().narrow(1, 0, 1).expand([517, 600]) + 0.5), "an expanded transposed column");
    }
}

#[test]
fn transposes_of_other_element_types_match() {
    for dev in devices() {
        let mut rng = Rng::new(4);
        let a = stored(&dev, &mut rng, &[301, 1029]);
        let b = stored(&dev, &mut rng, &[1029, 301]);
        for dt in [DType::F16, DType::BF16, DType::I32, DType::Bool] {
            let (a, b) = (a.to_dtype(dt), b.to_dtype(dt));
            a.realize().unwrap();
            let y = if dt == DType::Bool { a.t() ^ &b } else { a.t() + &b };
            exact(&y, &format!("a.t() with b of {dt}"));
        }
    }
}

#[test]
fn concatenations_with_odd_and_empty_parts_match() {
    for dev in devices() {
        let mut rng = Rng::new(5);
        let rows: Vec<Tensor> = [3, 1021, 0, 1, 2047].iter().map(|&m| stored(&dev, &mut rng, &[m, 517])).collect();
        let refs: Vec<&Tensor> = rows.iter().collect();
        exact(&(Tensor::cat(&refs, 0) * 2.0), "cat along 0 of odd and empty parts");
        exact(&(Tensor::cat(&refs[1..3], 0) + 1.0), "cat along 0 ending in an empty part");
        let cols: Vec<Tensor> = [1, 1029, 0, 3, 2].iter().map(|&n| stored(&dev, &mut rng, &[700, n])).collect();
        let refs: Vec<&Tensor> = cols.iter().collect();
        exact(&(Tensor::cat(&refs, 1) * 2.0), "cat along 1 of odd and empty parts");
        let c = Tensor::cat(&refs, 1);
        let d = stored(&dev, &mut rng, c.shape());
        exact(&(&c + &d), "cat along 1 plus a contiguous tensor");
        exact(&(c.narrow(1, 1, 1032) - 1.0), "a narrowed cat across seams");
        exact(&(Tensor::cat(&[&cols[1], &cols[1]], 1).narrow(1, 1030, 1000) * 3.0), "a narrowed cat in one part");
    }
}

#[test]
fn concatenations_of_views_nested_and_reduced_match() {
    for dev in devices() {
        let mut rng = Rng::new(6);
        let a = stored(&dev, &mut rng, &[517, 1023]);
        let b = stored(&dev, &mut rng, &[1023, 300]);
        let c = stored(&dev, &mut rng, &[700, 1023]);
        exact(&(Tensor::cat(&[&a, &b.t(), &c], 0) * 2.0), "cat of a transposed part");
        let ab = Tensor::cat(&[&a, &b.t()], 0);
        exact(&(ab.t() + 1.0), "a transposed cat");
        exact(&(Tensor::cat(&[&ab, &c], 0) - &Tensor::cat(&[&c, &ab], 0)), "nested cats");
        let x = stored(&dev, &mut rng, &[5, 7, 300]);
        let y = stored(&dev, &mut rng, &[5, 2, 300]);
        exact(&(Tensor::cat(&[&x, &y, &x], 1) * 0.5), "cat along a middle axis");
        // Sums of strided and concatenated elements: the fold order is the backend's, so close, not exact.
        check(&Tensor::cat(&[&a, &c], 0).sum(1), 1e-5, 1e-4, "row sums of a cat");
        check(&Tensor::cat(&[&a, &c], 0).sum(0), 1e-5, 1e-4, "column sums of a cat");
        check(&(a.t() + 1.0).sum(0), 1e-5, 1e-4, "column sums of a transpose");
        check(&(a.t() * 2.0).softmax(-1), 1e-5, 1e-6, "a softmax of a transpose");
    }
}

#[test]
fn the_shapes_of_the_benchmark_match() {
    for dev in devices() {
        let mut rng = Rng::new(7);
        let a = stored(&dev, &mut rng, &[1024, 1024]);
        let b = stored(&dev, &mut rng, &[1024, 1024]);
        exact(&(a.t() + &b), "a.t() + b at 1024x1024");
        exact(&(Tensor::cat(&[&a, &b], 0) * 2.0), "cat along 0 at 1024x1024");
        exact(&(Tensor::cat(&[&a, &b], 1) * 2.0), "cat along 1 at 1024x1024");
    }
}
