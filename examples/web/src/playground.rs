//! The tensor playground: a small expression language over a few named tensors, evaluated lazily on the page's
//! device, printed as `Display` prints, with the WGSL of the kernels the realize ran.
//!
//! ```text
//! expr    := term (("+" | "-") term)*
//! term    := unary (("*" | "/" | "@") unary)*
//! unary   := "-" unary | postfix
//! postfix := primary ("." name "(" args ")")*
//! primary := number | name | name "(" args ")" | "(" expr ")"
//! ```
//!
//! Names: `x` `[2, 3]`, `y` `[3]`, `w` `[3, 4]`, `m` `[4, 5]` (random); functions `arange(n)`, `ones(d..)`,
//! `randn(d..)`; methods as lazor's (`exp`, `sum(dim)`, `softmax(dim)`, `matmul(t)`, `reshape(d..)`, ...).

use crate::js_error;
use lazor::{DType, Device, Tensor};
use wasm_bindgen::prelude::*;

/// A value: a tensor, or a number (until it meets a tensor).
#[derive(Clone)]
enum Val {
    T(Tensor),
    N(f32),
}

type Res<T> = Result<T, String>;

/// A recursive-descent parser that evaluates as it goes (everything is lazy: nothing runs until the read).
struct Parser<'a> {
    src: &'a [u8],
    at: usize,
    dev: Device,
}

