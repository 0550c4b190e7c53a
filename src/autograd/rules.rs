//! The derivative rules: for each recorded op, its inputs' gradients from its output's, written once as lazy ops.

use super::tape::Rule;
use crate::op::{BinaryOp, ReduceOp, Tri, UnaryOp};
use crate::shape::Shape;
use crate::tensor::Tensor;
use smallvec::{smallvec, SmallVec};

/// Gradients of one op's inputs, in the rule's input order; `None` where an input needs none.
pub(crate) type Contributions = SmallVec<[Option<Tensor>; 3]>;

use crate::op::{GELU_2C, GELU_2CK};

/// Whether a unary op has a derivative rule. Exhaustive, so a new op must be placed on one side or the other.
#[cfg(test)]
pub(crate) fn unary_differentiable(op: UnaryOp) -> bool {
    use UnaryOp::*;
    match op {
        Neg | Exp | Ln | Sqrt | Rsqrt | Abs | Relu | Sigmoid | Tanh | Sin | Cos | Recip | Square | Gelu | Silu
        | Log1p | Expm1 | Erf => true,
        // Zero almost everywhere (and at the steps, as PyTorch).
        Floor | Ceil | Round | Sign => true,
        // Integer and bool only.
        Not => false,
    }
}

/// Whether a binary op has a derivative rule (comparisons give bools, the others are integer-only).
#[cfg(test)]
pub(crate) fn binary_differentiable(op: BinaryOp) -> bool {
    use BinaryOp::*;
    match op {
        Add | Sub | Mul | Div | Max | Min | Pow => true,
        Rem | And | Or | Xor | Lt | Le | Gt | Ge | Eq | Ne => false,
    }
}

/// Whether a fold has a derivative rule.
#[cfg(test)]
pub(crate) fn reduce_differentiable(op: ReduceOp) -> bool {
    match op {
        ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min => true,
    }
}

/// `g` (broadcast from `shape` by NumPy's rule) summed back to `shape`: the one rule for every broadcast operand.
pub(crate) fn sum_to(g: Tensor, shape: &Shape) -> Tensor {
    if g.shape == *shape {
        return g;
    }
    let dims = g.shape.dims().to_vec();
    let lead = dims.len() - shape.ndim();
    let axes: Vec<usize> =
        (0..dims.len()).filter(|&i| i < lead || (shape.dims()[i - lead] == 1 && dims[i] != 1)).collect();
    let folded = if !axes.is_empty() && axes.iter().enumerate().all(|(j, &a)| j == a) {
        // A leading block (a bias's gradient) is one fold over the merged axes, not one fold per axis.
        let k = axes.len();
        let mut merged = vec![dims[..k].iter().product::<usize>()];
        merged.extend_from_slice(&dims[k..]);
        g.reshape(merged).sum(0)
    } else {
        axes.iter().fold(g, |t, &a| t.sum_keepdim(a))
    };
    folded.reshape(shape.clone())
}

/// `1.0` where `mask`, else `0.0`, in `like`'s type.
fn ones_where(mask: &Tensor, like: &Tensor) -> Tensor {
    mask.to_dtype(like.dtype)
}

