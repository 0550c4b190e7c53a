"""PyTorch beside lazor: the cases of docs/BENCHMARKS.md's tables, timed the way lazor's `bench` example times them.

Run on a CUDA machine: `python3 benches/torch_bench.py [section ...]`; sections (default all): copy, elementwise,
views, reductions, matmul, training (the training step is `benches/torch_train.py`). Each line is
`torch section=<s> case=<name> n=<elements> ms=<median ms> <rate>`.

Method: GPU time from CUDA events around a loop of 20 calls after 3 warm-up calls (as a pipelined loop of lazor
realizes runs), median of 3 such loops. Eager and torch.compile where compiling changes the kernels; compiled
results are checked against eager. TF32 is off. Rates count each input read once and each output written once
(GB/s = 1e9 bytes/s), TFLOP/s = 2 m n k / s: the same byte and FLOP counts as lazor's tables.
"""
import sys

import torch

from torch_cases import chain16, chain3, unary

import torch_timing as timing

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEV = "cuda"
SECTIONS = set(sys.argv[1:]) or {"copy", "elementwise", "views", "reductions", "matmul"}


def gpu_ms(f):
    return timing.gpu_ms(f, loops=3)


def line(section, case, n, ms, rate):
    timing.line(case, n, ms, rate, section)


def gbps(nbytes, ms):
    return f"gbps={nbytes / ms / 1e6:.1f}"


def tflops(flops, ms):
    return f"tflops={flops / ms / 1e9:.2f}"


def compiled(f, *args):
    """torch.compile of `f`, checked against eager on `args`."""
    g = torch.compile(f)
    want, got = f(*args), g(*args)
    assert torch.allclose(want, got, rtol=1e-4, atol=1e-5, equal_nan=True), f.__name__
    return g


def layer_norm(x):
    return (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, unbiased=False) + 1e-5).sqrt()


if "copy" in SECTIONS:
    # The device's own copy: the ceiling every memory-bound figure is compared with (8 bytes per element).
    for log2 in (20, 24, 26):
        n = 1 << log2
        a, out = torch.rand(n, device=DEV), torch.empty(n, device=DEV)
        line("copy", "copy", n, t := gpu_ms(lambda: out.copy_(a)), gbps(8 * n, t))

if "elementwise" in SECTIONS:
    for log2 in (20, 24, 26):
        n = 1 << log2
        a, b, c = (torch.rand(n, device=DEV) for _ in range(3))
        for f in (chain3, chain16, unary):
            g = compiled(f, a, b, c)
            line("elementwise", f"{f.__name__}_eager", n, t := gpu_ms(lambda: f(a, b, c)), gbps(16 * n, t))
            line("elementwise", f"{f.__name__}_compiled", n, t := gpu_ms(lambda: g(a, b, c)), gbps(16 * n, t))

