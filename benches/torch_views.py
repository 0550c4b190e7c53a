"""PyTorch figures for lazor's view cases, same method as torch_reference.py (CUDA events over a loop of calls).
transpose_add: a.t() + b vs a + b, square [n, n], 12 bytes/element; cat: torch.cat([a, b]) * 2 vs a2 * 2,
8 bytes/element (eager cat writes the concatenation first, then multiplies; compiled fuses)."""
import torch

from torch_timing import gpu_ms, line

dev = "cuda"


def tadd(a, b):
    return a.t() + b


def add(a, b):
    return a + b


def cat2(a, b):
    return torch.cat([a, b]) * 2.0


def mul2(a):
    return a * 2.0


ctadd, cadd, ccat, cmul = (torch.compile(f) for f in (tadd, add, cat2, mul2))
for n in (4096, 8192):
    a, b = torch.rand(n, n, device=dev), torch.rand(n, n, device=dev)
    assert torch.equal(ctadd(a, b), a.t() + b)
    for name, f in (("transpose_add_eager", lambda: tadd(a, b)), ("plain_add_eager", lambda: add(a, b)),
                    ("transpose_add_compiled", lambda: ctadd(a, b)), ("plain_add_compiled", lambda: cadd(a, b)),
                    ("transpose_contiguous", lambda: a.t().contiguous())):
        t = gpu_ms(f)
        per = 8 if name == "transpose_contiguous" else 12
        line(f"{name}_{n}x{n}", n * n, t, f"gbps={per * n * n / t / 1e6:.1f}")
for log2 in (24, 26):
    m = 1 << log2
    a, b, a2 = torch.rand(m // 2, device=dev), torch.rand(m // 2, device=dev), torch.rand(m, device=dev)
    assert torch.equal(ccat(a, b), torch.cat([a, b]) * 2.0)
    for name, f in (("cat_mul_eager", lambda: cat2(a, b)), ("plain_mul_eager", lambda: mul2(a2)),
                    ("cat_mul_compiled", lambda: ccat(a, b)), ("plain_mul_compiled", lambda: cmul(a2))):
        t = gpu_ms(f)
        line(f"{name}", m, t, f"gbps={8 * m / t / 1e6:.1f}")
