//! Running a matmul kernel on the CPU: `gemm` on operands read in place or evaluated, then the epilogue.

use super::batch::{self, Out};
use super::map;
use crate::kernel::{Instr, Kernel, Kind};
use crate::shape::Shape;
use gemm::Parallelism;
use std::ops::Range;

/// An operand as gemm reads it: where each batch matrix's first element is in `data`, and the strides between rows
/// and between columns (of A: rows of the output and k; of B: k and columns of the output).
struct Operand<'a> {
    data: &'a [f32],
    bases: Vec<usize>,
    rows: isize,
    cols: isize,
}

impl<'a> Operand<'a> {
    /// Batch matrices of `rows` x `cols`, row-major, one after another.
    fn contiguous(data: &'a [f32], rows: usize, cols: usize, batches: usize) -> Operand<'a> {
        Operand { data, bases: (0..batches).map(|b| b * rows * cols).collect(), rows: cols as isize, cols: 1 }
    }

    fn ptr(&self, batch: usize) -> *const f32 {
        self.data.as_ptr().wrapping_add(self.bases[batch])
    }
}

/// The operand computed by instructions `range` over the domain `dims`, as a strided read of an input, when it is
/// exactly one load of frame 0 and every address it reaches is inside the input (gemm reads raw pointers, so a bad
/// view must fail on the evaluator's bounds checks instead). gemm takes any signed strides, zero included.
fn strided<'a>(k: &Kernel, range: Range<usize>, dims: &[usize], inputs: &[&'a [f32]]) -> Option<Operand<'a>> {
    let [Instr::Load { input, view, .. }] = &k.body[range] else { return None };
    if k.in_types[*input] != crate::dtype::DType::F32 {
        return None;
    }
    let r = dims.len();
    let (strides, offset): (Vec<i64>, i64) = match view {
        None => (Shape::from(dims).contiguous_strides().iter().map(|&s| s as i64).collect(), 0),
        Some(v) if v.frame == 0 => ((0..r).map(|d| k.signed(v.at + d)).collect(), k.signed(v.at + r)),
        Some(_) => return None,
    };
    let data = inputs[*input];
    let (mut lo, mut hi) = (offset, offset);
    for (&d, &s) in dims.iter().zip(&strides) {
        let span = (d as i64 - 1) * s;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    if dims.contains(&0) || lo < 0 || hi >= data.len() as i64 {
        return None;
    }
    let batch = &dims[..r - 2];
    let bases = (0..batch.iter().product())
        .map(|b| (offset + batch::unravel(b, batch).iter().zip(&strides).map(|(c, s)| c * s).sum::<i64>()) as usize)
        .collect();
    Some(Operand { data, bases, rows: strides[r - 2] as isize, cols: strides[r - 1] as isize })
}

/// The value of instruction `value`, computed by instructions `range`, at every coordinate of the domain `dims`, in
/// row-major order. The range is run on a copy of the kernel whose shape is that domain, so its loads see only
/// their own domain's coordinates.
fn evaluate(k: &Kernel, range: Range<usize>, value: usize, dims: &[usize], inputs: &[&[f32]]) -> Vec<f32> {
    let mut domain = k.clone();
    domain.shape = Shape::from(dims);
    domain.params[0] = domain.shape.numel() as u32;
    domain.dims_at = Some(domain.params.len());
    domain.params.extend(dims.iter().map(|&d| d as u32));
    let mut values = vec![0.0; domain.shape.numel()];
    let lanes = [k.types[value].lanes()];
    map::map(&domain, range, inputs, &[value], &lanes, &mut [values.as_mut_slice()], None);
    values
}

