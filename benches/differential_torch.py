"""Replays lazor's random tensor programs in PyTorch (float64) and checks lazor's results: an outside oracle.

lazor's differential tester (`tests/differential.rs`, issue 27) checks lazor against lazor's own reference
interpreter. This script checks the same programs against an implementation nobody on lazor wrote: PyTorch.
It reads the JSON-lines dump the tester writes (one program a line: its steps, lazor's values of its outputs, and
the per-element error bound the tester propagated; see `tests/differential/json.rs`), replays every step in torch,
and compares.

Run it:

    python3 benches/differential_torch.py dump.jsonl [--device cuda|cpu]

It prints one summary line,
`differential_torch: N programs, M outputs, E elements checked, S skipped, F failures`, then each failing program
(at most 10): its seed, its steps, the output, the first mismatching element with both values and its bound. The
exit code is 1 if anything failed, else 0.

How steps are replayed (lazor's semantics, from `src/op.rs`, `src/dtype.rs`, `src/reductions.rs`, `src/matmul.rs`):

* Float steps compute in float64 and round the result to the step's `out_dtype`, then go on in float64 from the
  rounded value: lazor's reference rounds each op's result to its type. f16 and bf16 round through float32,
  because lazor keeps half values in f32 lanes and rounds an f32 to the half type where it stores; the same two
  roundings happen here.
* Integer steps compute exactly in int64 and wrap to i32 or u32 (int64 arithmetic is exact modulo 2^64, so also
  modulo 2^32). u32 values are held as 0..2^32-1, i32 as -2^31..2^31-1, bools as 0/1, all in int64.
* Which type a step computes in is read from the JSON (`out_dtype`) wherever it says it; comparisons need the
  promotion of their operands, which `promote` restates from `DType::promote`. Casts follow Rust's `as`:
  float to integer truncates and saturates, NaN going to 0; integer to float goes through f32.
* Composite ops (mean, var, softmax, log_softmax, logsumexp, argmax, clamp) follow lazor's formulas, evaluated
  in float64 with no rounding in between; only their result is rounded to the output type.

How a value is checked (`lazor` is lazor's value, `torch` this script's, `bound` lazor's tester's bound):

* A bound that is infinite or NaN means the tester found the value not determined within rounding: skipped.
* Integers and bools: exact.
* Floats: NaN must match NaN. An infinity must match exactly, except at an overflow edge (the bound positive and
  the finite one of the two within `2 * bound` of half the type's largest finite value), which lazor's own check
  allows too. Otherwise `|lazor - torch| <= 2 * bound + slack` with
  `slack = ulp_rel(dtype) * |torch| + tiny(dtype)`: the bound is the distance lazor's tester allows from its f32
  reference, whose final rounding may land one ulp away from the float64 replay's rounding of the same step,
  so one relative ulp of the output type (2^-23 f32, 2^-10 f16, 2^-7 bf16) is added, and an absolute floor of
  the type's smallest normal (2^-126 f32 and bf16, 2^-14 f16) for subnormal results a GPU may flush to zero.
"""

import argparse
import json
import math
import sys

import torch

F64 = torch.float64
I64 = torch.int64
FLOATS = ("f32", "f16", "bf16")
F32_MAX = 3.4028234663852886e38
TORCH_FLOAT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
# The largest finite value, for the overflow edge (lazor's check uses f32's for bf16, which is the same range).
MAX_FINITE = {"f32": F32_MAX, "f16": 65504.0, "bf16": F32_MAX}
# One relative ulp of the type and its smallest normal: the slack of the comparison (see the docstring).
ULP_REL = {"f32": 2.0**-23, "f16": 2.0**-10, "bf16": 2.0**-7}
TINY = {"f32": 2.0**-126, "f16": 2.0**-14, "bf16": 2.0**-126}


def is_float(dt):
    return dt in FLOATS


def promote(a, b):
    """The type two operands compute in: `DType::promote` (None for i32 with u32, which lazor refuses)."""
    if a == b:
        return a
    if a == "bool":
        return b
    if b == "bool":
        return a
    if {a, b} == {"i32", "u32"}:
        return None
    if a in ("i32", "u32"):
        return b
    if b in ("i32", "u32"):
        return a
    return "f32"  # two different floats


