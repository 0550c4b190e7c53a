//! The browser test suite: a subset of lazor's core tests run in the page on the chosen device, every value read
//! by an await, checked against `lazor::reference` (the CPU interpreter of the graph) or against finite
//! differences, and kernels counted through `Device::stats`. `tests.html` runs it; `tests/run.mjs` drives that
//! page in headless Chromium and fails on any failure. On `"webgpu"`, no WebGPU adapter is a failure, never a
//! fall-back to the CPU.

use crate::data::{self, Rng, CLASSES, PIXELS};
use lazor::nn::{self, Module};
use lazor::optim::{AdamW, AdamWConfig};
use lazor::{DType, Device, Error, Tensor, Var};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use wasm_bindgen::prelude::*;

type Outcome = Result<String, String>;

/// What a test gets: the device, where it notes the WGSL of what it realizes, and the filter of the run.
#[derive(Clone)]
struct Cx {
    dev: Device,
    wgsl: Rc<RefCell<Vec<(String, String)>>>,
    filter: Rc<str>,
}

impl Cx {
    /// Notes the WGSL of the kernels realizing `tensors` would run (before they run), for the driver to compile
    /// with the browser's own compiler and report its messages.
    fn note(&self, tensors: &[&Tensor]) {
        let mut all = self.wgsl.borrow_mut();
        for (name, src) in lazor::debug::wgsl(tensors) {
            if !all.iter().any(|(_, s)| *s == src) {
                all.push((name, src));
            }
        }
    }

    /// Dispatches so far.
    fn dispatches(&self) -> u64 {
        self.dev.stats().dispatches
    }
}

/// Fails with `msg` unless `cond`.
fn check(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

/// `got` within `tol` (relative, plus the same absolute near 0) of `want`, NaN where `want` is NaN.
fn close(what: &str, got: &[f32], want: &[f32], tol: f32) -> Result<(), String> {
    check(got.len() == want.len(), || format!("{what}: {} values, want {}", got.len(), want.len()))?;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() { g.is_nan() } else { (g - w).abs() <= tol * (1.0 + w.abs()) };
        check(ok, || format!("{what}: element {i} is {g}, want {w} (tolerance {tol})"))?;
    }
    Ok(())
}

/// `t` on the device against the reference interpreter, and the dispatches its realize ran.
async fn against_reference(cx: &Cx, what: &str, t: &Tensor, tol: f32) -> Result<u64, String> {
    web_sys::console::debug_1(&format!("suite: checking {what}").into());
    cx.note(&[t]);
    let want = lazor::reference::eval_async(&[t]).await.remove(0);
    let before = cx.dispatches();
    let got = t.to_vec_async().await.map_err(|e| e.to_string())?;
    close(what, &got, &want, tol)?;
    Ok(cx.dispatches() - before)
}

fn err(e: Error) -> String {
    e.to_string()
}

async fn elementwise_fusion(cx: Cx) -> Outcome {
    let x = Tensor::randn_on([64, 33], 1, &cx.dev);
    let y = Tensor::randn_on([33], 2, &cx.dev);
    lazor::realize_async(&[&x, &y]).await.map_err(err)?;
    let z = ((x.exp() + 1.0) * &y).relu() - x.tanh() / 2.0;
    let n = against_reference(&cx, "((exp(x) + 1) * y).relu() - tanh(x) / 2", &z, 1e-5).await?;
    check(n == 1, || format!("the chain of 7 ops over a broadcast ran {n} kernels, want 1"))?;
    let w = (x.sigmoid() * x.gelu()).sqrt().maximum(&(y.sin() * 0.5));
    // Transcendentals are as precise as the device's: WGSL promises `sin` only to 2^-11 absolute on [-pi, pi]
    // (SwiftShader's is up to 2e-4 off), halved here.
    let n = against_reference(&cx, "sqrt(sigmoid(x) gelu(x)) max sin(y) / 2", &w, 3e-4).await?;
    check(n == 1, || format!("the second chain ran {n} kernels, want 1"))?;
    Ok("two chains, one kernel each".into())
}

