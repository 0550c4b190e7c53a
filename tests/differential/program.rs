//! Random tensor programs over the public API: their steps, building them on a device, and the seeded generator.

use lazor::half::{bf16, f16};
use lazor::op::{BinaryOp, Class, UnaryOp};
use lazor::{DType, Device, Result, Tensor};

/// A reduction as users call it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Red {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    Var,
    Softmax,
    LogSoftmax,
    Logsumexp,
    Argmax,
    Argmin,
}

pub const REDS: [Red; 11] = [
    Red::Sum,
    Red::Mean,
    Red::Max,
    Red::Min,
    Red::Prod,
    Red::Var,
    Red::Softmax,
    Red::LogSoftmax,
    Red::Logsumexp,
    Red::Argmax,
    Red::Argmin,
];

/// A Rust number on one side of an operator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    F(f32),
    I(i32),
    U(u32),
}

/// One step of a program; operands name earlier steps.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Data as lanes of `dtype` (floats as f32 bits already rounded to the type, bools as 0/1).
    Input {
        shape: Vec<usize>,
        dtype: DType,
        lanes: Vec<u32>,
    },
    Unary {
        op: UnaryOp,
        x: usize,
    },
    Binary {
        op: BinaryOp,
        x: usize,
        y: usize,
    },
    /// `x op s`, or `s op x` when `left`.
    Scalar {
        op: BinaryOp,
        x: usize,
        s: Num,
        left: bool,
    },
    Powf {
        x: usize,
        p: f32,
    },
    Clamp {
        x: usize,
        lo: f32,
        hi: f32,
    },
    Cast {
        x: usize,
        dtype: DType,
    },
    Where {
        c: usize,
        a: usize,
        b: usize,
    },
    Reshape {
        x: usize,
        shape: Vec<usize>,
    },
    Permute {
        x: usize,
        perm: Vec<usize>,
    },
    Transpose {
        x: usize,
        a: isize,
        b: isize,
    },
    Narrow {
        x: usize,
        dim: isize,
        start: usize,
        len: usize,
    },
    Squeeze {
        x: usize,
        dim: isize,
    },
    Unsqueeze {
        x: usize,
        dim: isize,
    },
    Expand {
        x: usize,
        shape: Vec<usize>,
    },
    Flatten {
        x: usize,
    },
    Contiguous {
        x: usize,
    },
    Cat {
        xs: Vec<usize>,
        dim: isize,
    },
    Stack {
        xs: Vec<usize>,
        dim: isize,
    },
    /// Along `dim`, or over everything (`_all`) when `None`.
    Reduce {
        op: Red,
        x: usize,
        dim: Option<isize>,
        keep: bool,
    },
    Matmul {
        x: usize,
        y: usize,
    },
    /// A tensor of its own holding `x`'s value with `v` (its shape but shorter along `dim`, its dtype) written
    /// into it along `dim` from `start` on: `write_at`.
    WriteAt {
        x: usize,
        v: usize,
        dim: isize,
        start: usize,
    },
    /// `scaled_dot_product_attention(q, k, v, causal)`.
    Sdpa {
        q: usize,
        k: usize,
        v: usize,
        causal: bool,
    },
}

impl Step {
    /// The operands: which earlier steps this one reads, as places to renumber.
    fn operands_mut(&mut self) -> Vec<&mut usize> {
        match self {
            Step::Input { .. } => vec![],
            Step::Binary { x, y, .. } | Step::Matmul { x, y } | Step::WriteAt { x, v: y, .. } => vec![x, y],
            Step::Where { c, a, b } => vec![c, a, b],
            Step::Sdpa { q, k, v, .. } => vec![q, k, v],
            Step::Cat { xs, .. } | Step::Stack { xs, .. } => xs.iter_mut().collect(),
            Step::Unary { x, .. }
            | Step::Scalar { x, .. }
            | Step::Powf { x, .. }
            | Step::Clamp { x, .. }
            | Step::Cast { x, .. }
            | Step::Reshape { x, .. }
            | Step::Permute { x, .. }
            | Step::Transpose { x, .. }
            | Step::Narrow { x, .. }
            | Step::Squeeze { x, .. }
            | Step::Unsqueeze { x, .. }
            | Step::Expand { x, .. }
            | Step::Flatten { x }
            | Step::Contiguous { x }
            | Step::Reduce { x, .. } => vec![x],
        }
    }

