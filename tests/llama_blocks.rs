//! Llama-style blocks (`rms_norm`, rotary embeddings, SwiGLU, grouped-query attention over a `KvCache`) against
//! plain host implementations of Hugging Face's formulas in f64, values and gradients, on every backend; the cached
//! attention's plan reused at every position.

mod common;

use common::{assert_close, devices, Rng};
use lazor::nn::{self, functional as F, KvCache, Module, Rotary};
use lazor::{DType, Device, Tensor, Var};

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

fn f32s(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

/// `LlamaRMSNorm` over rows of `d`: `x / sqrt(mean(x^2) + eps) * w`.
fn rms_host(x: &[f64], d: usize, w: &[f64], eps: f64) -> Vec<f64> {
    x.chunks(d)
        .flat_map(|row| {
            let inv = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / d as f64 + eps).sqrt();
            row.iter().zip(w).map(move |(v, w)| v * inv * w)
        })
        .collect()
}

/// Llama's inverse frequencies, as Hugging Face computes them (f32).
fn inv_freq(d: usize, theta: f32) -> Vec<f64> {
    (0..d / 2).map(|i| (1.0 / theta.powf((2 * i) as f32 / d as f32)) as f64).collect()
}

/// `apply_rotary_pos_emb` on rows `[.., t, d]` at positions `start..start + t`: `x cos + rotate_half(x) sin`.
fn rotary_host(x: &[f64], t: usize, d: usize, start: usize, theta: f32) -> Vec<f64> {
    let inv = inv_freq(d, theta);
    let mut out = vec![0.0; x.len()];
    for (r, row) in x.chunks(d).enumerate() {
        let pos = (start + r % t) as f64;
        for i in 0..d {
            let angle = pos * inv[i % (d / 2)];
            let rotated = if i < d / 2 { -row[i + d / 2] } else { row[i - d / 2] };
            out[r * d + i] = row[i] * angle.cos() + rotated * angle.sin();
        }
    }
    out
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// Central differences of `sum(host(x) * w)` along each element of input `which`.
fn central(inputs: &[Vec<f64>], which: usize, w: &[f64], host: &dyn Fn(&[Vec<f64>]) -> Vec<f64>) -> Vec<f64> {
    let eps = 1e-5;
    let dot = |inputs: &[Vec<f64>]| host(inputs).iter().zip(w).map(|(a, b)| a * b).sum::<f64>();
    (0..inputs[which].len())
        .map(|j| {
            let mut at = inputs.to_vec();
            at[which][j] += eps;
            let up = dot(&at);
            at[which][j] -= 2.0 * eps;
            (up - dot(&at)) / (2.0 * eps)
        })
        .collect()
}

/// Checks the gradients of `sum(f(inputs) * w)` on every backend against central differences of `host`.
fn grad_check(
    what: &str,
    inputs: &[(Vec<usize>, Vec<f32>)],
    f: &dyn Fn(&[Tensor]) -> Tensor,
    host: &dyn Fn(&[Vec<f64>]) -> Vec<f64>,
) {
    let exact: Vec<Vec<f64>> = inputs.iter().map(|(_, v)| f64s(v)).collect();
    let n = host(&exact).len();
    let w: Vec<f64> = (0..n).map(|i| ((i * 37 % 17) as f64 - 8.0) / 8.0).collect();
    for dev in devices() {
        let vars: Vec<Var> =
            inputs.iter().map(|(s, v)| Var::new(Tensor::from_slice_on(v, s.as_slice(), &dev))).collect();
        let ts: Vec<Tensor> = vars.iter().map(Var::tensor).collect();
        let y = f(&ts);
        let loss = (&y * &Tensor::from_vec_on(f32s(&w), y.shape(), &dev)).sum_all();
        let grads = loss.backward();
        for (i, var) in vars.iter().enumerate() {
            let want = f32s(&central(&exact, i, &w, host));
            assert_close(&grads[var].to_vec(), &want, 2e-3, 2e-4, &format!("{what}: input {i} on {}", dev.name()));
        }
    }
}

#[test]
fn rms_norm_matches_llama_in_every_float_type_as_one_kernel() {
    let mut rng = Rng::new(1);
    for dev in devices() {
        for (dt, tol) in [(DType::F32, 1e-5), (DType::F16, 2e-3), (DType::BF16, 1.6e-2)] {
            for (rows, d) in [(3, 17), (8, 64), (2, 1000)] {
                let x = rng.vec(rows * d, -3.0, 3.0);
                let w = rng.vec(d, 0.5, 1.5);
                let xt = Tensor::from_slice_on(&x, [rows, d], &dev).to_dtype(dt);
                let wt = Tensor::from_slice_on(&w, [d], &dev).to_dtype(dt);
                lazor::realize(&[&xt, &wt]).unwrap();
                let (x, w) = (xt.to_dtype(DType::F32).to_vec(), wt.to_dtype(DType::F32).to_vec());
                let y = F::rms_norm(&xt, Some(&wt), 1e-6);
                assert_eq!(y.dtype(), dt);
                let before = dev.stats().dispatches;
                y.realize().unwrap();
                let what = format!("{} {dt} [{rows}, {d}]", dev.name());
                assert_eq!(dev.stats().dispatches - before, 1, "{what}: one kernel");
                let want = f32s(&rms_host(&f64s(&x), d, &f64s(&w), 1e-6));
                assert_close(&y.to_dtype(DType::F32).to_vec(), &want, tol, tol, &what);
            }
        }
        // The module: weight ones, named as Llama's checkpoints.
        let norm = nn::RmsNorm::new_on(5, 1e-5, &dev);
        assert_eq!(norm.parameters().iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["weight"]);
        let x = rng.vec(10, -1.0, 1.0);
        let want = f32s(&rms_host(&f64s(&x), 5, &[1.0; 5], 1e-5));
        assert_close(&norm.forward(&Tensor::from_slice_on(&x, [2, 5], &dev)).to_vec(), &want, 1e-5, 1e-6, "RmsNorm");
    }
}

#[test]
fn rms_norm_gradients_reach_the_input_and_the_weight() {
    let mut rng = Rng::new(2);
    let (x, w) = (rng.vec(3 * 6, -2.0, 2.0), rng.vec(6, 0.5, 1.5));
    grad_check("rms_norm", &[(vec![3, 6], x), (vec![6], w)], &|t| F::rms_norm(&t[0], Some(&t[1]), 1e-5), &|i| {
        rms_host(&i[0], 6, &i[1], 1e-5)
    });
}

#[test]
fn rotary_embedding_turns_each_half_with_the_other_as_hugging_face_does() {
    let mut rng = Rng::new(3);
    let (b, h, t, d, start, theta) = (2, 3, 5, 8, 7, 10000.0);
    for dev in devices() {
        let rope = Rotary::new_on(d, theta, &dev);
        let (cos, sin) = rope.cos_sin(&KvCache::positions(start, t, &dev));
        assert_eq!(cos.shape(), &[t, d]);
        for (dt, tol) in [(DType::F32, 2e-5), (DType::F16, 4e-3), (DType::BF16, 3e-2)] {
            let x = rng.vec(b * h * t * d, -2.0, 2.0);
            let xt = Tensor::from_slice_on(&x, [b, h, t, d], &dev).to_dtype(dt);
            xt.realize().unwrap();
            let x = xt.to_dtype(DType::F32).to_vec();
            let y = F::rotary_embedding(&xt, &cos, &sin);
            assert_eq!(y.dtype(), dt);
            let want = f32s(&rotary_host(&f64s(&x), t, d, start, theta));
            assert_close(&y.to_dtype(DType::F32).to_vec(), &want, tol, tol, &format!("{} {dt}", dev.name()));
        }
        // A device position gives the same angles.
        let at = Tensor::from_vec_on(vec![start as i32], [1], &dev);
        let (cos2, _) = rope.cos_sin(&KvCache::positions(&at, t, &dev));
        assert_eq!(cos2.to_vec(), cos.to_vec());
        let odd = Tensor::ones_on([2, 3], &dev);
        assert!(F::try_rotary_embedding(&odd, &cos, &sin).is_err(), "an odd last axis");
    }
}

#[test]
fn rotary_gradients_turn_back() {
    let mut rng = Rng::new(4);
    let (t, d) = (3, 6);
    let x = rng.vec(2 * t * d, -1.0, 1.0);
    grad_check(
        "rotary_embedding",
        &[(vec![2, t, d], x)],
        &|x| {
            let rope = Rotary::new_on(d, 500.0, x[0].device());
            let (cos, sin) = rope.cos_sin(&KvCache::positions(2usize, t, x[0].device()));
            F::rotary_embedding(&x[0], &cos, &sin)
        },
        &|i| rotary_host(&i[0], t, d, 2, 500.0),
    );
}

#[test]
fn swiglu_and_its_mlp_match_the_host() {
    let mut rng = Rng::new(5);
    let (g, u) = (rng.vec(12, -3.0, 3.0), rng.vec(12, -3.0, 3.0));
    let host = |i: &[Vec<f64>]| i[0].iter().zip(&i[1]).map(|(&g, &u)| silu(g) * u).collect::<Vec<f64>>();
    for dev in devices() {
        let y = F::swiglu(&Tensor::from_slice_on(&g, [3, 4], &dev), &Tensor::from_slice_on(&u, [3, 4], &dev));
        assert_close(&y.to_vec(), &f32s(&host(&[f64s(&g), f64s(&u)])), 1e-5, 1e-6, &dev.name());
        // The MLP: down(silu(gate x) * up x), named as Llama's.
        let mlp = nn::SwiGlu::new_on(4, 6, 9, &dev);
        let names: Vec<String> = mlp.parameters().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["gate_proj.weight", "up_proj.weight", "down_proj.weight"]);
        let x = rng.vec(2 * 4, -1.0, 1.0);
        let (wg, wu, wd) = (mlp.gate_proj.weight.to_vec(), mlp.up_proj.weight.to_vec(), mlp.down_proj.weight.to_vec());
        let mut want = Vec::new();
        for row in x.chunks(4) {
            let dot =
                |w: &[f32], r: usize, v: &[f64]| (0..v.len()).map(|c| w[r * v.len() + c] as f64 * v[c]).sum::<f64>();
            let xr = f64s(row);
            let hidden: Vec<f64> = (0..6).map(|r| silu(dot(&wg, r, &xr)) * dot(&wu, r, &xr)).collect();
            want.extend((0..4).map(|r| dot(&wd, r, &hidden)));
        }
        let got = mlp.forward(&Tensor::from_slice_on(&x, [2, 4], &dev)).to_vec();
        assert_close(&got, &f32s(&want), 1e-5, 1e-6, &format!("SwiGlu on {}", dev.name()));
    }
    grad_check("swiglu", &[(vec![3, 4], g), (vec![3, 4], u)], &|t| F::swiglu(&t[0], &t[1]), &host);
}