async fn views(cx: Cx) -> Outcome {
    let a = Tensor::randn_on([6, 8, 10], 3, &cx.dev);
    let row = Tensor::randn_on([8], 4, &cx.dev);
    lazor::realize_async(&[&a, &row]).await.map_err(err)?;
    let c = a.permute([2, 0, 1]).narrow(0, 3, 4);
    let d = a.narrow(2, 3, 4).permute([2, 0, 1]);
    let r = &c * 2.0 + &d + row.reshape([1, 1, 8]).expand([4, 6, 8]);
    let n = against_reference(&cx, "permute, narrow, expand", &r, 1e-6).await?;
    check(n == 1, || format!("views over one buffer ran {n} kernels, want 1"))?;
    let same = (&c - &d).abs().max_all();
    let m = same.to_scalar_async().await.map_err(err)?;
    check(m == 0.0, || format!("permute then narrow differs from narrow then permute by {m}"))?;
    let t = a.reshape([48, 10]).t().narrow(1, 5, 30) * 1.5;
    against_reference(&cx, "reshape, t, narrow", &t, 1e-6).await?;
    Ok("permute/narrow/expand fused into one kernel".into())
}

async fn reductions(cx: Cx) -> Outcome {
    let x = Tensor::randn_on([37, 300], 5, &cx.dev);
    let long = Tensor::randn_on([3, 5000], 6, &cx.dev);
    lazor::realize_async(&[&x, &long]).await.map_err(err)?;
    let cases: [(&str, Tensor, f32); 7] = [
        ("sum(-1)", x.sum(-1), 1e-4),
        ("sum(0)", x.sum(0), 1e-4),
        ("max(-1)", x.max(-1), 0.0),
        ("mean(0) of exp", x.exp().mean(0), 1e-4),
        ("sum(-1) of 5000", long.sum(-1), 1e-4),
        ("argmax(-1) as f32", x.argmax(-1).to_dtype(DType::F32), 0.0),
        ("layer norm", (&x - x.mean_keepdim(-1)) / (x.var_keepdim(-1) + 1e-5).sqrt(), 1e-4),
    ];
    for (what, t, tol) in &cases {
        against_reference(&cx, what, t, *tol).await?;
    }
    let n = against_reference(&cx, "softmax(-1)", &x.softmax(-1), 1e-5).await?;
    check(n == 1, || format!("softmax ran {n} kernels, want 1"))?;
    Ok(format!("{} reductions and softmax in one kernel", cases.len()))
}

async fn matmul(cx: Cx) -> Outcome {
    let a = Tensor::randn_on([33, 70], 7, &cx.dev);
    let b = Tensor::randn_on([70, 45], 8, &cx.dev);
    let bias = Tensor::randn_on([45], 9, &cx.dev);
    let p = Tensor::randn_on([3, 17, 20], 10, &cx.dev);
    let q = Tensor::randn_on([3, 20, 9], 11, &cx.dev);
    lazor::realize_async(&[&a, &b, &bias, &p, &q]).await.map_err(err)?;
    let y = (a.matmul(&b) + &bias).relu();
    let n = against_reference(&cx, "relu(a @ b + bias)", &y, 1e-4).await?;
    check(n == 1, || format!("a matmul with its bias and relu ran {n} kernels, want 1"))?;
    against_reference(&cx, "batched p @ q", &p.matmul(&q), 1e-4).await?;
    against_reference(&cx, "a.t() @ a", &a.t().matmul(&a), 1e-4).await?;
    let big = Tensor::randn_on([130, 260], 12, &cx.dev).matmul(&Tensor::randn_on([260, 70], 13, &cx.dev));
    against_reference(&cx, "[130, 260] @ [260, 70]", &big, 1e-4).await?;
    Ok("epilogue fused; batched, transposed and tiled products match".into())
}