    /// The steps this one reads.
    pub fn inputs(&self) -> Vec<usize> {
        self.clone().operands_mut().into_iter().map(|x| *x).collect()
    }

    /// The same step reading `map[i]` where it read `i`.
    pub fn renumber(&self, map: &[usize]) -> Step {
        let mut s = self.clone();
        for x in s.operands_mut() {
            *x = map[*x];
        }
        s
    }
}

/// How a program's outputs are read back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Read {
    /// `to_vec` of each output in turn.
    EachToVec,
    /// `lazor::realize` of all of them (one realize), then a read of each.
    Together,
    /// `realize` of each in turn, then a read of each.
    RealizeEach,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub steps: Vec<Step>,
    pub outputs: Vec<usize>,
    pub read: Read,
}

fn num_of(s: Num) -> String {
    match s {
        Num::F(v) => float_literal(v),
        Num::I(v) => format!("{v}i32"),
        Num::U(v) => format!("{v}u32"),
    }
}

pub fn float_literal(v: f32) -> String {
    if v.is_nan() {
        "f32::NAN".into()
    } else if v == f32::INFINITY {
        "f32::INFINITY".into()
    } else if v == f32::NEG_INFINITY {
        "f32::NEG_INFINITY".into()
    } else {
        format!("{v:?}f32")
    }
}

/// Builds step `step` from the values before it.
pub fn apply(step: &Step, v: &[Tensor], dev: &Device) -> Result<Tensor> {
    Ok(match step {
        Step::Input { shape, dtype, lanes } => input(shape, *dtype, lanes, dev),
        Step::Unary { op, x } => {
            // The unary methods have no fallible form: an op defined neither on the type nor on floats panics.
            if !op.supports(v[*x].dtype().class()) && !op.supports(Class::Float) {
                return Err(lazor::Error::DType { op: op.name(), message: "skipped".into() });
            }
            unary(*op, &v[*x])
        }
        Step::Binary { op, x, y } => binary(*op, &v[*x], &v[*y])?,
        Step::Scalar { op, x, s, left } => scalar(*op, &v[*x], *s, *left),
        Step::Powf { x, p } => v[*x].powf(*p),
        Step::Clamp { x, lo, hi } => v[*x].clamp(*lo, *hi),
        Step::Cast { x, dtype } => v[*x].to_dtype(*dtype),
        Step::Where { c, a, b } => v[*c].try_where_cond(&v[*a], &v[*b])?,
        Step::Reshape { x, shape } => v[*x].try_reshape(shape.as_slice())?,
        Step::Permute { x, perm } => v[*x].try_permute(perm.as_slice())?,
        Step::Transpose { x, a, b } => v[*x].try_transpose(*a, *b)?,
        Step::Narrow { x, dim, start, len } => v[*x].try_narrow(*dim, *start, *len)?,
        Step::Squeeze { x, dim } => v[*x].try_squeeze(*dim)?,
        Step::Unsqueeze { x, dim } => v[*x].try_unsqueeze(*dim)?,
        Step::Expand { x, shape } => v[*x].try_expand(shape.as_slice())?,
        Step::Flatten { x } => v[*x].flatten(),
        Step::Contiguous { x } => v[*x].contiguous(),
        Step::Cat { xs, dim } => Tensor::try_cat(&xs.iter().map(|&i| &v[i]).collect::<Vec<_>>(), *dim)?,
        Step::Stack { xs, dim } => Tensor::try_stack(&xs.iter().map(|&i| &v[i]).collect::<Vec<_>>(), *dim)?,
        Step::Reduce { op, x, dim, keep } => reduce(*op, &v[*x], *dim, *keep)?,
        Step::Matmul { x, y } => v[*x].try_matmul(&v[*y])?,
        Step::Sdpa { q, k, v: w, causal } => {
            lazor::nn::functional::try_scaled_dot_product_attention(&v[*q], &v[*k], &v[*w], *causal)?
        }
        Step::WriteAt { x, v: w, dim, start } => {
            // A node of its own: a handle on `x` itself would see the write too.
            let out = Tensor::full_on(v[*x].shape(), true, dev).try_where_cond(&v[*x], &v[*x])?;
            out.try_write_at(*dim, *start, &v[*w])?;
            out
        }
    })
}