/// The gradients of `rule`'s inputs given its output's gradient `g`; `needs[i]` says whether input `i` wants one.
/// Runs with recording paused: everything it builds is untracked.
pub(crate) fn backward(rule: &Rule, g: &Tensor, needs: &[bool]) -> Contributions {
    let need = |i: usize| needs.get(i).copied().unwrap_or(false);
    match rule {
        Rule::Leaf(_) => smallvec![],
        Rule::Unary { op, x, y } => smallvec![Some(unary(*op, g, x, y))],
        Rule::Binary { op, a, b, y } => {
            let (ga, gb) = binary(*op, g, [a, b, y], need(0), need(1));
            smallvec![ga.map(|t| sum_to(t, &a.shape)), gb.map(|t| sum_to(t, &b.shape))]
        }
        Rule::Cast { from } => smallvec![from.is_float().then(|| g.to_dtype(*from))],
        Rule::Where { mask, t, f } => smallvec![
            None,
            need(1).then(|| sum_to(mask.where_cond(g, 0.0), t)),
            need(2).then(|| sum_to(mask.where_cond(0.0, g), f)),
        ],
        Rule::Reshape { from } => smallvec![Some(g.reshape(from.clone()))],
        Rule::Permute { dims } => {
            let mut inverse = vec![0usize; dims.len()];
            for (d, &src) in dims.iter().enumerate() {
                inverse[src] = d;
            }
            smallvec![Some(g.permute(inverse))]
        }
        // The backward pass keeps it as a piece instead, to join with the node's other pieces (`pending.rs`).
        Rule::Narrow { axis, start, extent } => smallvec![Some(pad(g, *axis, *start, *extent))],
        Rule::Expand { from } => smallvec![Some(sum_to(g.clone(), from))],
        Rule::Flip { axes } => smallvec![Some(g.flip(axes))],
        Rule::Unfold { axis, size, step, extent } => smallvec![Some(unfold_back(g, *axis, *size, *step, *extent))],
        // The gradient of a prefix sum is the suffix sum of the gradient.
        Rule::Cumsum { axis } => smallvec![Some(g.flip([*axis]).cumsum(*axis).flip([*axis]))],
        // As a fold's maximum: split evenly among the window's tied maxima.
        Rule::WindowMax { axes, x, y } => {
            let (mut at, mut gw) = (y.clone(), g.clone());
            for _ in 0..*axes {
                at = at.unsqueeze(-1);
                gw = gw.unsqueeze(-1);
            }
            let hit = ones_where(&x.eq(&at), g);
            let count = (1..=*axes).fold(hit.clone(), |c, a| c.sum_keepdim(-(a as isize)));
            smallvec![Some(hit * &(gw / &count))]
        }
        Rule::Cat { axis, sizes } => {
            let mut at = 0;
            sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let part = need(i).then(|| g.narrow(*axis, at, n));
                    at += n;
                    part
                })
                .collect()
        }
        Rule::Identity => smallvec![Some(g.clone())],
        Rule::Reduce { op, axis, x, y } => smallvec![Some(reduce(*op, *axis, g, x, y))],
        // An operand read transposed (a `Linear`'s `weight.t()`, an attention's `k.transpose(-2, -1)`) gets its
        // gradient computed in its source's layout, `(g^T a)^T` rather than `a^T g`: the source's consumers (an
        // optimizer's update, the stack of an attention's q, k and v gradients) then read the product at their own
        // index, in 16-byte vectors, and join its epilogue instead of starting a kernel of their own.
        // A triangular product's gradients are triangular products too (`Tri`'s modes are closed under this): with
        // L the kept triangle, `y = L(a b)` gives `da = L(g) b^T` and `db^T = L(g)^T a` (masks on A), `y = (L a) b`
        // gives `da = L(g b^T)` (a mask on the output) and `db = (L a)^T g` (on A).
        Rule::Matmul { a, b, tri } if *tri != Tri::Full => {
            // `Causal` is `OutLower` with -inf where it drops: a constant there, so the same gradients.
            let lower = matches!(tri, Tri::OutLower | Tri::Causal | Tri::ALower);
            let pick = |l: Tri, u: Tri| if lower { l } else { u };
            if matches!(tri, Tri::OutLower | Tri::OutUpper | Tri::Causal) {
                smallvec![
                    need(0).then(|| g.matmul_tri(&b.t(), pick(Tri::ALower, Tri::AUpper))),
                    need(1).then(|| g.t().matmul_tri(a, pick(Tri::AUpper, Tri::ALower)).t()),
                ]
            } else {
                smallvec![
                    need(0).then(|| {
                        if a.is_transposed() {
                            b.matmul_tri(&g.t(), pick(Tri::OutUpper, Tri::OutLower)).t()
                        } else {
                            g.matmul_tri(&b.t(), pick(Tri::OutLower, Tri::OutUpper))
                        }
                    }),
                    need(1).then(|| a.t().matmul_tri(g, pick(Tri::AUpper, Tri::ALower))),
                ]
            }
        }
        Rule::Matmul { a, b, .. } => smallvec![
            need(0).then(|| if a.is_transposed() { b.matmul(&g.t()).t() } else { g.matmul(&b.t()) }),
            need(1).then(|| if b.is_transposed() { g.t().matmul(a).t() } else { a.t().matmul(g) }),
        ],
        // Closed forms, so the backward of a softmax is one rows kernel rather than a chain of generic rules.
        Rule::Softmax { axis, y } => smallvec![Some(y * &(g - &(g * y).sum_keepdim(*axis)))],
        Rule::LogSoftmax { axis, y } => smallvec![Some(g - &(y.exp() * &g.sum_keepdim(*axis)))],
        Rule::LogSumExp { axis, x, y } => {
            smallvec![Some(g.unsqueeze(*axis) * &(x - &y.unsqueeze(*axis)).exp())]
        }
        // PyTorch's clamp passes the gradient on the bounds too (`min <= x <= max`).
        Rule::Clamp { x, min, max } => smallvec![Some((x.ge(*min) & x.le(*max)).where_cond(g, 0.0))],
        // The same mask and scale as the forward, recomputed from (seed, index) inside the gradient's kernel.
        Rule::Dropout { p, seed } => smallvec![Some(crate::tensor::random::dropout_values(g, *p, *seed))],
        Rule::Gather { axis, index, line, from } => {
            let zeros = Tensor::full_lane(from.clone(), 0, g.dtype, &g.device);
            smallvec![Some(zeros.scattered(*axis, index, line.as_ref(), g))]
        }
        Rule::ScatterAdd { axis, index, src } => {
            let picked = need(1).then(|| {
                // `src` may reach past the index: nothing of it landed there.
                let got = g.gathered(*axis, index, None);
                (0..src.ndim()).fold(got, |t, d| {
                    let (have, want) = (t.shape.dims()[d], src.dims()[d]);
                    if have < want {
                        pad(&t, d, 0, want)
                    } else {
                        t
                    }
                })
            });
            smallvec![need(0).then(|| g.clone()), picked]
        }
        // `(softmax - onehot) * g / rows`: one elementwise kernel over the logits.
        Rule::CrossEntropy { logits, targets, lse } => {
            let (rows, classes) = (logits.shape.dims()[0], logits.shape.dims()[1]);
            let onehot = targets.unsqueeze(1).eq(Tensor::arange_on(classes, &g.device));
            let soft = (logits - lse).exp();
            let scale = g * (1.0 / rows.max(1) as f32);
            smallvec![Some(onehot.where_cond(&soft - 1.0, &soft) * &scale), None]
        }
        Rule::BceWithLogits { x, t } => {
            let n = x.shape.broadcast(&t.shape).map_or(1, |s| s.numel()).max(1);
            let scale = g * (1.0 / n as f32);
            smallvec![
                need(0).then(|| sum_to((x.sigmoid() - t) * &scale, &x.shape)),
                need(1).then(|| sum_to(-(x * &scale), &t.shape)),
            ]
        }
    }
}