/// The training losses of `steps` steps of a small MLP on one fixed batch, on `dev`, checking each step is one
/// realize.
async fn train_losses(cx: Option<&Cx>, dev: &Device, steps: usize) -> Result<Vec<f32>, String> {
    let mut rng = Rng::new(3);
    let set = data::make(96, &mut rng);
    let x = Tensor::from_vec_on(set.images, [set.labels.len(), PIXELS], dev);
    let y = Tensor::from_vec_on(set.labels, [96], dev);
    let model = nn::Sequential::new(vec![
        Box::new(nn::Linear::new_on(PIXELS, 32, true, 21, dev)),
        Box::new(nn::gelu),
        Box::new(nn::Linear::new_on(32, CLASSES, true, 22, dev)),
    ]);
    let mut opt = AdamW::new(&model.vars(), AdamWConfig { lr: 1e-2, ..AdamWConfig::default() });
    let mut losses = Vec::new();
    for step in 0..steps {
        let loss = model.forward(&x).cross_entropy(&y);
        let grads = loss.backward();
        if let (Some(cx), 0) = (cx, step) {
            let mut all: Vec<&Tensor> = vec![&loss];
            let g: Vec<Tensor> = model.vars().iter().map(|v| grads[v].clone()).collect();
            all.extend(g.iter());
            cx.note(&all);
        }
        let before = dev.stats().realizes;
        opt.try_step_with(&grads, &[&loss]).map_err(err)?;
        let realizes = dev.stats().realizes - before;
        check(realizes == 1, || format!("step {step}: forward, backward and update took {realizes} realizes, want 1"))?;
        losses.push(loss);
    }
    let refs: Vec<&Tensor> = losses.iter().collect();
    Ok(lazor::to_vecs_async(&refs).await.map_err(err)?.into_iter().map(|v| v[0]).collect())
}

async fn training_step(cx: Cx) -> Outcome {
    let steps = 25;
    let losses = train_losses(Some(&cx), &cx.dev, steps).await?;
    let (first, last) = (losses[0], losses[steps - 1]);
    check(last < 0.5 * first, || format!("the loss went from {first} to {last}: it should at least halve"))?;
    // The same run on the CPU backend (single-threaded in the page): the same losses up to rounding.
    let cpu = train_losses(None, &Device::cpu(), steps).await?;
    for (i, (g, c)) in losses.iter().zip(&cpu).enumerate() {
        let tol = if i == 0 { 1e-5 } else { 2e-3 };
        check((g - c).abs() <= tol * c.abs().max(1.0), || format!("step {i}: loss {g} here, {c} on the CPU backend"))?;
    }
    Ok(format!("{steps} AdamW steps, one realize each: loss {first:.4} -> {last:.4}, as on the CPU backend"))
}

/// `f(w)`'s gradient by central differences in f64, for `w` of `n` elements.
fn finite_differences(w: &[f32], f: impl Fn(&[f64]) -> f64) -> Vec<f32> {
    let h = 1e-5;
    let mut at: Vec<f64> = w.iter().map(|&v| f64::from(v)).collect();
    (0..w.len())
        .map(|i| {
            let v = at[i];
            at[i] = v + h;
            let up = f(&at);
            at[i] = v - h;
            let down = f(&at);
            at[i] = v;
            ((up - down) / (2.0 * h)) as f32
        })
        .collect()
}

fn host_data(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect()
}

