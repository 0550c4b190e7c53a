//! The seeded generator: random programs of valid steps, shapes and types inferred by building them.

use super::program::{apply, Num, Program, Read, Step, REDS};
use crate::common::Rng;
use lazor::half::{bf16, f16};
use lazor::op::{BinaryOp, UnaryOp};
use lazor::{DType, Device, Tensor};

const MAX_ELEMENTS: usize = 4096;

fn pick<T: Copy>(rng: &mut Rng, xs: &[T]) -> T {
    xs[rng.below(xs.len())]
}

fn chance(rng: &mut Rng, p: f32) -> bool {
    rng.uniform(0.0, 1.0) < p
}

fn random_shape(rng: &mut Rng) -> Vec<usize> {
    // Now and then one long axis: past a workgroup, past the CPU backend's batch of 1024.
    if chance(rng, 0.1) {
        let n = pick(rng, &[257, 1025, 1500, 4099]);
        return if chance(rng, 0.5) { vec![n] } else { vec![pick(rng, &[1, 2, 3]), n / 3] };
    }
    let rank = rng.below(5);
    let mut dims = Vec::with_capacity(rank);
    for _ in 0..rank {
        dims.push(if chance(rng, 0.04) { 0 } else { pick(rng, &[1, 1, 2, 3, 4, 5, 7, 8, 16]) });
    }
    while dims.iter().product::<usize>() > MAX_ELEMENTS {
        let i = rng.below(dims.len());
        dims[i] = (dims[i] / 2).max(1);
    }
    dims
}

fn random_dtype(rng: &mut Rng) -> DType {
    pick(rng, &[DType::F32, DType::F32, DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32, DType::Bool])
}

fn special(rng: &mut Rng) -> f32 {
    pick(rng, &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0, 1e30, -1e-30, 65504.0, 1.0])
}

/// Input lanes of `dt`: mostly moderate values, some special ones where the program asks for them.
pub fn random_lanes(rng: &mut Rng, n: usize, dt: DType, specials: bool) -> Vec<u32> {
    (0..n)
        .map(|_| match dt {
            DType::F32 | DType::F16 | DType::BF16 => {
                let v = if specials && chance(rng, 0.05) { special(rng) } else { rng.uniform(-3.0, 3.0) };
                match dt {
                    DType::F16 => f16::from_f32(v).to_f32().to_bits(),
                    DType::BF16 => bf16::from_f32(v).to_f32().to_bits(),
                    _ => v.to_bits(),
                }
            }
            DType::I32 => {
                if specials && chance(rng, 0.05) {
                    pick(rng, &[i32::MIN, i32::MAX, -1, 0]) as u32
                } else {
                    (rng.below(21) as i32 - 10) as u32
                }
            }
            DType::U32 => {
                if specials && chance(rng, 0.05) {
                    pick(rng, &[u32::MAX, 0, 1 << 31])
                } else {
                    rng.below(20) as u32
                }
            }
            DType::Bool => rng.below(2) as u32,
        })
        .collect()
}

fn input(rng: &mut Rng, shape: Vec<usize>, dtype: DType, specials: bool) -> Step {
    let n = shape.iter().product();
    Step::Input { lanes: random_lanes(rng, n, dtype, specials), shape, dtype }
}

/// A value whose shape broadcasts with `shape`, preferring equal shapes.
fn partner(rng: &mut Rng, vals: &[Tensor], shape: &[usize]) -> Option<usize> {
    let fits = |t: &Tensor| t.shape().iter().rev().zip(shape.iter().rev()).all(|(&a, &b)| a == b || a == 1 || b == 1);
    let same: Vec<usize> = (0..vals.len()).filter(|&i| vals[i].shape() == shape).collect();
    let ok: Vec<usize> = (0..vals.len()).filter(|&i| fits(&vals[i])).collect();
    if !same.is_empty() && chance(rng, 0.6) {
        return Some(pick(rng, &same));
    }
    (!ok.is_empty()).then(|| pick(rng, &ok))
}