/// `g` placed at `start` along `axis` of an axis of extent `extent`, zeros around it: a concatenation, no copy.
pub(crate) fn pad(g: &Tensor, axis: usize, start: usize, extent: usize) -> Tensor {
    join(axis, extent, &[(start, g.clone())])
}

/// Disjoint `pieces` of an axis of extent `extent`, each `(start, values)` (sorted by start), placed along `axis`
/// with zeros in the gaps: one concatenation.
pub(crate) fn join(axis: usize, extent: usize, pieces: &[(usize, Tensor)]) -> Tensor {
    let first = &pieces[0].1;
    let zeros = |n: usize| {
        let mut dims = first.shape.dims().to_vec();
        dims[axis] = n;
        Tensor::full_lane(dims, 0, first.dtype, &first.device)
    };
    let mut parts = Vec::with_capacity(2 * pieces.len() + 1);
    let mut at = 0;
    for (start, t) in pieces {
        if *start > at {
            parts.push(zeros(start - at));
        }
        parts.push(t.clone());
        at = start + t.shape.dims()[axis];
    }
    if extent > at {
        parts.push(zeros(extent - at));
    }
    Tensor::cat(&parts.iter().collect::<Vec<_>>(), axis)
}

/// The gradient of `unfold(axis, size, step)` of an axis of extent `extent`: each window's gradient added back where
/// the window came from (overlapping windows add up, gaps between them get 0). Built lazily from views, with no
/// division in the index math: window element `i` of window `p` sits at `p * step + i`, which is row `p + i / step`
/// and column `i % step` of the axis cut into rows of `step`; so column `r` is a sum of the window elements
/// `i = r, r + step, ...`, each shifted down `i / step` rows (a concatenation with zeros), and the columns side by
/// side, merged back into one axis, are the gradient. With `step` 1 that is one column: a sum of shifted copies,
/// one kernel with its consumer; otherwise the merge stores the columns first.
fn unfold_back(g: &Tensor, axis: usize, size: usize, step: usize, extent: usize) -> Tensor {
    let mut dims = g.shape.dims()[..g.ndim() - 1].to_vec();
    let windows = dims[axis];
    dims[axis] = extent;
    if size == 0 || g.numel() == 0 {
        return Tensor::full_lane(dims, 0, g.dtype, &g.device);
    }
    let rows = extent.div_ceil(step);
    let mut columns: Vec<Option<Tensor>> = vec![None; step.min(size)];
    for i in 0..size {
        let shifted = pad(&g.narrow(-1, i, 1).squeeze(-1), axis, i / step, rows);
        let column = &mut columns[i % step];
        *column = Some(match column.take() {
            Some(sum) => sum + shifted,
            None => shifted,
        });
    }
    debug_assert!(windows <= rows);
    let mut parts: Vec<Tensor> =
        columns.into_iter().map(|c| c.expect("every column has a term").unsqueeze(axis + 1)).collect();
    if step > size {
        let mut gap = parts[0].shape.dims().to_vec();
        gap[axis + 1] = step - size;
        parts.push(Tensor::full_lane(gap, 0, g.dtype, &g.device));
    }
    let grid = Tensor::cat(&parts.iter().collect::<Vec<_>>(), axis + 1);
    let mut merged = dims.clone();
    merged[axis] = rows * step;
    grid.reshape(merged).narrow(axis, 0, extent)
}