async fn autograd_finite_differences(cx: Cx) -> Outcome {
    let (xs, ws, cs) = (host_data(15, 31), host_data(20, 32), host_data(12, 33));
    let x = Tensor::from_vec_on(xs.clone(), [3, 5], &cx.dev);
    let c = Tensor::from_vec_on(cs.clone(), [4, 3], &cx.dev);
    let w = Var::new(Tensor::from_vec_on(ws.clone(), [5, 4], &cx.dev));
    // sum(tanh(x w)^T * c) + 0.1 sum(w^2): a matmul, a transpose and elementwise ops on the way back.
    let loss = (x.matmul(&w).tanh().t() * &c).sum_all() + w.square().sum_all() * 0.1;
    let g = loss.backward()[&w].clone();
    cx.note(&[&g]);
    let got = g.to_vec_async().await.map_err(err)?;
    let f = |w: &[f64]| {
        let mut s = 0.0;
        for i in 0..3 {
            for j in 0..4 {
                let xw: f64 = (0..5).map(|k| f64::from(xs[i * 5 + k]) * w[k * 4 + j]).sum();
                s += xw.tanh() * f64::from(cs[j * 3 + i]);
            }
        }
        s + 0.1 * w.iter().map(|v| v * v).sum::<f64>()
    };
    close("d/dw of sum(tanh(x w)^T c) + 0.1 |w|^2", &got, &finite_differences(&ws, f), 1e-3)?;

    // Cross-entropy through softmax over 6 classes, and a bias broadcast over the rows.
    let (w2s, bs) = (host_data(30, 34), host_data(6, 35));
    let w2 = Var::new(Tensor::from_vec_on(w2s.clone(), [5, 6], &cx.dev));
    let b = Var::new(Tensor::from_vec_on(bs.clone(), [6], &cx.dev));
    let targets = [4i32, 0, 5];
    let y = Tensor::from_vec_on(targets.to_vec(), [3], &cx.dev);
    let loss = (x.matmul(&w2) + &*b).cross_entropy(&y);
    let grads = loss.backward();
    let (gw, gb) = (grads[&w2].clone(), grads[&b].clone());
    cx.note(&[&gw, &gb]);
    let got = lazor::to_vecs_async(&[&gw, &gb]).await.map_err(err)?;
    let ce = |w: &[f64], b: &[f64]| {
        let mut total = 0.0;
        for (i, &t) in targets.iter().enumerate() {
            let logits: Vec<f64> =
                (0..6).map(|j| (0..5).map(|k| f64::from(xs[i * 5 + k]) * w[k * 6 + j]).sum::<f64>() + b[j]).collect();
            let max = logits.iter().cloned().fold(f64::MIN, f64::max);
            let lse = max + logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
            total += lse - logits[t as usize];
        }
        total / targets.len() as f64
    };
    let b64: Vec<f64> = bs.iter().map(|&v| f64::from(v)).collect();
    let w64: Vec<f64> = w2s.iter().map(|&v| f64::from(v)).collect();
    close("d/dw of cross_entropy(x w + b)", &got[0], &finite_differences(&w2s, |w| ce(w, &b64)), 1e-3)?;
    close("d/db of cross_entropy(x w + b)", &got[1], &finite_differences(&bs, |b| ce(&w64, b)), 1e-3)?;
    Ok("3 gradients within 1e-3 of central differences".into())
}

async fn kernel_zoo(cx: Cx) -> Outcome {
    let mut cases = crate::zoo::cases(&cx.dev);
    if !"kernel_zoo".contains(&*cx.filter) {
        cases.retain(|(what, _, _)| what.contains(&*cx.filter));
    }
    let mut failed = Vec::new();
    for (what, t, tol) in &cases {
        if let Err(e) = against_reference(&cx, what, t, *tol).await {
            failed.push(e);
        }
    }
    check(failed.is_empty(), || format!("{} of {} failed: {}", failed.len(), cases.len(), failed.join("; ")))?;
    Ok(format!("{} kinds of kernel match the reference", cases.len()))
}

async fn half_precision(cx: Cx) -> Outcome {
    let x = Tensor::randn_on([301], 14, &cx.dev);
    let h = x.to_dtype(DType::F16);
    let y = (&h * 1.5 + 0.25).to_dtype(DType::F32);
    // Within a kernel f16 values compute in f32 and round once, where the reference rounds every op: an ulp apart.
    against_reference(&cx, "f16 arithmetic", &y, 1e-3).await?;
    let back = h.to_vec_as_async::<lazor::half::f16>().await.map_err(err)?;
    check(back.len() == 301, || format!("read {} f16 values, want 301", back.len()))?;
    Ok(match cx.dev.wgpu().map(|w| w.native_f16()) {
        None => "f16 in its own bits on the CPU backend".into(),
        Some(true) => "f16 bound natively (shader-f16)".into(),
        Some(false) => "f16 packed two to a word (no shader-f16)".into(),
    })
}

