"""PyTorch's side of docs/BENCHMARKS.md: every case a lazor table stands beside, timed on the same GPU.

Run it on a CUDA machine, from anywhere:

    python3 benches/torch_reference.py                  # the default groups (all but gpt_fast and decode)
    python3 benches/torch_reference.py matmul train gpt # only these groups
    python3 benches/torch_reference.py --list           # the groups and what each times

Run it in the same device call as lazor's `cargo bench --bench report -- <section>` (or `train_step`, `train_gpt`),
one process after the other: the GPU's clock and driver then match, and figures from different calls are not
compared.

Each figure is one line, `torch section=<group> case=<name> n=<size> ms=<ms> <rate>`; `n` is the problem size the
case names (elements, a side, a batch or a parameter count). Rates count each input read once and each output
written once, as lazor's tables do: GB/s is 1e9 bytes per second, TFLOP/s is 2 m n k per second.

How it times: GPU time from CUDA events around a loop of calls after warm-up calls (`torch_timing.gpu_ms`), which
is how a loop of lazor realizes runs when nothing synchronizes in between. Cases marked "wall" (read-backs, tiny
realizes) are host wall time, synchronized, since their cost is the round trip. TF32 is off except where a case's
name says tf32. torch.compile cases are compiled and warmed up before timing, so compile time is never counted.
"""
import contextlib
import statistics
import sys
import time

import torch

from torch_cases import chain16, chain3, unary

import torch_timing
from torch_timing import kernel_count

DEV = "cuda"
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

SIZES = (1 << 20, 1 << 24, 1 << 26)  # the elementwise and reduction sizes of lazor's sections

GROUPS = {}  # name -> (function, one-line description, in the default run)


def group(name, about, default=True):
    """Registers a group of cases under the name given on the command line."""
    def register(f):
        GROUPS[name] = (f, about, default)
        return f
    return register


class Out:
    """Prints the lines of one group."""

    def __init__(self, section):
        self.section = section

    def gbps(self, case, n, ms, nbytes):
        torch_timing.line(case, n, ms, f"gbps={nbytes / ms / 1e6:.1f}", self.section)

    def tflops(self, case, n, ms, flops):
        torch_timing.line(case, n, ms, f"tflops={flops / ms / 1e9:.2f}", self.section)

    def plain(self, case, n, ms, extra):
        torch_timing.line(case, n, ms, extra, self.section)


def gpu(f, reps=20):
    """Median GPU ms per call over three loops of `reps` calls."""
    return torch_timing.gpu_ms(f, reps=reps, loops=3)


def wall_ms(f, reps=100):
    """Median host wall time of one call, in ms, `f` synchronizing itself where it must."""
    for _ in range(5):
        f()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def rand(*shape, dtype=torch.float32):
    return torch.rand(*shape, device=DEV, dtype=dtype)


def dtype_name(dt):
    return str(dt).rsplit(".", 1)[-1]