def round_to(t, dt):
    """A float64 tensor rounded to float type `dt`, back as float64 (half types through f32, as lazor's lanes)."""
    t = t.to(torch.float32)
    if dt != "f32":
        t = t.to(TORCH_FLOAT[dt])
    return t.to(F64)


def f32_tensor(v, dev):
    """JSON floats as the f32 values they name, in float64. lazor writes an f32 as the shortest decimal that reads
    back as that f32 (`{v:?}`); read as a float64 the decimal is a nearby but different number, so it is rounded
    to f32 first (exact: f32 to float64 and back recovers the f32)."""
    return torch.tensor(v, dtype=F64).to(torch.float32).to(F64).to(dev)


def wrap(t, dt):
    """int64 values wrapped to the lanes of integer type `dt` (bools are already 0/1)."""
    if dt == "u32":
        return torch.remainder(t, 2**32)
    if dt == "i32":
        return torch.remainder(t + 2**31, 2**32) - 2**31
    return t


def signed(t, dt):
    """u32 values as their i32 bit-twins, so that a product of two stays below 2^62 (exact in int64)."""
    return wrap(t, "i32") if dt == "u32" else t


def cast(t, src, dst):
    """Rust's `as` (`DType::cast_lane`): `t` holds values of type `src`; the result holds values of `dst`."""
    if src == dst:
        return t
    if is_float(src):
        if is_float(dst):
            return round_to(t, dst)
        if dst == "bool":
            return (t != 0).to(I64)  # NaN != 0 is true, as in Rust
        lo, hi = (-(2.0**31), 2.0**31 - 1) if dst == "i32" else (0.0, 2.0**32 - 1)
        # Truncate toward zero, saturate, NaN to 0.
        v = torch.nan_to_num(t, nan=0.0, posinf=hi, neginf=lo).clamp(lo, hi).trunc()
        return v.to(I64)
    # From an integer or bool.
    if is_float(dst):
        # `lane as i32 as f32` (or `as u32 as f32`), then rounded to the half type: two roundings.
        return round_to(t.to(F64), dst)
    if dst == "bool":
        return (t != 0).to(I64)
    return wrap(t, dst)  # between i32 and u32 the bits stay


def float_unary(name, x):
    """The op table's float rows (`src/op.rs`), in float64."""
    if name == "neg":
        return -x
    if name == "exp":
        return torch.exp(x)
    if name == "ln":
        return torch.log(x)
    if name == "sqrt":
        return torch.sqrt(x)
    if name == "rsqrt":
        return 1.0 / torch.sqrt(x)  # as lazor: 1/sqrt(0) = inf, NaN below 0
    if name == "abs":
        return torch.abs(x)
    if name == "relu":
        # `if x < 0 { 0 } else { x }`: keeps NaN and -0.0.
        return torch.where(x < 0, torch.zeros_like(x), x)
    if name == "sigmoid":
        return 1.0 / (1.0 + torch.exp(-x))
    if name == "tanh":
        return torch.tanh(x)
    if name == "sin":
        return torch.sin(x)
    if name == "cos":
        return torch.cos(x)
    if name == "recip":
        return 1.0 / x
    if name == "square":
        return x * x
    if name == "gelu":
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * x * x * x)))
    if name == "silu":
        # The row's own formula, not x * sigmoid(x): at -inf it is -inf / inf = NaN in lazor.
        return x / (1.0 + torch.exp(-x))
    if name == "log1p":
        return torch.log1p(x)
    if name == "expm1":
        return torch.expm1(x)
    if name == "erf":
        return torch.erf(x)  # the true erf: lazor's formula is within about an ulp of it
    if name == "floor":
        return torch.floor(x)
    if name == "ceil":
        return torch.ceil(x)
    if name == "round":
        return torch.round(x)  # half-way values to the even neighbour
    if name == "sign":
        # -1 or 1; +-0 and NaN stay as they are (torch.sign gives 0 for NaN).
        return torch.where((x == 0) | torch.isnan(x), x, torch.sign(x))
    raise ValueError(f"unary {name} on floats")