if "views" in SECTIONS:
    for side in (4096, 8192):
        a, b = torch.rand(side, side, device=DEV), torch.rand(side, side, device=DEV)
        tadd = compiled(lambda x, y: x.t() + y, a, b)
        n = side * side
        line("views", "transpose_add_compiled", n, t := gpu_ms(lambda: tadd(a, b)), gbps(12 * n, t))
        line("views", "transpose_add_eager", n, t := gpu_ms(lambda: a.t() + b), gbps(12 * n, t))
        line("views", "plain_add", n, t := gpu_ms(lambda: a + b), gbps(12 * n, t))
    for log2 in (24, 26):
        n = 1 << log2
        a, b, a2 = torch.rand(n // 2, device=DEV), torch.rand(n // 2, device=DEV), torch.rand(n, device=DEV)
        cat = compiled(lambda x, y: torch.cat([x, y]) * 2.0, a, b)
        line("views", "cat_mul_compiled", n, t := gpu_ms(lambda: cat(a, b)), gbps(8 * n, t))
        line("views", "cat_mul_eager", n, t := gpu_ms(lambda: torch.cat([a, b]) * 2.0), gbps(8 * n, t))
        line("views", "plain_mul", n, t := gpu_ms(lambda: a2 * 2.0), gbps(8 * n, t))

if "reductions" in SECTIONS:
    n = 1 << 26
    a, b = torch.rand(n, device=DEV), torch.rand(n, device=DEV)
    dot = compiled(lambda x, y: (x * y).sum(), a, b)
    line("reductions", "sum_all", n, t := gpu_ms(lambda: a.sum()), gbps(4 * n, t))
    line("reductions", "dot_eager", n, t := gpu_ms(lambda: (a * b).sum()), gbps(8 * n, t))
    line("reductions", "dot_compiled", n, t := gpu_ms(lambda: dot(a, b)), gbps(8 * n, t))
    x = torch.rand(16384, 4096, device=DEV)
    line("reductions", "sum_rows", x.numel(), t := gpu_ms(lambda: x.sum(-1)), gbps(4 * x.numel(), t))
    line("reductions", "sum_cols", x.numel(), t := gpu_ms(lambda: x.sum(0)), gbps(4 * x.numel(), t))
    x = torch.rand(4096, 4096, device=DEV)
    soft, norm = compiled(lambda y: y.softmax(-1), x), compiled(layer_norm, x)
    for name, f in (("softmax_eager", lambda: x.softmax(-1)), ("softmax_compiled", lambda: soft(x)),
                    ("layernorm_eager", lambda: layer_norm(x)), ("layernorm_compiled", lambda: norm(x))):
        line("reductions", name, x.numel(), t := gpu_ms(f), gbps(8 * x.numel(), t))

if "matmul" in SECTIONS:
    def mm_case(name, shapes, f, flops, dtype=torch.float32):
        xs = [torch.rand(*s, device=DEV, dtype=dtype) - 0.5 for s in shapes]
        line("matmul", name, xs[0].numel(), t := gpu_ms(lambda: f(*xs)), tflops(flops, t))

    for n in (4096, 1024):
        mm_case(f"f32_{n}^3", [(n, n), (n, n)], torch.matmul, 2 * n ** 3)
    mm_case("f16_4096^3", [(4096, 4096), (4096, 4096)], torch.matmul, 2 * 4096 ** 3, torch.float16)
    mm_case("bf16_4096^3", [(4096, 4096), (4096, 4096)], torch.matmul, 2 * 4096 ** 3, torch.bfloat16)
    mm_case("relu(x@w+b)_4096", [(4096, 4096), (4096, 4096), (4096,)], lambda x, w, b: torch.relu(x @ w + b),
            2 * 4096 ** 3)
    mm_case("x@w.t()_4096", [(4096, 4096), (4096, 4096)], lambda x, w: x @ w.t(), 2 * 4096 ** 3)
    mm_case("bmm_64x256^3", [(64, 256, 256), (64, 256, 256)], torch.matmul, 2 * 64 * 256 ** 3)
    v, m = torch.rand(1, 4096, device=DEV), torch.rand(4096, 4096, device=DEV)
    line("matmul", "gemv_[1,4096]x[4096,4096]", m.numel(), t := gpu_ms(lambda: v @ m), gbps(4 * m.numel(), t))

if "training" in SECTIONS:
    # lazor's `bench training` cases at the same shapes: an embedding lookup and its gradient, cross-entropy.
    vocab, width, tokens = 50257, 768, 8192
    table = torch.randn(vocab, width, device=DEV)
    ids = torch.randint(0, vocab, (tokens,), device=DEV)
    g = torch.randn(tokens, width, device=DEV)
    rows = 4 * tokens * width
    line("training", "index_select", tokens, t := gpu_ms(lambda: table.index_select(0, ids)), gbps(2 * rows, t))
    line("training", "index_add", tokens, t := gpu_ms(lambda: torch.zeros_like(table).index_add_(0, ids, g)),
         gbps(2 * rows, t))
    logits = torch.randn(tokens, vocab, device=DEV, requires_grad=True)
    tgt = torch.randint(0, vocab, (tokens,), device=DEV)
    ce = torch.nn.functional.cross_entropy
    cce = torch.compile(lambda x, y: ce(x, y))
    n = tokens * vocab
    line("training", "cross_entropy_eager", n, t := gpu_ms(lambda: ce(logits, tgt)), gbps(4 * n, t))
    line("training", "cross_entropy_compiled", n, t := gpu_ms(lambda: cce(logits, tgt)), gbps(4 * n, t))
    line("training", "cross_entropy_fwd_bwd_eager", n, t := gpu_ms(lambda: ce(logits, tgt).backward()),
         gbps(12 * n, t))
    line("training", "cross_entropy_fwd_bwd_compiled", n, t := gpu_ms(lambda: cce(logits, tgt).backward()),
         gbps(12 * n, t))
    del logits
    x = torch.randn(64, 64, 56, 56, device=DEV, requires_grad=True)
    w = torch.randn(64, 64, 3, 3, device=DEV, requires_grad=True)
    flops = 2 * 64 * 64 * 56 * 56 * 64 * 9
    conv = torch.nn.functional.conv2d
    line("training", "conv2d_fwd", 64, t := gpu_ms(lambda: conv(x, w, padding=1)), tflops(flops, t))
    line("training", "conv2d_fwd_bwd", 64, t := gpu_ms(lambda: conv(x, w, padding=1).sum().backward()),
         tflops(3 * flops, t))