impl Parser<'_> {
    fn skip(&mut self) {
        while self.src.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip();
        self.src.get(self.at).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Res<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected `{}` at column {}", c as char, self.at + 1))
        }
    }

    fn name(&mut self) -> Option<String> {
        self.skip();
        let start = self.at;
        while self.src.get(self.at).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
            self.at += 1;
        }
        (self.at > start).then(|| String::from_utf8_lossy(&self.src[start..self.at]).into_owned())
    }

    fn number(&mut self) -> Option<f32> {
        self.skip();
        let start = self.at;
        while self.src.get(self.at).is_some_and(|c| c.is_ascii_digit() || *c == b'.' || *c == b'e') {
            self.at += 1;
        }
        std::str::from_utf8(&self.src[start..self.at]).ok()?.parse().ok()
    }

    fn expr(&mut self) -> Res<Val> {
        let mut v = self.term()?;
        loop {
            let op = match self.peek() {
                Some(b'+') => "+",
                Some(b'-') => "-",
                _ => return Ok(v),
            };
            self.at += 1;
            let rhs = self.term()?;
            v = self.combine(v, op, rhs)?;
        }
    }

    fn term(&mut self) -> Res<Val> {
        let mut v = self.unary()?;
        loop {
            let op = match self.peek() {
                Some(b'*') => "*",
                Some(b'/') => "/",
                Some(b'@') => "@",
                _ => return Ok(v),
            };
            self.at += 1;
            let rhs = self.unary()?;
            v = self.combine(v, op, rhs)?;
        }
    }

    /// `lhs op rhs`.
    fn combine(&self, lhs: Val, op: &str, rhs: Val) -> Res<Val> {
        if let (Val::N(a), Val::N(b)) = (&lhs, &rhs) {
            return Ok(Val::N(match op {
                "+" => a + b,
                "-" => a - b,
                "*" => a * b,
                "/" => a / b,
                _ => return Err("`@` needs two tensors".into()),
            }));
        }
        let (a, b) = (self.tensor(lhs), self.tensor(rhs));
        let out = match op {
            "+" => a.try_add(&b),
            "-" => a.try_sub(&b),
            "*" => a.try_mul(&b),
            "/" => a.try_div(&b),
            _ => a.try_matmul(&b),
        };
        out.map(Val::T).map_err(|e| e.to_string())
    }

    fn tensor(&self, v: Val) -> Tensor {
        match v {
            Val::T(t) => t,
            Val::N(n) => Tensor::full_on([], n, &self.dev),
        }
    }

    fn unary(&mut self) -> Res<Val> {
        if self.eat(b'-') {
            return Ok(match self.unary()? {
                Val::N(n) => Val::N(-n),
                Val::T(t) => Val::T(float(&t, "-")?.neg()),
            });
        }
        let mut v = self.primary()?;
        while self.eat(b'.') {
            let name = self.name().ok_or_else(|| format!("expected a method name at column {}", self.at + 1))?;
            let args = self.args()?;
            v = Val::T(method(&self.tensor(v), &name, &args)?);
        }
        Ok(v)
    }

    /// A parenthesized argument list.
    fn args(&mut self) -> Res<Vec<Val>> {
        self.expect(b'(')?;
        let mut args = Vec::new();
        if self.eat(b')') {
            return Ok(args);
        }
        loop {
            args.push(self.expr()?);
            if self.eat(b')') {
                return Ok(args);
            }
            self.expect(b',')?;
        }
    }

    fn primary(&mut self) -> Res<Val> {
        if self.eat(b'(') {
            let v = self.expr()?;
            self.expect(b')')?;
            return Ok(v);
        }
        if self.peek().is_some_and(|c| c.is_ascii_digit() || c == b'.') {
            return self.number().map(Val::N).ok_or_else(|| format!("bad number before column {}", self.at + 1));
        }
        let name = self.name().ok_or_else(|| match self.peek() {
            None => "unexpected end of the expression".to_string(),
            Some(c) => format!("unexpected `{}` at column {}", c as char, self.at + 1),
        })?;
        let dev = &self.dev.clone();
        Ok(Val::T(match name.as_str() {
            "x" => Tensor::from_vec_on(vec![1.0f32, -2.0, 3.0, -4.0, 5.0, -6.0], [2, 3], dev),
            "y" => Tensor::from_vec_on(vec![0.5f32, 1.0, 2.0], [3], dev),
            "w" => Tensor::arange_on(12, dev).reshape([3, 4]) / 10.0 - 0.5,
            "m" => Tensor::randn_on([4, 5], 7, dev),
            "arange" => {
                let n = ints(&self.args()?)?;
                match n[..] {
                    [n] if n >= 0 => Tensor::arange_on(n as usize, dev),
                    _ => return Err("arange takes one size".into()),
                }
            }
            "ones" | "randn" => {
                let dims: Vec<usize> = ints(&self.args()?)?.iter().map(|&d| d.max(0) as usize).collect();
                if dims.iter().product::<usize>() > 1 << 20 {
                    return Err(format!("{name}: at most 2^20 elements here"));
                }
                if name == "ones" {
                    Tensor::ones_on(dims, dev)
                } else {
                    Tensor::randn_on(dims, 1, dev)
                }
            }
            other => return Err(format!("unknown name `{other}`: try x, y, w, m, arange(n), ones(..), randn(..)")),
        }))
    }
}

/// Integer arguments.
fn ints(args: &[Val]) -> Res<Vec<isize>> {
    args.iter()
        .map(|a| match a {
            Val::N(n) if n.fract() == 0.0 => Ok(*n as isize),
            _ => Err("expected whole numbers".to_string()),
        })
        .collect()
}

/// `t`, if it holds floats (what the math methods take).
fn float<'a>(t: &'a Tensor, op: &str) -> Res<&'a Tensor> {
    match t.dtype() {
        DType::F32 | DType::F16 | DType::BF16 => Ok(t),
        d => Err(format!("{op}: needs a float tensor, not {d}")),
    }
}