def int_unary(name, x, dt):
    if dt == "bool":
        if name == "not":
            return 1 - x
        raise ValueError(f"unary {name} on bool")
    if name == "neg":
        return wrap(-x, dt)
    if name == "abs":
        return wrap(torch.abs(x), dt)  # i32::MIN stays i32::MIN
    if name == "relu":
        return torch.clamp(x, min=0)
    if name == "square":
        s = signed(x, dt)
        return wrap(s * s, dt)
    if name == "not":
        return wrap(~x, dt)
    if name in ("floor", "ceil", "round"):
        return x  # whole already
    if name == "sign":
        return torch.sign(x)  # u32 values are held as 0..2^32-1: 0 or 1
    raise ValueError(f"unary {name} on {dt}")


def float_binary(name, a, b):
    if name == "add":
        return a + b
    if name == "sub":
        return a - b
    if name == "mul":
        return a * b
    if name == "div":
        return a / b
    if name == "maximum":
        return torch.maximum(a, b)  # NaN-propagating, as lazor's
    if name == "minimum":
        return torch.minimum(a, b)
    if name == "pow":
        return rust_powf(a, b)
    raise ValueError(f"binary {name} on floats")


def int_binary(name, a, b, dt):
    if name in ("add", "sub", "mul"):
        a, b = signed(a, dt), signed(b, dt)
        r = a + b if name == "add" else a - b if name == "sub" else a * b
        return wrap(r, dt)
    if name in ("div", "rem"):
        zero = b == 0
        safe = torch.where(zero, torch.ones_like(b), b)
        if name == "div":
            # Truncating; a / 0 = a; i32::MIN / -1 = 2^31 wraps back to i32::MIN.
            return wrap(torch.where(zero, a, torch.div(a, safe, rounding_mode="trunc")), dt)
        # The dividend's sign (fmod); a % 0 = 0.
        return torch.where(zero, torch.zeros_like(a), torch.fmod(a, safe))
    if name == "maximum":
        return torch.maximum(a, b)
    if name == "minimum":
        return torch.minimum(a, b)
    if name in ("bitand", "bitor", "bitxor"):
        # Sign-extended i32 bits and u32 values both give the right low 32 bits; wrap restores the range.
        r = a & b if name == "bitand" else a | b if name == "bitor" else a ^ b
        return wrap(r, dt)
    raise ValueError(f"binary {name} on {dt}")


def rust_powf(a, b):
    """`f32::powf` (C's pow) in float64: torch.pow with a tensor exponent is C's pow; the edge cases are pinned
    anyway, since a scalar exponent may take other paths (x^0.5 as sqrt would give sqrt(-0.0) = -0.0)."""
    a, b = torch.broadcast_tensors(a, b)
    r = torch.pow(a, b)
    # pow(x, +-0) = 1 and pow(1, y) = 1, even for NaN.
    r = torch.where((b == 0) | (a == 1), torch.ones_like(r), r)
    # pow(-1, +-inf) = 1.
    r = torch.where((a == -1) & torch.isinf(b), torch.ones_like(r), r)
    return r


COMPARE = {
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
    "eq": torch.eq,
    "ne": torch.ne,
}


def scalar_value(s, stype, dt, dev):
    """The Rust scalar `s` as a lane of `dt` (`DType::lane_of`), as a 0-d tensor."""
    if stype == "f32":
        t = f32_tensor(s, dev)
    else:
        t = torch.tensor(int(s), dtype=I64, device=dev)
    return cast(t, stype, dt)