async fn grouped_dispatches(cx: Cx) -> Outcome {
    let p = Tensor::randn_on([50, 40], 15, &cx.dev);
    let q = Tensor::randn_on([70, 30], 16, &cx.dev);
    lazor::realize_async(&[&p, &q]).await.map_err(err)?;
    cx.dev.set_grouping(true);
    let (a, b) = (p.sum(-1), q.exp().max(0));
    cx.note(&[&a, &b]);
    let want = lazor::reference::eval_async(&[&a, &b]).await;
    let before = cx.dev.stats();
    let got = lazor::to_vecs_async(&[&a, &b]).await;
    cx.dev.set_grouping(false);
    let got = got.map_err(err)?;
    let after = cx.dev.stats();
    let (kernels, dispatches) = (after.kernels - before.kernels, after.dispatches - before.dispatches);
    close("grouped sum(-1)", &got[0], &want[0], 1e-4)?;
    close("grouped exp().max(0)", &got[1], &want[1], 1e-5)?;
    check(dispatches < kernels, || format!("{kernels} independent kernels ran in {dispatches} dispatches"))?;
    Ok(format!("{kernels} kernels in {dispatches} dispatch"))
}

async fn async_api(cx: Cx) -> Outcome {
    let x = Tensor::from_vec_on(vec![1.0f32, 2.5, -3.0, 4.0], [2, 2], &cx.dev);
    let shown = x.to_string_async().await.map_err(err)?;
    let want = format!(
        "tensor([[ 1.0000,  2.5000],\n        [-3.0000,  4.0000]], shape=[2, 2], dtype=f32, device={})",
        cx.dev.name()
    );
    check(shown == want, || format!("to_string_async gave {shown:?}, want {want:?}"))?;
    let (a, b) = (x.exp(), &x + 1.0);
    let before = cx.dev.stats().realizes;
    lazor::realize_async(&[&a, &b]).await.map_err(err)?;
    check(a.is_realized() && b.is_realized(), || "realize_async left a tensor unrealized".into())?;
    check(cx.dev.stats().realizes == before + 1, || "realize_async of two tensors took more than one realize".into())?;
    cx.dev.synchronize_async().await.map_err(err)?;
    let s = (&x * 2.0).sum_all().to_scalar_async().await.map_err(err)?;
    check(s == 9.0, || format!("to_scalar_async gave {s}, want 9"))?;
    let i = x.argmax(-1).to_vec_as_async::<i32>().await.map_err(err)?;
    check(i == [1, 1], || format!("argmax gave {i:?}, want [1, 1]"))?;
    let moved = x.to_device_async(&Device::cpu()).await.map_err(err)?;
    check(moved.to_vec() == [1.0, 2.5, -3.0, 4.0], || "to_device_async moved other values".into())?;
    // The blocking calls: on WebGPU in the page they fail at once, naming the twin to await; on the CPU they work.
    let blocking = x.try_to_vec();
    if cx.dev.is_cpu() {
        let values = blocking.map_err(err)?;
        check(values == [1.0, 2.5, -3.0, 4.0], || format!("try_to_vec on the CPU gave {values:?}"))?;
        cx.dev.synchronize().map_err(err)?;
        return Ok("to_string/realize/synchronize/to_scalar/to_vec_as/to_device async; blocking reads work".into());
    }
    let e = blocking.err().ok_or("try_to_vec on WebGPU returned values instead of failing")?;
    check(matches!(e, Error::WouldBlock { .. }) && e.to_string().contains("to_vec_async"), || format!("{e}"))?;
    let e = cx.dev.synchronize().err().ok_or("synchronize on WebGPU did not fail")?;
    check(e.to_string().contains("synchronize_async"), || format!("{e}"))?;
    let e = Device::new().err().ok_or("Device::new in the browser did not fail")?;
    check(e.to_string().contains("new_async"), || format!("{e}"))?;
    let printed = format!("{x}");
    check(printed.contains("to_string_async"), || format!("Display on WebGPU printed {printed:?}"))?;
    Ok("async twins work; blocking calls fail at once naming their twin".into())
}

