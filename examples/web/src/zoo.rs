//! The suite's kernel zoo: one expression for each kind of kernel lazor generates (convolutions and pools, causal
//! attention's triangular products, scans, concatenations and pads, gathers and scatters, integer and bit ops,
//! bf16, the helpers behind `pow`, `erf`, `log1p` and the casts, random numbers, two-stage and streaming
//! reductions), each checked against the reference interpreter. On WebGPU this is what puts every generator's
//! WGSL through the browser's compiler, whose rules (uniformity, constant evaluation) are stricter than naga's.

use lazor::nn::functional::{layer_norm, scaled_dot_product_attention};
use lazor::{DType, Device, Tensor};

/// Each case: its name, the expression (f32, to be compared) and the tolerance.
pub fn cases(dev: &Device) -> Vec<(&'static str, Tensor, f32)> {
    let a = Tensor::randn_on([8, 12], 40, dev);
    let b = Tensor::randn_on([12], 41, dev);
    let img = Tensor::randn_on([2, 3, 9, 9], 42, dev);
    let filt = Tensor::randn_on([4, 3, 3, 3], 43, dev);
    let fbias = Tensor::randn_on([4], 44, dev);
    let (q, k, v) = (
        Tensor::randn_on([2, 7, 8], 45, dev),
        Tensor::randn_on([2, 7, 8], 46, dev),
        Tensor::randn_on([2, 7, 8], 47, dev),
    );
    let ints = Tensor::arange_on(24, dev).to_dtype(DType::I32).reshape([4, 6]);
    let idx = Tensor::from_vec_on(vec![3i32, 0, 11, 5, 5, 2, 7, 1], [8, 1], dev);
    let rows = Tensor::from_vec_on(vec![2i32, 0, 2, 7], [4], dev);
    let f = |t: Tensor| t.to_dtype(DType::F32);
    vec![
        ("conv2d 3x3, padding 1, bias", img.conv2d(&filt, Some(&fbias), (1, 1), (1, 1)), 1e-4),
        ("conv2d stride 2", img.conv2d(&filt, None, (2, 2), (0, 0)), 1e-4),
        (
            "max_pool2d and avg_pool2d",
            img.max_pool2d((2, 2), (2, 2)) + img.avg_pool2d((3, 3), (2, 2)).narrow(2, 0, 4).narrow(3, 0, 4),
            1e-5,
        ),
        ("causal attention", scaled_dot_product_attention(&q, &k, &v, true), 1e-4),
        ("attention", scaled_dot_product_attention(&q, &k, &v, false), 1e-4),
        (
            "tril of a product",
            a.matmul(&a.t()).tril(-1) + a.t().matmul(&a).triu(2).sum(0).unsqueeze(0).narrow(1, 0, 8),
            1e-4,
        ),
        ("cumsum", a.cumsum(-1) - a.cumsum(0), 1e-5),
        (
            "cat, stack",
            Tensor::cat(&[&a, &(&a * 2.0), &b.unsqueeze(0)], 0) + Tensor::stack(&[&b, &b.exp()], 0).sum(0),
            1e-5,
        ),
        ("pad, flip", a.pad(&[(1, 2), (0, 3)], 0.5).flip([0, 1]), 0.0),
        ("unfold", a.unfold(1, 4, 2).sum(-1), 1e-5),
        ("gather, index_select", a.gather(1, &idx) + a.index_select(0, &rows).sum_all(), 1e-5),
        (
            "index_add, scatter_add",
            a.index_add(0, &rows, &a.narrow(0, 0, 4)) + a.scatter_add(1, &idx, &a.narrow(1, 0, 1)),
            1e-5,
        ),
        ("one_hot", f(rows.one_hot(9)), 0.0),
        ("masked_fill -inf, softmax", a.masked_fill(&a.lt(-0.5), f32::NEG_INFINITY).softmax(-1), 1e-5),
        (
            "integers: % & | ^ and comparisons",
            f((&ints * 7 - 30) % 5) + f((&ints & 6) | (&ints ^ 3)) + f(ints.gt(10)),
            0.0,
        ),
        (
            "u32 and where",
            f(ints.to_dtype(DType::U32) * 3u32 / 2u32) + ints.ge(12).where_cond(f(ints.clone()), -1.0),
            0.0,
        ),
        ("bf16", f(a.to_dtype(DType::BF16) * 1.5 + 0.25), 1e-2),
        (
            "pow, powf, erf, log1p, expm1",
            (a.abs() + 0.5).pow(&b.clamp(-2.0, 2.0)) + a.powf(3.0) + a.erf() + a.abs().log1p() + (&a * 0.1).expm1(),
            1e-4,
        ),
        (
            "sign, round, floor, ceil, rsqrt, recip, silu",
            a.sign() + (&a * 3.0).round() + a.floor() - a.ceil()
                + (a.abs() + 1.0).rsqrt()
                + (a.abs() + 1.0).recip()
                + a.silu(),
            1e-5,
        ),
        ("float to int casts", f((&a * 10.0).to_dtype(DType::I32)) + f((a.abs() * 10.0).to_dtype(DType::U32)), 0.0),
        ("rand, dropout", Tensor::rand_on([33, 17], 48, dev) + Tensor::ones_on([33, 17], dev).dropout(0.3, 49), 0.0),
        (
            "logsumexp, argmin, var, prod",
            a.logsumexp(-1) + f(a.argmin(-1)) + a.var(-1) + (&a * 0.5).prod(-1) + a.min_all() + a.max_all(),
            1e-4,
        ),
        // Not `b.sin()` for the bias: WGSL promises `sin` only to 2^-11 absolute (SwiftShader is 2e-4 off here).
        ("layer_norm", layer_norm(&a, Some(&b), Some(&Tensor::randn_on([12], 52, dev)), 1e-5), 1e-4),
        (
            "losses",
            a.cross_entropy(&Tensor::from_vec_on(vec![1i32, 0, 11, 4, 4, 2, 9, 3], [8], dev))
                + a.mse_loss(&a.tanh())
                + a.binary_cross_entropy_with_logits(&a.sigmoid()),
            1e-4,
        ),
        ("two-stage column sum", Tensor::randn_on([20000, 3], 50, dev).sum(0), 1e-4),
        ("softmax of a long row", Tensor::randn_on([2, 70000], 51, dev).softmax(-1).max(-1), 1e-5),
    ]
}