/// Causal attention of `q` (`[b, heads, t, d]` at positions `start..`) over keys and values of positions
/// `0..start + t` (`[b, kv, start + t, d]`), query head `h` reading kv head `h / (heads / kv)`.
#[allow(clippy::too_many_arguments)]
fn attention_host(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    b: usize,
    heads: usize,
    kv: usize,
    t: usize,
    len: usize,
    d: usize,
) -> Vec<f64> {
    let start = len - t;
    let mut out = vec![0.0; q.len()];
    for bi in 0..b {
        for h in 0..heads {
            let j = h / (heads / kv);
            for i in 0..t {
                let qrow = &q[((bi * heads + h) * t + i) * d..][..d];
                let key = |p: usize| &k[((bi * kv + j) * len + p) * d..][..d];
                let val = |p: usize| &v[((bi * kv + j) * len + p) * d..][..d];
                let scores: Vec<f64> = (0..=start + i)
                    .map(|p| qrow.iter().zip(key(p)).map(|(a, b)| a * b).sum::<f64>() / (d as f64).sqrt())
                    .collect();
                let top = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                let total: f64 = e.iter().sum();
                for c in 0..d {
                    out[((bi * heads + h) * t + i) * d + c] = (0..e.len()).map(|p| e[p] / total * val(p)[c]).sum();
                }
            }
        }
    }
    out
}