/// `dst` (batch matrices of `m` x `n`, row-major) = `a` x `b`, with an inner size `inner`. Many small products run in
/// parallel over the batch, each on one thread; otherwise gemm parallelizes each product itself.
fn multiply(a: &Operand, b: &Operand, dst: &mut [f32], m: usize, n: usize, inner: usize) {
    let batches = a.bases.len();
    debug_assert_eq!(dst.len(), batches * m * n);
    let out = Out(dst.as_mut_ptr());
    let one = |i: usize, par: Parallelism| {
        // SAFETY: `strided` checked that every address of a strided operand is inside its input, an evaluated one
        // has exactly its domain's elements, and batch `i` of `dst` is its own `m * n` elements, written by this
        // call alone. With `read_dst` false the destination is only written, whatever it held.
        unsafe {
            gemm::gemm(
                m,
                n,
                inner,
                out.at(i * m * n),
                1,
                n as isize,
                false,
                a.ptr(i),
                a.cols,
                a.rows,
                b.ptr(i),
                b.cols,
                b.rows,
                0.0,
                1.0,
                false,
                false,
                false,
                par,
            )
        }
    };
    let threads = crate::backend::par::threads();
    // gemm keeps a product below its threading threshold on one thread: only the batch can spread those.
    let small = m * n * inner < gemm::get_threading_threshold();
    if batches > 1 && (small || batches >= 4 * threads) {
        batch::tasks(batches, |i| one(i, Parallelism::None));
        return;
    }
    // On a pool thread, nested parallelism could run another of the caller's tasks on this thread (see `tasks`).
    #[cfg(not(target_arch = "wasm32"))]
    let par = if threads == 1 || crate::backend::par::on_pool_thread() {
        Parallelism::None
    } else {
        Parallelism::Rayon(threads)
    };
    #[cfg(target_arch = "wasm32")]
    let par = Parallelism::None;
    (0..batches).for_each(|i| one(i, par));
}

/// Runs a matmul kernel: the product of its operands over the output's batch, then its epilogue, each output
/// stored at the output's row-major index.
pub(super) fn matmul(k: &Kernel, inputs: &[&[f32]], outputs: &mut [&mut [f32]]) {
    let Kind::Matmul(mm) = k.kind else { unreachable!("a matmul kernel") };
    let numel = k.shape.numel();
    if numel == 0 {
        return;
    }
    let dims = k.shape.dims();
    let r = dims.len();
    let (m, n) = (dims[r - 2], dims[r - 1]);
    let inner = k.params[mm.k_at] as usize;
    let batches = numel / (m * n);
    let domain = |tail: [usize; 2]| -> Vec<usize> { dims[..r - 2].iter().copied().chain(tail).collect() };
    // The product goes straight to the output when the epilogue only stores it.
    let direct = k.body[mm.b_end..] == [Instr::Reduced]
        && matches!(k.outputs[..], [(_, v)] if v == mm.b_end)
        && k.out_types[0] == crate::dtype::DType::F32;
    let mut scratch = Vec::new();
    let product: &mut [f32] = if direct {
        &mut *outputs[0]
    } else {
        scratch = vec![0.0; numel];
        &mut scratch
    };
    if inner == 0 {
        product.fill(0.0);
    } else {
        let (da, db) = (domain([m, inner]), domain([inner, n]));
        let (mut a_values, b_values);
        // A whose triangle is kept is evaluated and its other triangle zeroed: gemm then computes the product of
        // what is kept.
        let masked_a = mm.tri.codes().1 != 0;
        let a = match strided(k, 0..mm.a_end, &da, inputs).filter(|_| !masked_a) {
            Some(a) => a,
            None => {
                a_values = evaluate(k, 0..mm.a_end, mm.a, &da, inputs);
                if masked_a {
                    keep_triangle(&mut a_values, m, inner, 0.0, |i, p| mm.tri.keeps_a(i, p));
                }
                Operand::contiguous(&a_values, m, inner, batches)
            }
        };
        let b = match strided(k, mm.a_end..mm.b_end, &db, inputs) {
            Some(b) => b,
            None => {
                b_values = evaluate(k, mm.a_end..mm.b_end, mm.b, &db, inputs);
                Operand::contiguous(&b_values, inner, n, batches)
            }
        };
        multiply(&a, &b, product, m, n, inner);
    }
    if mm.tri.codes().0 != 0 {
        keep_triangle(product, m, n, mm.tri.fill(), |i, j| mm.tri.keeps_out(i, j));
    }
    if !direct {
        let values: Vec<usize> = k.outputs.iter().map(|&(_, v)| v).collect();
        map::map(k, mm.b_end..k.body.len(), inputs, &values, &k.out_types, outputs, Some(&scratch));
    }
}

/// Stores `values` (the kernel's output in its own row-major layout) into `dst` through the kernel's store view,
/// whose strides and offset start at parameter `at` ([`Kernel::store_view`]).
pub(super) fn place(k: &Kernel, at: usize, values: &[f32], dst: &mut [f32]) {
    let dims = k.shape.dims();
    let r = dims.len();
    let n = dims[r - 1];
    if values.is_empty() {
        return;
    }
    let strides: Vec<i64> = (0..r).map(|d| k.signed(at + d)).collect();
    // The coordinates of the row being placed on every axis but the last, stepped like an odometer, and where the
    // row starts.
    let mut coords = vec![0usize; r - 1];
    let mut start = k.signed(at + r);
    for row in values.chunks(n) {
        for (j, &x) in row.iter().enumerate() {
            dst[(start + j as i64 * strides[r - 1]) as usize] = x;
        }
        for d in (0..r - 1).rev() {
            coords[d] += 1;
            start += strides[d];
            if coords[d] < dims[d] {
                break;
            }
            start -= strides[d] * dims[d] as i64;
            coords[d] = 0;
        }
    }
}

