"""The elementwise cases of lazor's benchmark sections (benches/common/mod.rs), written as PyTorch users write them:
three f32 inputs and one output each, 16 bytes per element when fused. Shared by torch_bench.py and
torch_reference.py."""


def chain3(a, b, c):
    return ((a + b) * 5.0 - c) / 2.0


def chain16(a, b, c):
    x = a
    for _ in range(4):
        x = ((x + b) * 1.01 - c) / 1.02
    return x


def unary(a, b, c):
    return ((a * 0.1).exp() + b.abs()).sqrt() * c.tanh()