type Test = fn(Cx) -> Pin<Box<dyn Future<Output = Outcome>>>;

macro_rules! tests {
    ($($name:ident),* $(,)?) => {
        [$((stringify!($name), (|cx| Box::pin($name(cx))) as Test)),*]
    };
}

/// Runs the suite on `backend` (`"webgpu"` or `"cpu"`): the tests whose name contains `filter`, or the cases of
/// the kernel zoo whose name does (empty: everything). Resolves to `{ device, results: [{ name, ok, detail, ms }],
/// wgsl: [{ name, wgsl }] }`: every test's outcome, and the WGSL of every kernel the tests ran, for the driver to
/// compile with the browser's own shader compiler.
#[wasm_bindgen]
pub fn run_suite(backend: String, filter: String) -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(async move {
        let results = js_sys::Array::new();
        let out = js_sys::Object::new();
        let set = |o: &js_sys::Object, k: &str, v: JsValue| js_sys::Reflect::set(o, &k.into(), &v).map(drop);
        let record = |name: &str, outcome: &Outcome, ms: f64| -> Result<(), JsValue> {
            let r = js_sys::Object::new();
            set(&r, "name", name.into())?;
            set(&r, "ok", outcome.is_ok().into())?;
            set(&r, "detail", outcome.as_ref().unwrap_or_else(|e| e).as_str().into())?;
            set(&r, "ms", ms.into())?;
            results.push(&r);
            Ok(())
        };
        let dev = match backend.as_str() {
            "cpu" => Device::cpu(),
            _ => match Device::new_async().await {
                Ok(d) if !d.is_cpu() => d,
                Ok(d) => return Err(crate::js_error(format!("WebGPU asked for, {} opened", d.name()))),
                Err(e) => {
                    record("open WebGPU", &Err(format!("no WebGPU device: {e}")), 0.0)?;
                    set(&out, "device", "none".into())?;
                    set(&out, "results", results.clone().into())?;
                    set(&out, "wgsl", js_sys::Array::new().into())?;
                    return Ok(out.into());
                }
            },
        };
        set(&out, "device", crate::describe(&dev).into())?;
        let zoo_cases: Vec<&str> = crate::zoo::cases(&dev).iter().map(|c| c.0).collect();
        let zoo_matches = zoo_cases.iter().any(|c| c.contains(&filter));
        let cx = Cx { dev, wgsl: Rc::default(), filter: filter.as_str().into() };
        let all = tests![
            elementwise_fusion,
            views,
            reductions,
            matmul,
            training_step,
            autograd_finite_differences,
            kernel_zoo,
            half_precision,
            grouped_dispatches,
            async_api,
        ];
        for (name, test) in all {
            if !(name.contains(&filter) || name == "kernel_zoo" && zoo_matches) {
                continue;
            }
            let start = js_sys::Date::now();
            web_sys::console::debug_1(&format!("suite: {backend}: {name}").into());
            let outcome = test(cx.clone()).await;
            // An error WebGPU reported while the test ran shows at the next call; catch it here, on this test.
            let outcome = match (outcome, cx.dev.synchronize_async().await) {
                (Ok(_), Err(e)) => Err(format!("the device reported: {e}")),
                (o, _) => o,
            };
            record(name, &outcome, js_sys::Date::now() - start)?;
        }
        let wgsl = js_sys::Array::new();
        for (name, src) in cx.wgsl.borrow().iter() {
            let k = js_sys::Object::new();
            set(&k, "name", name.as_str().into())?;
            set(&k, "wgsl", src.as_str().into())?;
            wgsl.push(&k);
        }
        set(&out, "results", results.into())?;
        set(&out, "wgsl", wgsl.into())?;
        Ok(out.into())
    })
}
