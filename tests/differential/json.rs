//! Programs as JSON lines for `benches/differential_torch.py`: the steps, lazor's output lanes and their bounds.
//!
//! Floats are written as JSON numbers, with `NaN`, `Infinity` and `-Infinity` (which Python's `json` reads).

use super::program::{Num, Program, Red, Step};
use lazor::DType;

fn f(v: f32) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        format!("{v:?}")
    }
}

fn list<T>(xs: &[T], each: impl Fn(&T) -> String) -> String {
    format!("[{}]", xs.iter().map(each).collect::<Vec<_>>().join(","))
}

fn dt(d: DType) -> String {
    format!("\"{}\"", d.name())
}

/// A lane of `d` as a JSON number (bools as 0/1).
fn lane(d: DType, l: u32) -> String {
    match d {
        DType::I32 => (l as i32).to_string(),
        DType::U32 | DType::Bool => l.to_string(),
        _ => f(f32::from_bits(l)),
    }
}

fn red(op: Red) -> &'static str {
    match op {
        Red::Sum => "sum",
        Red::Mean => "mean",
        Red::Max => "max",
        Red::Min => "min",
        Red::Prod => "prod",
        Red::Var => "var",
        Red::Softmax => "softmax",
        Red::LogSoftmax => "log_softmax",
        Red::Logsumexp => "logsumexp",
        Red::Argmax => "argmax",
        Red::Argmin => "argmin",
    }
}

fn step(s: &Step) -> String {
    match s {
        Step::Input { shape, dtype, lanes } => format!(
            "{{\"op\":\"input\",\"shape\":{:?},\"dtype\":{},\"values\":{}}}",
            shape,
            dt(*dtype),
            list(lanes, |&l| lane(*dtype, l))
        ),
        Step::Unary { op, x } => format!("{{\"op\":\"unary\",\"name\":\"{}\",\"x\":{x}}}", op.name()),
        Step::Binary { op, x, y } => format!("{{\"op\":\"binary\",\"name\":\"{}\",\"x\":{x},\"y\":{y}}}", op.name()),
        Step::Scalar { op, x, s, left } => {
            let (v, ty) = match s {
                Num::F(v) => (f(*v), "f32"),
                Num::I(v) => (v.to_string(), "i32"),
                Num::U(v) => (v.to_string(), "u32"),
            };
            format!(
                "{{\"op\":\"scalar\",\"name\":\"{}\",\"x\":{x},\"s\":{v},\"stype\":\"{ty}\",\"left\":{left}}}",
                op.name()
            )
        }
        Step::Powf { x, p } => format!("{{\"op\":\"powf\",\"x\":{x},\"p\":{}}}", f(*p)),
        Step::Clamp { x, lo, hi } => format!("{{\"op\":\"clamp\",\"x\":{x},\"lo\":{},\"hi\":{}}}", f(*lo), f(*hi)),
        Step::Cast { x, dtype } => format!("{{\"op\":\"cast\",\"x\":{x},\"dtype\":{}}}", dt(*dtype)),
        Step::Where { c, a, b } => format!("{{\"op\":\"where\",\"c\":{c},\"a\":{a},\"b\":{b}}}"),
        Step::Reshape { x, shape } => format!("{{\"op\":\"reshape\",\"x\":{x},\"shape\":{shape:?}}}"),
        Step::Permute { x, perm } => format!("{{\"op\":\"permute\",\"x\":{x},\"perm\":{perm:?}}}"),
        Step::Transpose { x, a, b } => format!("{{\"op\":\"transpose\",\"x\":{x},\"a\":{a},\"b\":{b}}}"),
        Step::Narrow { x, dim, start, len } => {
            format!("{{\"op\":\"narrow\",\"x\":{x},\"dim\":{dim},\"start\":{start},\"len\":{len}}}")
        }
        Step::Squeeze { x, dim } => format!("{{\"op\":\"squeeze\",\"x\":{x},\"dim\":{dim}}}"),
        Step::Unsqueeze { x, dim } => format!("{{\"op\":\"unsqueeze\",\"x\":{x},\"dim\":{dim}}}"),
        Step::Expand { x, shape } => format!("{{\"op\":\"expand\",\"x\":{x},\"shape\":{shape:?}}}"),
        Step::Flatten { x } => format!("{{\"op\":\"flatten\",\"x\":{x}}}"),
        Step::Contiguous { x } => format!("{{\"op\":\"contiguous\",\"x\":{x}}}"),
        Step::Cat { xs, dim } => format!("{{\"op\":\"cat\",\"xs\":{xs:?},\"dim\":{dim}}}"),
        Step::Stack { xs, dim } => format!("{{\"op\":\"stack\",\"xs\":{xs:?},\"dim\":{dim}}}"),
        Step::Reduce { op, x, dim, keep } => format!(
            "{{\"op\":\"reduce\",\"name\":\"{}\",\"x\":{x},\"dim\":{},\"keep\":{keep}}}",
            red(*op),
            dim.map_or("null".to_string(), |d| d.to_string())
        ),
        Step::Matmul { x, y } => format!("{{\"op\":\"matmul\",\"x\":{x},\"y\":{y}}}"),
        Step::WriteAt { x, v, dim, start } => {
            format!("{{\"op\":\"write_at\",\"x\":{x},\"v\":{v},\"dim\":{dim},\"start\":{start}}}")
        }
        Step::Sdpa { q, k, v, causal } => {
            format!("{{\"op\":\"sdpa\",\"q\":{q},\"k\":{k},\"v\":{v},\"causal\":{causal}}}")
        }
    }
}

/// One program with lazor's results (`got`, lanes per output) and the bounds the reference check allowed.
pub fn program_line(
    seed: u64,
    p: &Program,
    shapes: &[Vec<usize>],
    dtypes: &[DType],
    got: &[Vec<u32>],
    bounds: &[Vec<f32>],
) -> String {
    let results: Vec<String> = p
        .outputs
        .iter()
        .enumerate()
        .map(|(k, &o)| {
            format!(
                "{{\"step\":{o},\"shape\":{:?},\"dtype\":{},\"values\":{},\"bound\":{}}}",
                shapes[o],
                dt(dtypes[o]),
                list(&got[k], |&l| lane(dtypes[o], l)),
                list(&bounds[k], |&b| f(b))
            )
        })
        .collect();
    // Each step with the shape and type lazor gave it, so a replay need not re-derive the promotion rules.
    let steps: Vec<String> = p
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let body = step(s);
            format!("{},\"out_shape\":{:?},\"out_dtype\":{}}}", &body[..body.len() - 1], shapes[i], dt(dtypes[i]))
        })
        .collect();
    format!("{{\"seed\":{seed},\"steps\":[{}],\"outputs\":[{}]}}", steps.join(","), results.join(","))
}