/// `t.name(args)`.
fn method(t: &Tensor, name: &str, args: &[Val]) -> Res<Tensor> {
    let tensor_arg = || match args {
        [Val::T(u)] => Ok(u.clone()),
        [Val::N(n)] => Ok(Tensor::full_on([], *n, t.device())),
        _ => Err(format!("{name} takes one operand")),
    };
    let dim = || match ints(args)?[..] {
        [d] => Ok(d),
        _ => Err(format!("{name} takes one dimension")),
    };
    let e = |r: lazor::Result<Tensor>| r.map_err(|e| e.to_string());
    let unary = [
        ("exp", Tensor::exp as fn(&Tensor) -> Tensor),
        ("ln", Tensor::ln),
        ("sqrt", Tensor::sqrt),
        ("abs", Tensor::abs),
        ("relu", Tensor::relu),
        ("gelu", Tensor::gelu),
        ("sigmoid", Tensor::sigmoid),
        ("tanh", Tensor::tanh),
        ("sin", Tensor::sin),
        ("cos", Tensor::cos),
        ("square", Tensor::square),
        ("neg", Tensor::neg),
    ];
    if let Some((_, f)) = unary.iter().find(|(n, _)| *n == name) {
        if !args.is_empty() {
            return Err(format!("{name} takes no arguments"));
        }
        return Ok(f(float(t, name)?));
    }
    match name {
        "sum" if args.is_empty() => Ok(float(t, name)?.sum_all()),
        "mean" if args.is_empty() => Ok(float(t, name)?.mean_all()),
        "sum" => e(float(t, name)?.try_sum(dim()?)),
        "mean" => e(float(t, name)?.try_mean(dim()?)),
        "max" => e(t.try_max(dim()?)),
        "min" => e(t.try_min(dim()?)),
        "softmax" => e(float(t, name)?.try_softmax(dim()?)),
        "log_softmax" => e(float(t, name)?.try_log_softmax(dim()?)),
        "argmax" => e(t.try_argmax(dim()?)),
        "matmul" => e(t.try_matmul(&tensor_arg()?)),
        "maximum" => e(t.try_maximum(&tensor_arg()?)),
        "minimum" => e(t.try_minimum(&tensor_arg()?)),
        "t" => e(t.try_t()),
        "transpose" => match ints(args)?[..] {
            [a, b] => e(t.try_transpose(a, b)),
            _ => Err("transpose takes two dimensions".into()),
        },
        "permute" => e(t.try_permute(ints(args)?)),
        "reshape" => {
            let dims: Vec<usize> = ints(args)?.iter().map(|&d| d.max(0) as usize).collect();
            e(t.try_reshape(dims))
        }
        "narrow" => match ints(args)?[..] {
            [d, s, l] if s >= 0 && l >= 0 => e(t.try_narrow(d, s as usize, l as usize)),
            _ => Err("narrow takes a dimension, a start and a length".into()),
        },
        "unsqueeze" => e(t.try_unsqueeze(dim()?)),
        _ => Err(format!("unknown method `{name}`")),
    }
}

/// Evaluates `expr` on the page's device. Resolves to `{ display, dispatches, kernels: [{ name, wgsl }] }`:
/// the value as `Display` prints it, the dispatches its realize ran, and the WGSL of each (as the device compiles
/// it; on the CPU backend, the WGSL a WebGPU adapter would). Rejects with the parse or shape error.
#[wasm_bindgen]
pub fn evaluate(expr: String) -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(async move {
        let dev = crate::device()?;
        let mut p = Parser { src: expr.as_bytes(), at: 0, dev: dev.clone() };
        let v = p.expr().map_err(js_error)?;
        if let Some(c) = p.peek() {
            return Err(js_error(format!("unexpected `{}` at column {}", c as char, p.at + 1)));
        }
        let t = p.tensor(v);
        let kernels = lazor::debug::wgsl(&[&t]);
        let before = dev.stats().dispatches;
        let display = t.to_string_async().await.map_err(js_error)?;
        let out = js_sys::Object::new();
        let set = |k: &str, v: JsValue| js_sys::Reflect::set(&out, &k.into(), &v).map(drop);
        set("display", display.into())?;
        set("dispatches", JsValue::from_f64((dev.stats().dispatches - before) as f64))?;
        let list = js_sys::Array::new();
        for (name, wgsl) in kernels {
            let k = js_sys::Object::new();
            js_sys::Reflect::set(&k, &"name".into(), &name.into())?;
            js_sys::Reflect::set(&k, &"wgsl".into(), &wgsl.into())?;
            list.push(&k);
        }
        set("kernels", list.into())?;
        Ok(out.into())
    })
}