def layer_norm(x):
    """A layer norm without weights, as lazor's reductions section writes it."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / (var + 1e-5).sqrt()


EXPRESSIONS = (chain3, chain16, unary)
_compiled = {}


def compiled(f):
    """One torch.compile per function for the whole run, so each compiles once."""
    if f not in _compiled:
        _compiled[f] = torch.compile(f)
    return _compiled[f]


@group("copy", "the device's own copy at 2^20, 2^24, 2^26 (8 bytes per element): the memory ceiling")
def copy_cases(out):
    for n in SIZES:
        src, dst = rand(n), torch.empty(n, device=DEV)
        out.gbps("copy", n, gpu(lambda: dst.copy_(src)), 8 * n)


@group("elementwise", "chain3, chain16, unary, eager and compiled, at 2^20, 2^24, 2^26")
def elementwise_cases(out):
    for n in SIZES:
        a, b, c = rand(n), rand(n), rand(n)
        for f in EXPRESSIONS:
            out.gbps(f"{f.__name__}_eager", n, gpu(lambda: f(a, b, c)), 16 * n)
            g = compiled(f)
            out.gbps(f"{f.__name__}_compiled", n, gpu(lambda: g(a, b, c)), 16 * n)


@group("reduce", "sum_all and a dot product at 2^20-2^26; row and column sums of three matrices")
def reduce_cases(out):
    dot = torch.compile(lambda a, b: (a * b).sum())
    for n in SIZES:
        a, b = rand(n), rand(n)
        out.gbps("sum_all", n, gpu(lambda: a.sum()), 4 * n)
        out.gbps("dot_eager", n, gpu(lambda: (a * b).sum()), 8 * n)
        out.gbps("dot_compiled", n, gpu(lambda: dot(a, b)), 8 * n)
    for rows, cols in ((4096, 4096), (16384, 4096), (4096, 16384)):
        x = rand(rows, cols)
        n = rows * cols
        out.gbps(f"sum_rows_{rows}x{cols}", n, gpu(lambda: x.sum(-1)), 4 * n)
        out.gbps(f"sum_cols_{rows}x{cols}", n, gpu(lambda: x.sum(0)), 4 * n)


@group("softmax", "softmax(-1) and a layer norm, eager and compiled, on [4096, 4096], [65536, 1024], [1024, 65536]")
def softmax_cases(out):
    soft = torch.compile(lambda x: x.softmax(-1))
    norm = compiled(layer_norm)
    for rows, cols in ((4096, 4096), (65536, 1024), (1024, 65536)):
        x = rand(rows, cols)
        n = rows * cols
        for name, f in (("softmax_eager", lambda: x.softmax(-1)), ("softmax_compiled", lambda: soft(x)),
                        ("layernorm_eager", lambda: layer_norm(x)), ("layernorm_compiled", lambda: norm(x))):
            out.gbps(f"{name}_{rows}x{cols}", n, gpu(f), 8 * n)


@group("matmul", "square products in f32, f16, bf16; relu(x @ w + b); x @ w.t(); GEMV; a batched product")
def matmul_cases(out):
    for side in (1024, 4096, 8192):
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            a, b = rand(side, side, dtype=dt), rand(side, side, dtype=dt)
            out.tflops(f"matmul_{dtype_name(dt)}", side, gpu(lambda: a @ b, reps=10), 2 * side ** 3)
    side = 4096
    x, w, bias = rand(side, side), rand(side, side), rand(side)
    fused = torch.compile(lambda x, w, bias: torch.relu(x @ w + bias))
    out.tflops("matmul_bias_relu_compiled", side, gpu(lambda: fused(x, w, bias), reps=10), 2 * side ** 3)
    out.tflops("matmul_bt_float32", side, gpu(lambda: x @ w.t(), reps=10), 2 * side ** 3)
    v = rand(1, side)
    out.gbps("gemv_1x4096x4096", side, gpu(lambda: v @ w, reps=50), 4 * side * side)
    a, b = rand(64, 256, 256), rand(64, 256, 256)
    out.tflops("bmm_64x256x256x256", 64, gpu(lambda: a @ b), 2 * 64 * 256 ** 3)


@group("readback", "device to host (pageable and pinned) and host to device at 2^20-2^26 (wall)")
def readback_cases(out):
    for n in SIZES:
        a = rand(n)
        pinned = torch.empty(n, pin_memory=True)
        host = a.cpu()

        def to_pinned():
            pinned.copy_(a)
            torch.cuda.synchronize()

        def upload():
            host.to(DEV)
            torch.cuda.synchronize()

        for name, f in (("readback_pageable", a.cpu), ("readback_pinned", to_pinned), ("upload_pageable", upload)):
            ms = wall_ms(f, reps=10)
            out.gbps(name, n, ms, 4 * n)


@group("small", "chain3 at 1024 elements read back or synchronized, eager and compiled (wall): launch cost")
def small_cases(out):
    a, b, c = rand(1024), rand(1024), rand(1024)
    g = compiled(chain3)

    def synced():
        chain3(a, b, c)
        torch.cuda.synchronize()

    for name, f in (("small_chain3_readback_eager", lambda: chain3(a, b, c).cpu()),
                    ("small_chain3_readback_compiled", lambda: g(a, b, c).cpu()),
                    ("small_chain3_sync_eager", synced)):
        ms = wall_ms(f, reps=200)
        out.plain(name, 1024, ms, f"us={ms * 1e3:.1f}")


@group("big", "chain3, chain16, unary compiled at 2^27 (512 MiB per tensor)")
def big_cases(out):
    n = 1 << 27
    a, b, c = rand(n), rand(n), rand(n)
    for f in EXPRESSIONS:
        g = compiled(f)
        out.gbps(f"{f.__name__}_compiled", n, gpu(lambda: g(a, b, c)), 16 * n)


@group("half", "chain3 compiled in f16 and bf16 at 2^26 (2-byte elements); f32 products with a transposed operand")
def half_cases(out):
    n = 1 << 26
    for dt in (torch.float16, torch.bfloat16):
        a, b, c = rand(n, dtype=dt), rand(n, dtype=dt), rand(n, dtype=dt)
        g = compiled(chain3)
        out.gbps(f"chain3_compiled_{dtype_name(dt)}", n, gpu(lambda: g(a, b, c)), 8 * n)
    for side in (1024, 4096):
        x, w = rand(side, side), rand(side, side)
        out.tflops("matmul_bt_float32", side, gpu(lambda: x @ w.t(), reps=10), 2 * side ** 3)
        out.tflops("matmul_at_float32", side, gpu(lambda: x.t() @ w, reps=10), 2 * side ** 3)


def mlp(widths):
    """Linear layers with ReLU between them, PyTorch's default initialisation."""
    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(widths, widths[1:])):
        if i:
            layers.append(torch.nn.ReLU())
        layers.append(torch.nn.Linear(fan_in, fan_out))
    return torch.nn.Sequential(*layers).to(DEV)