/// One proposed step; it may not build (then the generator asks again).
fn propose(rng: &mut Rng, vals: &[Tensor], specials: bool) -> Step {
    let x = if chance(rng, 0.5) { vals.len() - 1 } else { rng.below(vals.len()) };
    let t = &vals[x];
    let (shape, nd) = (t.shape().to_vec(), t.ndim() as isize);
    let dim = |rng: &mut Rng| if nd == 0 { 0 } else { rng.below(2 * nd as usize) as isize - nd };
    match rng.below(20) {
        0 => {
            let (shape, dt) = (random_shape(rng), random_dtype(rng));
            input(rng, shape, dt, specials)
        }
        1 | 2 => Step::Unary { op: pick(rng, &UnaryOp::ALL), x },
        3..=5 => {
            let op = pick(rng, &BinaryOp::ALL);
            let y = partner(rng, vals, &shape);
            match y {
                Some(y) if chance(rng, 0.8) => Step::Binary { op, x, y },
                _ => {
                    let dt = if chance(rng, 0.5) { t.dtype() } else { random_dtype(rng) };
                    let s = broadcast_partner_shape(rng, &shape);
                    input(rng, s, dt, specials)
                }
            }
        }
        6 => {
            let s = match rng.below(3) {
                0 => Num::F(pick(rng, &[0.0, 1.0, -2.5, 0.5, 3.0, 1e-3, f32::INFINITY])),
                1 => Num::I(pick(rng, &[0, 1, -3, 7, i32::MAX])),
                _ => Num::U(pick(rng, &[0, 1, 5, u32::MAX])),
            };
            let op = pick(rng, &[BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div]);
            Step::Scalar { op, x, s, left: chance(rng, 0.3) }
        }
        7 => match rng.below(2) {
            0 => Step::Powf { x, p: pick(rng, &[2.0, 0.5, 3.0, -1.0, 1.5]) },
            _ => Step::Clamp { x, lo: pick(rng, &[-1.0, 0.0, -0.5]), hi: pick(rng, &[0.5, 1.0, 2.0]) },
        },
        8 => Step::Cast { x, dtype: random_dtype(rng) },
        9 => {
            let masks: Vec<usize> = (0..vals.len()).filter(|&i| vals[i].dtype() == DType::Bool).collect();
            if masks.is_empty() {
                let y = partner(rng, vals, &shape).unwrap_or(x);
                Step::Binary { op: pick(rng, &[BinaryOp::Lt, BinaryOp::Ge, BinaryOp::Ne]), x, y }
            } else {
                let c = pick(rng, &masks);
                let other = partner(rng, vals, vals[c].shape()).unwrap_or(x);
                Step::Where { c, a: x, b: other }
            }
        }
        10 => Step::Reshape { x, shape: refactor(rng, &shape) },
        11 => {
            let mut perm: Vec<usize> = (0..shape.len()).collect();
            for i in (1..perm.len()).rev() {
                perm.swap(i, rng.below(i + 1));
            }
            match rng.below(2) {
                0 => Step::Permute { x, perm },
                _ => Step::Transpose { x, a: dim(rng), b: dim(rng) },
            }
        }
        12 => {
            let d = dim(rng);
            let n = shape.get(((d + nd) % nd.max(1)) as usize).copied().unwrap_or(0);
            let start = rng.below(n + 1);
            Step::Narrow { x, dim: d, start, len: rng.below(n - start + 1) }
        }
        13 => match rng.below(4) {
            0 => Step::Squeeze { x, dim: dim(rng) },
            1 => Step::Unsqueeze { x, dim: rng.below(nd as usize + 1) as isize },
            2 => Step::Flatten { x },
            _ => Step::Contiguous { x },
        },
        14 => {
            let mut to: Vec<usize> =
                shape.iter().map(|&d| if d == 1 && chance(rng, 0.5) { pick(rng, &[2, 3]) } else { d }).collect();
            if chance(rng, 0.3) {
                to.insert(0, pick(rng, &[2, 3]));
            }
            Step::Expand { x, shape: to }
        }
        15 => {
            let d = dim(rng);
            let same: Vec<usize> = (0..vals.len()).filter(|&i| vals[i].shape() == shape.as_slice()).collect();
            let xs: Vec<usize> = (0..1 + rng.below(3)).map(|_| pick(rng, &same)).collect();
            if chance(rng, 0.5) {
                Step::Cat { xs, dim: d }
            } else {
                Step::Stack { xs, dim: rng.below(nd as usize + 1) as isize }
            }
        }
        16 if nd >= 1 && chance(rng, 0.3) => {
            // A slice written into a copy of `x`: a value of its shape, shorter along the axis, and its type.
            let d = rng.below(nd as usize);
            let extent = shape[d];
            let fits = |i: usize| {
                let o = vals[i].shape();
                vals[i].dtype() == t.dtype()
                    && o.len() == shape.len()
                    && (0..o.len()).all(|a| o[a] == shape[a] || (a == d && o[a] < shape[a]))
            };
            let values: Vec<usize> = (0..vals.len()).filter(|&i| i != x && fits(i)).collect();
            if values.is_empty() || chance(rng, 0.3) {
                let mut part = shape.clone();
                part[d] = rng.below(extent + 1);
                return input(rng, part, t.dtype(), specials);
            }
            let v = pick(rng, &values);
            let len = vals[v].shape()[d];
            let dim = if chance(rng, 0.5) { d as isize } else { d as isize - nd };
            Step::WriteAt { x, v, dim, start: rng.below(extent - len + 1) }
        }
        16..=18 => {
            let op = pick(rng, &REDS);
            let all = chance(rng, 0.2);
            Step::Reduce { op, x, dim: (!all).then(|| dim(rng)), keep: chance(rng, 0.3) }
        }
        _ if t.dtype().is_float() && nd >= 2 && chance(rng, 0.25) => {
            // Attention: keys of the queries' shape (or the queries themselves), values sharing the keys'
            // positions; whether causal, and so whether the triangular products run.
            let same = |shape: &[usize], dt: DType, keep: usize| -> Vec<usize> {
                let s = shape.len();
                let fits = |i: usize| {
                    let o = vals[i].shape();
                    vals[i].dtype() == dt
                        && o.len() == s
                        && o[..s - 2] == shape[..s - 2]
                        && o[s - keep..] == shape[s - keep..]
                };
                (0..vals.len()).filter(|&i| fits(i)).collect()
            };
            let k = pick(rng, &same(&shape, t.dtype(), 1));
            let key = vals[k].shape().to_vec();
            let positions = same(&key, t.dtype(), 2);
            let v = if chance(rng, 0.5) { k } else { pick(rng, &positions) };
            Step::Sdpa { q: x, k, v, causal: chance(rng, 0.6) }
        }
        _ => {
            // A product: find or make a right operand whose rows match this one's columns.
            let k = shape.last().copied().unwrap_or(1);
            let rhs: Vec<usize> = (0..vals.len())
                .filter(|&i| {
                    let s = vals[i].shape();
                    match s.len() {
                        0 => false,
                        1 => s[0] == k,
                        n => s[n - 2] == k,
                    }
                })
                .collect();
            if rhs.is_empty() || chance(rng, 0.3) {
                let n = pick(rng, &[1, 2, 3, 5, 17, 64]);
                let dt = pick(rng, &[DType::F32, DType::F32, DType::F16, DType::BF16]);
                let s = if chance(rng, 0.2) { vec![k] } else { vec![k, n] };
                input(rng, s, dt, specials)
            } else {
                Step::Matmul { x, y: pick(rng, &rhs) }
            }
        }
    }
}