def fold(name, x, dim, keep, src, out):
    """A reduction along `dim` (an int; `_all` forms were flattened first) of `x` (values of type `src`)."""
    n = x.shape[dim]
    if name in ("sum", "prod"):
        if is_float(src):
            r = x.sum(dim, keepdim=keep) if name == "sum" else x.prod(dim, keepdim=keep)
            return round_to(r, out)
        # Bools count in i32 (out says so). Integers wrap: multiply one slice at a time so every product
        # stays exact in int64 (a wrapped i32 times a wrapped i32 is below 2^62).
        if name == "sum":
            return wrap(x.sum(dim, keepdim=keep), out)
        acc = torch.ones_like(x.select(dim, 0) if n else x.sum(dim))
        for part in x.unbind(dim):
            acc = wrap(signed(acc, out) * signed(part, out), out)
        return acc.unsqueeze(dim) if keep else acc
    if name in ("max", "min"):
        # amax/amin propagate NaN, as lazor's folds do; the axis is never empty (lazor refuses that).
        return x.amax(dim, keepdim=keep) if name == "max" else x.amin(dim, keepdim=keep)
    if name in ("argmax", "argmin"):
        ext = x.amax(dim, keepdim=True) if name == "argmax" else x.amin(dim, keepdim=True)
        hit = x == ext
        if is_float(src):
            hit = hit | torch.isnan(x)  # the first NaN wins
        shape = [1] * x.dim()
        shape[dim] = n
        idx = torch.arange(n, dtype=I64, device=x.device).reshape(shape)
        return torch.where(hit, idx, torch.full_like(idx, n)).amin(dim, keepdim=keep)
    # Float math: integers and bools compute in f32 (exactly: their values converted as lazor's cast).
    xf = cast(x, src, "f32") if not is_float(src) else x
    if name == "mean":
        return round_to(xf.sum(dim, keepdim=keep) / n if n else torch.full_like(xf.sum(dim, keepdim=keep), math.nan),
                        out)
    if name == "var":
        if n == 0:
            return round_to(torch.full_like(xf.sum(dim, keepdim=keep), math.nan), out)
        m = xf.sum(dim, keepdim=True) / n
        c = xf - m
        return round_to((c * c).sum(dim, keepdim=keep) / n, out)
    if name in ("softmax", "log_softmax"):
        if n == 0:
            return round_to(xf, out)
        s = xf - xf.amax(dim, keepdim=True)
        if name == "softmax":
            e = torch.exp(s)
            return round_to(e / e.sum(dim, keepdim=True), out)
        return round_to(s - torch.log(torch.exp(s).sum(dim, keepdim=True)), out)
    if name == "logsumexp":
        if n == 0:
            return round_to(torch.log(xf.sum(dim, keepdim=keep)), out)
        # lazor clamps the maximum to f32's finite range so that a row of -inf stays -inf (NaN stays NaN).
        m = torch.clamp(xf.amax(dim, keepdim=True), -F32_MAX, F32_MAX)
        s = torch.log(torch.exp(xf - m).sum(dim, keepdim=True)) + m
        return round_to(s if keep else s.squeeze(dim), out)
    raise ValueError(f"reduce {name}")