@group("train", "the MLPs of lazor's train_step: forward + backward eager and compiled, a fused-AdamW step")
def train_cases(out):
    ce = torch.nn.functional.cross_entropy
    for widths, batch in (((784, 1024, 1024, 10), 4096), ((784, 128, 10), 64)):
        model = mlp(widths)
        x = rand(batch, widths[0])
        y = torch.randint(0, widths[-1], (batch,), device=DEV)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)

        def fwd_bwd():
            model.zero_grad(set_to_none=True)
            ce(model(x), y).backward()

        def step():
            opt.zero_grad(set_to_none=True)
            ce(model(x), y).backward()
            opt.step()

        def step_synced():
            step()
            torch.cuda.synchronize()

        name = "mlp_" + "-".join(str(w) for w in widths) + f"_b{batch}"
        for label, f in (("fwd_bwd_eager", fwd_bwd), ("fwd_bwd_compiled", torch.compile(fwd_bwd)),
                         ("adamw_step_eager", step)):
            out.plain(f"{name}_{label}", batch, gpu(f), f"kernels={kernel_count(f)}")
        ms = wall_ms(step_synced, reps=50)
        out.plain(f"{name}_adamw_step_sync_wall", batch, ms, f"us={ms * 1e3:.1f}")


@group("ops", "randn; an embedding's lookup and gradient; cross-entropy over GPT-2's vocabulary; conv2d")
def ops_cases(out):
    n = 1 << 26
    out.gbps("randn", n, gpu(lambda: torch.randn(n, device=DEV)), 4 * n)

    vocab, width, tokens = 50257, 768, 8192
    table = torch.randn(vocab, width, device=DEV)
    ids = torch.randint(0, vocab, (tokens,), device=DEV)
    grad = torch.randn(tokens, width, device=DEV)
    moved = 2 * 4 * tokens * width  # the rows read and written
    out.gbps(f"index_select_{tokens}_of_{vocab}x{width}", tokens, gpu(lambda: table.index_select(0, ids)), moved)
    out.gbps(f"index_add_{tokens}_into_{vocab}x{width}", tokens,
             gpu(lambda: torch.zeros_like(table).index_add_(0, ids, grad)), moved)
    del table, grad

    ce = torch.nn.functional.cross_entropy
    cce = torch.compile(lambda logits, target: ce(logits, target))
    logits = torch.randn(tokens, vocab, device=DEV, requires_grad=True)
    target = torch.randint(0, vocab, (tokens,), device=DEV)
    n = tokens * vocab
    shape = f"{tokens}x{vocab}"
    out.gbps(f"cross_entropy_fwd_eager_{shape}", n, gpu(lambda: ce(logits, target), reps=10), 4 * n)
    out.gbps(f"cross_entropy_fwd_compiled_{shape}", n, gpu(lambda: cce(logits, target), reps=10), 4 * n)
    # Forward + backward reads the logits twice and writes their gradient.
    out.gbps(f"cross_entropy_fwd_bwd_eager_{shape}", n, gpu(lambda: ce(logits, target).backward(), reps=10), 12 * n)
    out.gbps(f"cross_entropy_fwd_bwd_compiled_{shape}", n, gpu(lambda: cce(logits, target).backward(), reps=10),
             12 * n)
    del logits

    # A ResNet stage: [64, 64, 56, 56] images, 64 filters of 3 x 3, stride 1, padding 1.
    x = torch.randn(64, 64, 56, 56, device=DEV, requires_grad=True)
    w = torch.randn(64, 64, 3, 3, device=DEV, requires_grad=True)
    flops = 2 * 64 * 64 * 56 * 56 * 64 * 9
    conv = torch.nn.functional.conv2d
    out.tflops("conv2d_fwd_64x64x56x56_k3", 64, gpu(lambda: conv(x, w, padding=1)), flops)
    # Backward is two products of the forward's size: the input's gradient and the weight's.
    out.tflops("conv2d_fwd_bwd_64x64x56x56_k3", 64, gpu(lambda: conv(x, w, padding=1).sum().backward()), 3 * flops)