fn unary(op: UnaryOp, g: &Tensor, x: &Tensor, y: &Tensor) -> Tensor {
    use UnaryOp::*;
    match op {
        Neg => -g,
        Exp => g * y,
        Ln => g / x,
        // sqrt'(0) = inf, as PyTorch.
        Sqrt => g / &(y * 2.0),
        Rsqrt => g * &(y * y * y * -0.5),
        // abs'(0) = 0, as PyTorch.
        Abs => x.gt(0.0).where_cond(g, x.lt(0.0).where_cond(-g, 0.0)),
        // relu'(0) = 0; read from the output, which is `> 0` exactly where the input is, so a relu fused into a
        // matmul's epilogue needs no stored pre-activation.
        Relu => y.gt(0.0).where_cond(g, 0.0),
        Sigmoid => g * &(y * &(1.0 - y)),
        Tanh => g * &(1.0 - &y.square()),
        Sin => g * &x.cos(),
        Cos => -(g * &x.sin()),
        Recip => -(g * &y.square()),
        Square => g * &(x * 2.0),
        // gelu(x) = x s with s = sigmoid(u), u = x (2c + 2ck x^2) (the op table's form): gelu' = s + x s (1 - s) u'.
        Gelu => {
            let s = (x * &(x * x * GELU_2CK + GELU_2C)).sigmoid();
            let du = x * x * (3.0 * GELU_2CK) + GELU_2C;
            g * &(&s + &(x * &s * &(1.0 - &s) * &du))
        }
        Silu => {
            let s = x.sigmoid();
            g * &(&s * &(x * &(1.0 - &s) + 1.0))
        }
        Log1p => g / &(x + 1.0),
        Expm1 => g * &(y + 1.0),
        // 2 / sqrt(pi) e^(-x^2).
        Erf => g * &((-x.square()).exp() * std::f32::consts::FRAC_2_SQRT_PI),
        // Zeros, not `g * 0`: an infinite or NaN gradient does not pass through a step (PyTorch's zeros_like).
        Floor | Ceil | Round | Sign => Tensor::full_lane(g.shape.clone(), 0, g.dtype, &g.device),
        Not => unreachable!("not is recorded only on floats, where it is undefined"),
    }
}