pub fn input(shape: &[usize], dtype: DType, lanes: &[u32], dev: &Device) -> Tensor {
    let shape = shape.to_vec();
    match dtype {
        DType::F32 => Tensor::from_vec_on(lanes.iter().map(|&l| f32::from_bits(l)).collect(), shape, dev),
        DType::F16 => {
            Tensor::from_vec_on(lanes.iter().map(|&l| f16::from_f32(f32::from_bits(l))).collect(), shape, dev)
        }
        DType::BF16 => {
            Tensor::from_vec_on(lanes.iter().map(|&l| bf16::from_f32(f32::from_bits(l))).collect(), shape, dev)
        }
        DType::I32 => Tensor::from_vec_on(lanes.iter().map(|&l| l as i32).collect(), shape, dev),
        DType::U32 => Tensor::from_vec_on(lanes.to_vec(), shape, dev),
        DType::Bool => Tensor::from_vec_on(lanes.iter().map(|&l| l != 0).collect(), shape, dev),
    }
}

pub fn unary(op: UnaryOp, x: &Tensor) -> Tensor {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Ln => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => x.rsqrt(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Relu => x.relu(),
        UnaryOp::Sigmoid => x.sigmoid(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Recip => x.recip(),
        UnaryOp::Square => x.square(),
        UnaryOp::Gelu => x.gelu(),
        UnaryOp::Silu => x.silu(),
        UnaryOp::Log1p => x.log1p(),
        UnaryOp::Expm1 => x.expm1(),
        UnaryOp::Erf => x.erf(),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round(),
        UnaryOp::Sign => x.sign(),
        UnaryOp::Not => !x,
    }
}

pub fn binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    match op {
        BinaryOp::Add => a.try_add(b),
        BinaryOp::Sub => a.try_sub(b),
        BinaryOp::Mul => a.try_mul(b),
        BinaryOp::Div => a.try_div(b),
        BinaryOp::Rem => a.try_rem(b),
        BinaryOp::Max => a.try_maximum(b),
        BinaryOp::Min => a.try_minimum(b),
        BinaryOp::Lt => a.try_lt(b),
        BinaryOp::Le => a.try_le(b),
        BinaryOp::Gt => a.try_gt(b),
        BinaryOp::Ge => a.try_ge(b),
        BinaryOp::Eq => a.try_eq(b),
        BinaryOp::Ne => a.try_ne(b),
        // The bitwise operators have no fallible form: the generator checks their types first.
        BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => {
            let ok = !a.dtype().is_float() && !b.dtype().is_float() && a.dtype().promote(b.dtype()).is_some();
            let shapes = broadcastable(a.shape(), b.shape());
            if !ok || !shapes {
                return Err(lazor::Error::DType { op: "bitwise", message: "skipped".into() });
            }
            Ok(match op {
                BinaryOp::And => a & b,
                BinaryOp::Or => a | b,
                _ => a ^ b,
            })
        }
        BinaryOp::Pow => a.try_pow(b),
    }
}

fn broadcastable(a: &[usize], b: &[usize]) -> bool {
    a.iter().rev().zip(b.iter().rev()).all(|(&x, &y)| x == y || x == 1 || y == 1)
}