# nanoGPT's shakespeare_char model, as lazor's `train_gpt --nanogpt` builds it: 6 layers, 6 heads, 384 wide,
# context 256, vocabulary 65, batch 64, f32, biases everywhere, AdamW.
GPT = dict(vocab=65, width=384, heads=6, layers=6, context=256, batch=64)


class Block(torch.nn.Module):
    def __init__(self, width, heads, fused_attention):
        super().__init__()
        self.heads = heads
        self.fused_attention = fused_attention
        self.ln1, self.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.up, self.down = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)

    def attend(self, q, k, v):
        if self.fused_attention:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        t = q.shape[-2]
        scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
        future = torch.ones(t, t, device=q.device).triu(1).bool()
        return scores.masked_fill(future, float("-inf")).softmax(-1) @ v

    def forward(self, x):
        b, t, c = x.shape
        heads = [z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                 for z in self.qkv(self.ln1(x)).split(c, dim=-1)]
        y = self.attend(*heads).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))


class Gpt(torch.nn.Module):
    def __init__(self, fused_attention=False):
        super().__init__()
        width = GPT["width"]
        self.tokens = torch.nn.Embedding(GPT["vocab"], width)
        self.places = torch.nn.Embedding(GPT["context"], width)
        self.blocks = torch.nn.Sequential(
            *(Block(width, GPT["heads"], fused_attention) for _ in range(GPT["layers"])))
        self.ln = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, GPT["vocab"])

    def forward(self, ids):
        x = self.tokens(ids) + self.places(torch.arange(ids.shape[1], device=ids.device))
        return self.head(self.ln(self.blocks(x)))