fn random_shape_like(rng: &mut Rng, shape: &[usize]) -> Vec<usize> {
    shape.iter().map(|&d| if chance(rng, 0.3) { 1 } else { d }).collect()
}

/// A shape that broadcasts against `shape`: some axes 1, some leading axes dropped.
fn broadcast_partner_shape(rng: &mut Rng, shape: &[usize]) -> Vec<usize> {
    let mut s = random_shape_like(rng, shape);
    let drop = rng.below(s.len() + 1);
    s.drain(..drop);
    s
}

/// Another shape with the same number of elements.
fn refactor(rng: &mut Rng, shape: &[usize]) -> Vec<usize> {
    let n: usize = shape.iter().product();
    if n == 0 {
        return vec![0, pick(rng, &[1, 2])];
    }
    let mut rest = n;
    let mut dims = Vec::new();
    for f in [2, 3, 4, 5, 7, 8] {
        while rest % f == 0 && chance(rng, 0.4) {
            dims.push(f);
            rest /= f;
        }
    }
    dims.push(rest);
    if chance(rng, 0.3) {
        dims.insert(rng.below(dims.len() + 1), 1);
    }
    let len = dims.len();
    for i in (1..len).rev() {
        dims.swap(i, rng.below(i + 1));
    }
    dims
}

/// A random program: 3 to `max_steps` steps over 1-3 inputs, 1-3 outputs.
pub fn generate(seed: u64, max_steps: usize, scratch: &Device) -> Program {
    let mut rng = Rng::new(seed);
    let specials = chance(&mut rng, 0.5);
    let mut steps = Vec::new();
    let mut vals: Vec<Tensor> = Vec::new();
    let inputs = 1 + rng.below(3);
    for _ in 0..inputs {
        let (shape, dt) = (random_shape(&mut rng), random_dtype(&mut rng));
        let s = input(&mut rng, shape, dt, specials);
        vals.push(apply(&s, &vals, scratch).expect("an input builds"));
        steps.push(s);
    }
    let target = 3 + rng.below(max_steps.saturating_sub(2).max(1));
    let mut tries = 0;
    while steps.len() < target && tries < 400 {
        tries += 1;
        let s = propose(&mut rng, &vals, specials);
        if let Ok(t) = apply(&s, &vals, scratch) {
            if t.numel() <= MAX_ELEMENTS * 4 {
                vals.push(t);
                steps.push(s);
            }
        }
    }
    let last = steps.len() - 1;
    let mut outputs = vec![last];
    for _ in 0..rng.below(3) {
        // Any step may be read, inputs included (a read of uploaded data).
        let o = rng.below(steps.len());
        if !outputs.contains(&o) {
            outputs.push(o);
        }
    }
    let read = pick(&mut rng, &[Read::EachToVec, Read::Together, Read::RealizeEach]);
    Program { steps, outputs, read }
}