def run_step(s, vals, dev):
    """The value (a tensor) of step `s`, given the (tensor, dtype) pairs of the steps before it."""
    op, out = s["op"], s["out_dtype"]

    def arg(k, dt=None):
        t, src = vals[s[k]]
        return cast(t, src, dt) if dt else t

    if op == "input":
        dt = s["dtype"]
        if is_float(dt):
            return f32_tensor(s["values"], dev).reshape(s["shape"])
        return torch.tensor(s["values"], dtype=I64, device=dev).reshape(s["shape"])
    if op == "unary":
        x = arg("x", out)
        return round_to(float_unary(s["name"], x), out) if is_float(out) else int_unary(s["name"], x, out)
    if op == "binary":
        name = s["name"]
        if name in COMPARE:
            ct = promote(vals[s["x"]][1], vals[s["y"]][1])
            return COMPARE[name](arg("x", ct), arg("y", ct)).to(I64)
        a, b = arg("x", out), arg("y", out)
        if is_float(out):
            return round_to(float_binary(name, a, b), out)
        a, b = torch.broadcast_tensors(a, b)
        return int_binary(name, a, b, out)
    if op == "scalar":
        x = arg("x", out)
        c = scalar_value(s["s"], s["stype"], out, dev)
        a, b = (c, x) if s["left"] else (x, c)
        if is_float(out):
            return round_to(float_binary(s["name"], a, b), out)
        a, b = torch.broadcast_tensors(a, b)
        return int_binary(s["name"], a, b, out)
    if op == "powf":
        # The exponent is a scalar of the tensor's float type: rounded to it (f16's 0.1 is not f32's).
        p = cast(f32_tensor(s["p"], dev), "f32", out)
        return round_to(rust_powf(arg("x", out), p), out)
    if op == "clamp":
        # maximum with lo, then minimum with hi, both NaN-propagating, in the result's float type.
        lo = cast(f32_tensor(s["lo"], dev), "f32", out)
        hi = cast(f32_tensor(s["hi"], dev), "f32", out)
        return torch.minimum(torch.maximum(arg("x", out), lo), hi)
    if op == "cast":
        return arg("x", s["dtype"])
    if op == "where":
        c, a, b = arg("c"), arg("a", out), arg("b", out)
        return torch.where(c != 0, a, b)
    if op == "reshape":
        return arg("x").reshape(s["shape"])
    if op == "permute":
        return arg("x").permute(s["perm"])
    if op == "transpose":
        return arg("x").transpose(s["a"], s["b"])
    if op == "narrow":
        return arg("x").narrow(s["dim"], s["start"], s["len"])
    if op == "squeeze":
        return arg("x").squeeze(s["dim"])
    if op == "unsqueeze":
        return arg("x").unsqueeze(s["dim"])
    if op == "expand":
        return arg("x").expand(s["shape"])
    if op == "flatten":
        return arg("x").reshape(-1)
    if op == "contiguous":
        return arg("x").contiguous()
    if op == "write_at":
        x, v = arg("x").clone(), arg("v")
        x.narrow(s["dim"], s["start"], v.shape[s["dim"]]).copy_(v)
        return x
    if op in ("cat", "stack"):
        parts = [cast(vals[i][0], vals[i][1], out) for i in s["xs"]]
        return torch.cat(parts, s["dim"]) if op == "cat" else torch.stack(parts, s["dim"])
    if op == "reduce":
        x, src = vals[s["x"]]
        if s["dim"] is None:
            return fold(s["name"], x.reshape(-1), 0, False, src, out)
        if src == "bool" and s["name"] in ("sum", "prod"):
            src = "i32"  # bools count in i32 (their 0/1 values are already i32 values)
        return fold(s["name"], x, s["dim"], s["keep"], src, out)
    if op == "matmul":
        # Operands cast to the float type, products summed (exactly enough, in float64), rounded once.
        return round_to(torch.matmul(arg("x", out), arg("y", out)), out)
    if op == "sdpa":
        # In float64, rounded once. Causal: the scores masked with masked_fill (aligned at the top left), as lazor
        # defines it: a key a query does not attend to never reaches it, NaN or not. PyTorch's own function adds
        # the mask as a bias, so a NaN there reaches the query (its math path; its fused kernels skip whole blocks).
        q, k, v = (arg(n, out) for n in ("q", "k", "v"))
        if not s["causal"]:
            return round_to(torch.nn.functional.scaled_dot_product_attention(q, k, v), out)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        length, keys = scores.shape[-2], scores.shape[-1]
        kept = torch.ones(length, keys, dtype=torch.bool, device=scores.device).tril()
        weights = torch.softmax(scores.masked_fill(~kept, float("-inf")), dim=-1)
        return round_to(weights @ v, out)
    raise ValueError(f"unknown op {op}")


def describe(i, s):
    """Step `i` as one short line: `t5 = binary add(t2, t3) -> f16[2, 3]`."""
    op = s["op"]
    tail = f" -> {s['out_dtype']}{s['out_shape']}"
    if op == "input":
        vals = s["values"]
        shown = ", ".join(str(v) for v in vals[:8]) + (", ..." if len(vals) > 8 else "")
        return f"t{i} = input {s['dtype']}{s['shape']} [{shown}]"
    refs = [f"t{s[k]}" for k in ("c", "x", "a", "b", "y", "q", "k", "v") if k in s and isinstance(s[k], int) and
            not (op == "transpose" and k in ("a", "b"))]
    if "xs" in s:
        refs = [f"t{j}" for j in s["xs"]]
    extra = {k: v for k, v in s.items()
             if k not in ("op", "name", "out_shape", "out_dtype", "x", "y", "c", "xs", "q", "k", "v")
             and not (op == "where" and k in ("a", "b"))}
    args = ", ".join(refs + [f"{k}={v}" for k, v in extra.items()])
    name = f" {s['name']}" if "name" in s else ""
    return f"t{i} = {op}{name}({args}){tail}"