def gpt_step(model, run, autocast=False):
    """One training step of `model` (run through `run`, itself or compiled) on a fixed random batch."""
    ids = torch.randint(0, GPT["vocab"], (GPT["batch"], GPT["context"]), device=DEV)
    targets = torch.randint(0, GPT["vocab"], (GPT["batch"], GPT["context"]), device=DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    scope = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if autocast else contextlib.nullcontext

    def step():
        opt.zero_grad(set_to_none=True)
        with scope():
            loss = torch.nn.functional.cross_entropy(run(ids).view(-1, GPT["vocab"]), targets.view(-1))
        loss.backward()
        opt.step()

    return step


@group("gpt", "nanoGPT's shakespeare_char training step in f32, eager and compiled, with its kernel count")
def gpt_cases(out):
    model = Gpt().to(DEV)
    params = sum(p.numel() for p in model.parameters())
    for label, run in (("eager", model), ("compiled", torch.compile(model))):
        step = gpt_step(model, run)
        out.plain(f"gpt_shakespeare_char_step_{label}", params, gpu(step, reps=10), f"kernels={kernel_count(step)}")


@group("gpt_fast", "the same step as nanoGPT's users run it: fused attention, then TF32, bf16 autocast, compiled",
       default=False)
def gpt_fast_cases(out):
    for label, tf32, autocast, compile_it in (("sdpa_f32", False, False, False), ("sdpa_tf32", True, False, False),
                                              ("sdpa_bf16_autocast_eager", True, True, False),
                                              ("sdpa_bf16_autocast_compiled", True, True, True)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        model = Gpt(fused_attention=True).to(DEV)
        params = sum(p.numel() for p in model.parameters())
        step = gpt_step(model, torch.compile(model) if compile_it else model, autocast)
        out.plain(f"gpt_shakespeare_char_step_{label}", params, gpu(step, reps=10), f"kernels={kernel_count(step)}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


@group("decode", "GPT-2 small (random weights) generating 128 tokens after 16 with a KV cache, batch 1 (wall); "
                 "needs transformers", default=False)
def decode_cases(out):
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as e:
        print(f"torch section={out.section} case=gpt2_decode error=ImportError: {e}", flush=True)
        return
    new_tokens = 128
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        model = GPT2LMHeadModel(GPT2Config()).to(DEV, dt).eval()
        prompt = torch.randint(0, 50257, (1, 16), device=DEV)
        options = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
        for label in ("eager", "static_compiled"):
            case = f"gpt2_decode_{label}_{dtype_name(dt)}"
            try:
                if label == "static_compiled":
                    # A static cache and the forward captured as CUDA graphs: the fastest way transformers decodes.
                    model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
                    options["cache_implementation"] = "static"
                with torch.no_grad():
                    for _ in range(2):
                        model.generate(prompt, **options)
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    model.generate(prompt, **options)
                    torch.cuda.synchronize()
                ms = (time.perf_counter() - start) * 1e3 / new_tokens
                out.plain(case, 124, ms, f"tokens_per_s={1e3 / ms:.1f}")
            except Exception as e:  # noqa: BLE001 (a failed variant is reported, the rest still run)
                print(f"torch section={out.section} case={case} error={type(e).__name__}: {str(e)[:200]}", flush=True)
        del model


def main(args):
    if "--list" in args:
        for name, (_, about, default) in GROUPS.items():
            print(f"{name:12} {about}{'' if default else ' (not in the default run)'}")
        return
    unknown = [a for a in args if a not in GROUPS]
    if unknown:
        sys.exit(f"unknown group(s) {' '.join(unknown)}; groups: {' '.join(GROUPS)}")
    wanted = args or [name for name, (_, _, default) in GROUPS.items() if default]
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    for name in wanted:
        GROUPS[name][0](Out(name))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:])
