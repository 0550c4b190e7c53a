"""PyTorch figures beside lazor's `examples/train_step.rs`, same method as torch_views.py (CUDA events over a loop
of steps, TF32 off): forward + backward of the MLPs 784-1024-1024-10 at batch 4096 and 784-128-10 at batch 64
with the mean softmax cross-entropy written as `-(log_softmax(-1) * onehot).sum() / n`, eager and compiled, the
large model's eight matmuls alone (3 forward, 3 weight gradients, 2 input gradients), and the CUDA kernels one
step launches (torch profiler). Run: `python3 benches/torch_train.py`."""
import torch

from torch_timing import gpu_ms
from torch_timing import kernel_count as kernels

dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False




def model(sizes, batch):
    params = []
    for i, o in zip(sizes, sizes[1:]):
        scale = i ** -0.5
        params.append((torch.rand(i, o, device=dev) * 2 - 1).mul_(scale).requires_grad_())
        params.append((torch.rand(o, device=dev) * 2 - 1).mul_(scale).requires_grad_())
    x = torch.rand(batch, sizes[0], device=dev) * 2 - 1
    onehot = torch.nn.functional.one_hot(torch.arange(batch, device=dev) % sizes[-1], sizes[-1]).float()

    def loss():
        h = x
        for k in range(0, len(params), 2):
            h = h @ params[k] + params[k + 1]
            if k + 2 < len(params):
                h = h.relu()
        return -(h.log_softmax(-1) * onehot).sum() / batch

    return params, loss


def step(params, loss_fn):
    def run():
        for p in params:
            p.grad = None
        loss_fn().backward()
    return run


for sizes, batch in (([784, 1024, 1024, 10], 4096), ([784, 128, 10], 64)):
    params, loss = model(sizes, batch)
    name = "-".join(map(str, sizes))
    for mode, f in (("eager", loss), ("compiled", torch.compile(loss))):
        run = step(params, f)
        ms = gpu_ms(run)
        print(f"torch case=train_{name}_b{batch}_{mode} ms={ms:.4f} kernels={kernels(run)}", flush=True)
    if len(sizes) == 4:
        w = [p.detach() for p in params[0::2]]
        h = [torch.rand(batch, s, device=dev) for s in sizes[:3]]
        d = [torch.rand(batch, s, device=dev) for s in sizes[1:]]

        def eight():
            return (h[0] @ w[0], h[1] @ w[1], h[2] @ w[2], h[0].t() @ d[0], h[1].t() @ d[1], h[2].t() @ d[2],
                    d[2] @ w[2].t(), d[1] @ w[1].t())
        print(f"torch case=eight_matmuls_{name}_b{batch} ms={gpu_ms(eight):.4f}", flush=True)