pub fn scalar(op: BinaryOp, x: &Tensor, s: Num, left: bool) -> Tensor {
    macro_rules! go {
        ($s:expr) => {
            match (op, left) {
                (BinaryOp::Add, false) => x + $s,
                (BinaryOp::Add, true) => $s + x,
                (BinaryOp::Sub, false) => x - $s,
                (BinaryOp::Sub, true) => $s - x,
                (BinaryOp::Mul, false) => x * $s,
                (BinaryOp::Mul, true) => $s * x,
                (_, false) => x / $s,
                (_, true) => $s / x,
            }
        };
    }
    match s {
        Num::F(v) => go!(v),
        Num::I(v) => go!(v),
        Num::U(v) => go!(v),
    }
}

pub fn reduce(op: Red, x: &Tensor, dim: Option<isize>, keep: bool) -> Result<Tensor> {
    let Some(d) = dim else {
        return match op {
            Red::Sum => Ok(x.sum_all()),
            Red::Mean => Ok(x.mean_all()),
            Red::Max => x.try_max_all(),
            Red::Min => x.try_min_all(),
            _ => Err(lazor::Error::DType { op: "all", message: "no _all form".into() }),
        };
    };
    if keep {
        return match op {
            Red::Sum => x.try_sum_keepdim(d),
            Red::Mean => x.try_mean_keepdim(d),
            Red::Max => x.try_max_keepdim(d),
            Red::Min => x.try_min_keepdim(d),
            Red::Prod => x.try_prod_keepdim(d),
            Red::Var => x.try_var_keepdim(d),
            _ => Err(lazor::Error::DType { op: "keep", message: "no keepdim form".into() }),
        };
    }
    match op {
        Red::Sum => x.try_sum(d),
        Red::Mean => x.try_mean(d),
        Red::Max => x.try_max(d),
        Red::Min => x.try_min(d),
        Red::Prod => x.try_prod(d),
        Red::Var => x.try_var(d),
        Red::Softmax => x.try_softmax(d),
        Red::LogSoftmax => x.try_log_softmax(d),
        Red::Logsumexp => x.try_logsumexp(d),
        Red::Argmax => x.try_argmax(d),
        Red::Argmin => x.try_argmin(d),
    }
}

/// Builds every step of `p` on `dev`.
pub fn build(p: &Program, dev: &Device) -> Vec<Tensor> {
    let mut v: Vec<Tensor> = Vec::with_capacity(p.steps.len());
    for s in &p.steps {
        let t = apply(s, &v, dev).unwrap_or_else(|e| panic!("a generated step no longer builds: {s:?}: {e}"));
        v.push(t);
    }
    v
}