/// The gradients of `a` and `b` where asked for (`need_a`, `need_b`), at the output's shape.
fn binary(
    op: BinaryOp,
    g: &Tensor,
    [a, b, y]: [&Tensor; 3],
    need_a: bool,
    need_b: bool,
) -> (Option<Tensor>, Option<Tensor>) {
    use BinaryOp::*;
    // A tie splits the gradient half and half, as PyTorch's maximum and minimum.
    let share = |first: &Tensor, second: &Tensor| {
        let wins = if op == Max { first.gt(second) } else { first.lt(second) };
        wins.where_cond(g, first.eq(second).where_cond(g * 0.5, 0.0))
    };
    match op {
        Add => (need_a.then(|| g.clone()), need_b.then(|| g.clone())),
        Sub => (need_a.then(|| g.clone()), need_b.then(|| -g)),
        Mul => (need_a.then(|| g * b), need_b.then(|| g * a)),
        Div => (need_a.then(|| g / b), need_b.then(|| -(g * y) / b)),
        Max | Min => (need_a.then(|| share(a, b)), need_b.then(|| share(b, a))),
        // d/da = b a^(b-1) (0 where b = 0, as PyTorch), d/db = a^b ln a (0 where a = 0 and b >= 0).
        Pow => (
            need_a.then(|| b.eq(0.0).where_cond(0.0, g * b * &a.binary(Pow, &(b - 1.0)))),
            need_b.then(|| (a.eq(0.0) & b.ge(0.0)).where_cond(0.0, g * y * &a.ln())),
        ),
        Rem | And | Or | Xor | Lt | Le | Gt | Ge | Eq | Ne => unreachable!("{} is not differentiable", op.name()),
    }
}

fn reduce(op: ReduceOp, axis: usize, g: &Tensor, x: &Tensor, y: &Tensor) -> Tensor {
    match op {
        ReduceOp::Sum => g.expand(x.shape.clone()),
        // The product of the others: `y / x` while the row has no zero; with one zero, only that element gets
        // the product of the rest; with two or more, every product of the others is 0 (PyTorch's values).
        ReduceOp::Prod => {
            let zero = x.eq(0.0);
            let zeros = zero.to_dtype(x.dtype).sum_keepdim(axis);
            let others = zero.where_cond(1.0, x).prod_keepdim(axis);
            let lone = (zeros.eq(1.0) & zero).where_cond(others, 0.0);
            g * &zeros.eq(0.0).where_cond(y / x, lone)
        }
        // Split evenly among tied extremes, as `torch.amax`.
        ReduceOp::Max | ReduceOp::Min => {
            let hit = ones_where(&x.eq(y), g);
            let count = hit.sum_keepdim(axis);
            g * &hit / &count
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Device, Var};

    fn var(dev: &Device, values: &[f32]) -> Var {
        Var::new(Tensor::from_slice_on(values, [values.len()], dev))
    }

    /// Walks the op table: every op is either differentiable, and then `backward` gives a gradient through it, or
    /// listed as not, and then it never yields a tracked float. A new op fails here until it is placed.
    #[test]
    fn every_op_is_differentiable_or_listed_as_not() {
        let dev = Device::cpu();
        let a = var(&dev, &[0.5, 1.5, 2.0]);
        let b = var(&dev, &[1.25, 0.75, 3.0]);
        for op in UnaryOp::ALL {
            let y = a.try_unary(op);
            if unary_differentiable(op) {
                let y = y.expect("a differentiable op is defined on floats");
                let g = y.sum_all().backward();
                assert_eq!(g[&a].shape(), &[3], "{}", op.name());
                assert!(g[&a].to_vec().iter().all(|v| v.is_finite()), "{}", op.name());
            } else {
                assert!(y.is_err() || !y.unwrap().tracks_grad(), "{} is listed as not differentiable", op.name());
            }
        }
        for op in BinaryOp::ALL {
            let y = a.try_binary(op, &b);
            if binary_differentiable(op) {
                let g = y.expect("defined on floats").sum_all().backward();
                assert_eq!(g.len(), 2, "{}", op.name());
                assert!(g[&b].to_vec().iter().all(|v| v.is_finite()), "{}", op.name());
            } else {
                assert!(y.is_err() || !y.unwrap().tracks_grad(), "{} is listed as not differentiable", op.name());
            }
        }
        for op in ReduceOp::ALL {
            assert!(reduce_differentiable(op));
            let g = a.try_fold(op, 0, false).unwrap().backward();
            assert_eq!(g[&a].shape(), &[3], "{}", op.name());
        }
    }

    #[test]
    fn sum_to_folds_a_leading_block_once() {
        let dev = Device::cpu();
        let g = Tensor::ones_on([2, 3, 4], &dev);
        let s = sum_to(g.clone(), &Shape::from([4]));
        assert_eq!(s.to_vec(), vec![6.0; 4]);
        let s = sum_to(g, &Shape::from([3, 1]));
        assert_eq!(s.to_vec(), vec![8.0; 3]);
    }
}