/// Sets the elements `(i, j)` of batch matrices of `rows` x `cols` (row-major, one after another) that `keeps`
/// drops to `fill`.
fn keep_triangle(values: &mut [f32], rows: usize, cols: usize, fill: f32, keeps: impl Fn(usize, usize) -> bool) {
    for (line, row) in values.chunks_mut(cols.max(1)).enumerate() {
        let i = line % rows.max(1);
        row.iter_mut().enumerate().filter(|(j, _)| !keeps(i, *j)).for_each(|(_, x)| *x = fill);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The product read element by element through the operands' strides, in f64.
    fn naive(a: &Operand, b: &Operand, m: usize, n: usize, inner: usize) -> Vec<f32> {
        let at = |o: &Operand, batch: usize, i: usize, j: usize| {
            o.data[(o.bases[batch] as isize + i as isize * o.rows + j as isize * o.cols) as usize] as f64
        };
        let mut out = Vec::new();
        for batch in 0..a.bases.len() {
            for i in 0..m {
                for j in 0..n {
                    out.push((0..inner).map(|p| at(a, batch, i, p) * at(b, batch, p, j)).sum::<f64>() as f32);
                }
            }
        }
        out
    }

    fn data(len: usize, seed: usize) -> Vec<f32> {
        (0..len).map(|i| ((i * 7919 + seed * 104729) % 997) as f32 / 997.0 - 0.5).collect()
    }

    /// gemm takes negative and zero strides (a flipped or broadcast operand) without a copy, at sizes that reach its
    /// small-matrix, packed and multi-threaded paths.
    #[test]
    fn gemm_takes_signed_and_zero_strides() {
        for &(m, n, inner, batches) in
            &[(3, 5, 7, 1), (2, 2, 1, 3), (17, 33, 9, 4), (70, 90, 130, 2), (200, 150, 300, 1)]
        {
            let len_a = m * inner + 7;
            let len_b = inner * n + 5;
            let (da, db) = (data(len_a, 1), data(len_b, 2));
            // A flipped along both axes (read from its end backwards), B broadcast along k (stride 0) or transposed.
            let a_flip = Operand { data: &da, bases: vec![m * inner - 1; batches], rows: -(inner as isize), cols: -1 };
            let a_row =
                Operand { data: &da, bases: (0..batches).map(|b| b % 3).collect(), rows: inner as isize, cols: 1 };
            let b_bcast = Operand { data: &db, bases: vec![2; batches], rows: 0, cols: 1 };
            let b_t = Operand { data: &db, bases: vec![0; batches], rows: 1, cols: inner as isize };
            let b_flip_cols = Operand { data: &db, bases: vec![n - 1; batches], rows: n as isize, cols: -1 };
            for (a, b) in [(&a_flip, &b_bcast), (&a_row, &b_t), (&a_flip, &b_flip_cols), (&a_row, &b_bcast)] {
                let mut dst = vec![f32::NAN; batches * m * n];
                multiply(a, b, &mut dst, m, n, inner);
                let want = naive(a, b, m, n, inner);
                for (x, y) in dst.iter().zip(&want) {
                    assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "{m}x{n}x{inner}: {x} vs {y}");
                }
            }
        }
    }

    /// A NaN in row i of A makes row i of the product NaN, and only that row.
    #[test]
    fn nan_propagates_by_row() {
        let (m, n, inner) = (40, 50, 60);
        let mut da = data(m * inner, 3);
        da[5 * inner + 17] = f32::NAN;
        let db = data(inner * n, 4);
        let a = Operand::contiguous(&da, m, inner, 1);
        let b = Operand::contiguous(&db, inner, n, 1);
        let mut dst = vec![0.0; m * n];
        multiply(&a, &b, &mut dst, m, n, inner);
        for (i, row) in dst.chunks(n).enumerate() {
            assert_eq!(row.iter().all(|x| x.is_nan()), i == 5, "row {i}");
            assert!(i == 5 || row.iter().all(|x| x.is_finite()));
        }
    }
}