/// The program as Rust source a test can paste.
pub fn to_rust(p: &Program) -> String {
    let mut out = String::from("let dev = Device::cpu(); // or Device::new()?\n");
    for (i, s) in p.steps.iter().enumerate() {
        let line = match s {
            Step::Input { shape, dtype, lanes } => {
                let body = match dtype {
                    DType::I32 => lanes.iter().map(|&l| format!("{}i32", l as i32)).collect::<Vec<_>>(),
                    DType::U32 => lanes.iter().map(|&l| format!("{l}u32")).collect(),
                    DType::Bool => lanes.iter().map(|&l| format!("{}", l != 0)).collect(),
                    _ => lanes.iter().map(|&l| float_literal(f32::from_bits(l))).collect(),
                };
                let ty = match dtype {
                    DType::I32 => "i32",
                    DType::U32 => "u32",
                    DType::Bool => "bool",
                    _ => "f32",
                };
                let cast = if matches!(dtype, DType::F16 | DType::BF16) {
                    format!(".to_dtype(DType::{dtype:?})")
                } else {
                    String::new()
                };
                format!("Tensor::from_vec_on(Vec::<{ty}>::from([{}]), {shape:?}, &dev){cast}", body.join(", "))
            }
            Step::Unary { op, x } => match op {
                UnaryOp::Neg => format!("-&t{x}"),
                UnaryOp::Not => format!("!&t{x}"),
                _ => format!("t{x}.{}()", op.name()),
            },
            Step::Binary { op, x, y } => match op {
                BinaryOp::Add => format!("&t{x} + &t{y}"),
                BinaryOp::Sub => format!("&t{x} - &t{y}"),
                BinaryOp::Mul => format!("&t{x} * &t{y}"),
                BinaryOp::Div => format!("&t{x} / &t{y}"),
                BinaryOp::Rem => format!("&t{x} % &t{y}"),
                BinaryOp::And => format!("&t{x} & &t{y}"),
                BinaryOp::Or => format!("&t{x} | &t{y}"),
                BinaryOp::Xor => format!("&t{x} ^ &t{y}"),
                _ => format!("t{x}.{}(&t{y})", op.name()),
            },
            Step::Scalar { op, x, s, left } => {
                let sym = match op {
                    BinaryOp::Add => "+",
                    BinaryOp::Sub => "-",
                    BinaryOp::Mul => "*",
                    _ => "/",
                };
                if *left {
                    format!("{} {sym} &t{x}", num_of(*s))
                } else {
                    format!("&t{x} {sym} {}", num_of(*s))
                }
            }
            Step::Powf { x, p } => format!("t{x}.powf({})", float_literal(*p)),
            Step::Clamp { x, lo, hi } => format!("t{x}.clamp({}, {})", float_literal(*lo), float_literal(*hi)),
            Step::Cast { x, dtype } => format!("t{x}.to_dtype(DType::{dtype:?})"),
            Step::Where { c, a, b } => format!("t{c}.where_cond(&t{a}, &t{b})"),
            Step::Reshape { x, shape } => format!("t{x}.reshape({shape:?})"),
            Step::Permute { x, perm } => format!("t{x}.permute({perm:?})"),
            Step::Transpose { x, a, b } => format!("t{x}.transpose({a}, {b})"),
            Step::Narrow { x, dim, start, len } => format!("t{x}.narrow({dim}, {start}, {len})"),
            Step::Squeeze { x, dim } => format!("t{x}.squeeze({dim})"),
            Step::Unsqueeze { x, dim } => format!("t{x}.unsqueeze({dim})"),
            Step::Expand { x, shape } => format!("t{x}.expand({shape:?})"),
            Step::Flatten { x } => format!("t{x}.flatten()"),
            Step::Contiguous { x } => format!("t{x}.contiguous()"),
            Step::Cat { xs, dim } => format!("Tensor::cat(&[{}], {dim})", refs(xs)),
            Step::Stack { xs, dim } => format!("Tensor::stack(&[{}], {dim})", refs(xs)),
            Step::Reduce { op, x, dim, keep } => {
                let name = format!("{op:?}").to_lowercase().replace("logsoftmax", "log_softmax");
                match dim {
                    None => format!("t{x}.{name}_all()"),
                    Some(d) if *keep => format!("t{x}.{name}_keepdim({d})"),
                    Some(d) => format!("t{x}.{name}({d})"),
                }
            }
            Step::Matmul { x, y } => format!("t{x}.matmul(&t{y})"),
            Step::Sdpa { q, k, v, causal } => {
                format!("lazor::nn::functional::scaled_dot_product_attention(&t{q}, &t{k}, &t{v}, {causal})")
            }
            Step::WriteAt { x, v, dim, start } => format!(
                "{{ let o = Tensor::full_on(t{x}.shape(), true, &dev).where_cond(&t{x}, &t{x}); \
                 o.write_at({dim}, {start}usize, &t{v}); o }}"
            ),
        };
        out.push_str(&format!("let t{i} = {line};\n"));
    }
    let outs: Vec<String> = p.outputs.iter().map(|o| format!("&t{o}")).collect();
    out.push_str(&format!("// read ({:?}): {}\n", p.read, outs.join(", ")));
    out
}

fn refs(xs: &[usize]) -> String {
    xs.iter().map(|x| format!("&t{x}")).collect::<Vec<_>>().join(", ")
}