def check_output(o, mine, dt):
    """Compares lazor's values of one output with ours: (checked, skipped, first failure as text or None)."""
    want_shape = list(o["shape"])
    if list(mine.shape) != want_shape:
        return 0, 0, f"shape: lazor {want_shape}, torch {list(mine.shape)}"
    w = mine.reshape(-1).cpu()
    g = f32_tensor(o["values"], "cpu").reshape(-1) if is_float(dt) else torch.tensor(o["values"], dtype=I64)
    b = f32_tensor(o["bound"], "cpu").reshape(-1)
    if g.numel() != w.numel() or b.numel() != w.numel():
        return 0, 0, f"{g.numel()} values and {b.numel()} bounds for {w.numel()} elements"
    sure = torch.isfinite(b)
    if is_float(dt):
        gn, wn = torch.isnan(g), torch.isnan(w)
        gi, wi = torch.isinf(g), torch.isinf(w)
        diff = (g - w).abs()
        slack = ULP_REL[dt] * w.abs() + TINY[dt]
        close = diff <= 2 * b + slack
        # An overflow may land either side of the largest finite value where the value was not exact.
        def edge(x_inf, y):
            return x_inf & torch.isfinite(y) & (b > 0) & (y.abs() + 2 * b >= MAX_FINITE[dt] / 2) & \
                (torch.sign(g) == torch.sign(w))
        inf_ok = (g == w) | edge(gi, w) | edge(wi, g)
        ok = torch.where(gn | wn, gn & wn, torch.where(gi | wi, inf_ok, close))
    else:
        ok = g == w
    bad = sure & ~ok
    checked, skipped = int(sure.sum()), int((~sure).sum())
    if bad.any():
        k = int(bad.nonzero()[0, 0])
        return checked, skipped, f"element {k}: lazor {g[k].item()!r}, torch {w[k].item()!r}, bound {b[k].item()!r}"
    return checked, skipped, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump", help="JSON lines written by lazor's differential tester")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    dev = torch.device(args.device)
    n_prog = n_out = n_el = n_skip = n_fail = 0
    reports = []
    with open(args.dump) as f:
        for line in f:
            if not line.strip():
                continue
            p = json.loads(line)
            n_prog += 1
            failure = None
            vals = []
            try:
                for i, s in enumerate(p["steps"]):
                    t = run_step(s, vals, dev)
                    if list(t.shape) != list(s["out_shape"]):
                        raise ValueError(f"t{i} has shape {list(t.shape)}, lazor's {s['out_shape']}")
                    vals.append((t, s["out_dtype"]))
            except Exception as e:  # a replay that cannot run is a failure of the program, reported as such
                failure = f"replay failed: {type(e).__name__}: {e}"
            replayed = failure is None
            for k, o in enumerate(p["outputs"]):
                n_out += 1
                if not replayed:
                    continue
                checked, skipped, bad = check_output(o, vals[o["step"]][0], o["dtype"])
                n_el += checked
                n_skip += skipped
                if bad is not None and failure is None:  # the first failing output is the one reported
                    failure = f"output {k} (t{o['step']}, {o['dtype']}{o['shape']}): {bad}"
            if failure is not None:
                n_fail += 1
                if len(reports) < 10:
                    steps = "\n".join("    " + describe(i, s) for i, s in enumerate(p["steps"]))
                    reports.append(f"seed {p['seed']}: {failure}\n{steps}")
    print(f"differential_torch: {n_prog} programs, {n_out} outputs, {n_el} elements checked, {n_skip} skipped, "
          f"{n_fail} failures")
    for r in reports:
        print(r)
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