#[test]
fn cached_grouped_query_attention_matches_full_attention_and_plans_once() {
    let (b, heads, kv, d, max_len) = (2, 4, 2, 8, 12);
    for dev in devices() {
        let mut rng = Rng::new(6);
        let cache = KvCache::new_on(b, kv, max_len, d, DType::F32, &dev);
        // Every position's keys and values so far, [b, kv, len, d], for the host.
        let (mut keys, mut values): (Vec<Vec<f32>>, Vec<Vec<f32>>) =
            (vec![Vec::new(); b * kv], vec![Vec::new(); b * kv]);
        let mut step_stats = Vec::new();
        let mut start = 0;
        for t in [3, 1, 1, 1, 1, 1] {
            let (q, k, v) = (
                rng.vec(b * heads * t * d, -1.0, 1.0),
                rng.vec(b * kv * t * d, -1.0, 1.0),
                rng.vec(b * kv * t * d, -1.0, 1.0),
            );
            for (r, (kc, vc)) in k.chunks(t * d).zip(v.chunks(t * d)).enumerate() {
                keys[r].extend_from_slice(kc);
                values[r].extend_from_slice(vc);
            }
            let before = dev.stats();
            let (qt, kt, vt) = (
                Tensor::from_slice_on(&q, [b, heads, t, d], &dev),
                Tensor::from_slice_on(&k, [b, kv, t, d], &dev),
                Tensor::from_slice_on(&v, [b, kv, t, d], &dev),
            );
            cache.write(start, &kt, &vt);
            let y = cache.attend(&qt, start);
            let got = y.to_vec();
            let s = dev.stats();
            step_stats.push((
                s.dispatches - before.dispatches,
                s.plans_reused - before.plans_reused,
                s.pipelines_compiled - before.pipelines_compiled,
            ));
            let len = start + t;
            let want =
                attention_host(&f64s(&q), &f64s(&keys.concat()), &f64s(&values.concat()), b, heads, kv, t, len, d);
            assert_close(&got, &f32s(&want), 1e-4, 1e-5, &format!("{} at {start} (t = {t})", dev.name()));
            assert!(cache.keys.is_realized() && cache.values.is_realized());
            start = len;
        }
        // Decoding: the same kernels every token, the plan reused, nothing compiled after the first token.
        let decode = &step_stats[1..];
        assert!(decode.iter().all(|s| s.0 == decode[0].0), "{}: {step_stats:?}", dev.name());
        assert!(decode[1..].iter().all(|s| s.1 == 1 && s.2 == 0), "{}: {step_stats:?}", dev.name());
    }
}

#[test]
fn repeat_kv_repeats_each_head_in_place_and_attend_checks_its_inputs() {
    let dev = Device::cpu();
    let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let y = F::repeat_kv(&Tensor::from_slice_on(&x, [1, 3, 2, 2], &dev), 2);
    assert_eq!(y.shape(), &[1, 6, 2, 2]);
    let heads: Vec<f32> = (0..3).flat_map(|h| [&x[h * 4..h * 4 + 4], &x[h * 4..h * 4 + 4]].concat()).collect();
    assert_eq!(y.to_vec(), heads);
    let cache = KvCache::new_on(1, 2, 4, 2, DType::F32, &dev);
    assert!(cache.try_attend(&Tensor::ones_on([1, 3, 1, 2], &dev), 0usize).is_err(), "3 heads over 2 kv heads");
    assert!(cache.try_attend(&Tensor::ones_on([1, 2, 2, 2], &dev), 3usize).is_err(), "past the cache");
    assert!(cache.try_attend(&Tensor::ones_on([1, 2, 1, 2], &dev).to_dtype(DType::F16), 0usize).is_err());
}
