"""GPU timing shared by the project's PyTorch scripts (imported from `benches/`, where they run from): CUDA events
around a loop of calls after warm-up, as a pipelined loop of lazor realizes runs, and the line they print."""
import statistics

import torch


def gpu_ms(f, reps=20, loops=1):
    """Median over `loops` of the mean GPU time, in ms, of `reps` back-to-back calls after 3 warm-up calls."""
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(loops):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            f()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return statistics.median(times)


def line(case, n, ms, rate, section=None):
    """`torch [section=<s>] case=<name> n=<elements> ms=<ms> <rate>`."""
    where = f"section={section} " if section else ""
    print(f"torch {where}case={case} n={n} ms={ms:.4f} {rate}", flush=True)


def kernel_count(f):
    """CUDA kernels one call of `f` launches, by the torch profiler (after one call to warm up)."""
    from torch.profiler import ProfilerActivity, profile

    f()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        f()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
