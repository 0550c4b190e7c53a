"""PyTorch's side of issue 23's check of `examples/train_mlp.rs`: the same MLP, from the same initial weights,
trained on the same batches with torch.optim.AdamW under the same settings and learning-rate schedule, in f32
with TF32 off. lazor's run compares the two (`train_mlp --compare DIR`): every step's loss within 1e-3 relative
and every final weight within 1e-3.

The example's `--dump DIR` writes everything this script reads, so both sides see the same numbers:

* `init.safetensors`: the initial weights, named as `nn.Sequential`'s state_dict (`0.weight`, `0.bias`,
  `2.weight`, ...): the model is rebuilt from their shapes, `Linear` layers with the activation between each two;
* `config.json`: the batch size, the step count, the activation (`gelu_tanh`: `nn.GELU(approximate="tanh")`, or
  `relu`), the pixels' mean and deviation, AdamW's betas, eps and weight decay, and every step's learning rate (the
  f64 values of lazor's f32 settings);
* `batches-images-idx3-ubyte`, `batches-labels-idx1-ubyte`: every step's batch in step order (uncompressed IDX),
  so no data set and no shuffle have to be reproduced here.

It writes `torch_losses.txt` (one loss a step) and `torch_final.safetensors` into the same directory. safetensors
files are read and written here directly (8-byte little-endian header length, a JSON header, raw little-endian
data), so the `safetensors` package is not needed; numpy is not either.

Run it (lazor's binary and this script on the same machine or not; only DIR travels):

    train_mlp --steps 200 --dump check        # lazor: weights, batches, its losses and final weights
    python3 benches/torch_mlp.py check [--device cuda|cpu]
    train_mlp --compare check                 # exits 1 beyond the tolerances

In mixed precision, `--amp bf16` on both sides: lazor trains under `lazor::autocast(BF16)` (and records `"amp":
"bf16"` in `config.json`), this script under `torch.autocast(device_type, dtype=torch.bfloat16)`, the weights and
AdamW's states in f32 on both; the comparison then asks every loss within 1e-2 relative and every final weight
within 1e-2. `--amp f16` adds PyTorch's `GradScaler` (defaults), as lazor's run adds its own.

    train_mlp --steps 200 --amp bf16 --dump check-bf16
    python3 benches/torch_mlp.py check-bf16 --amp bf16
    train_mlp --compare check-bf16
"""
import argparse
import contextlib
import json
import os
import struct
import sys

import torch


def read_safetensors(path):
    """{name: f32 tensor} from a safetensors file of F32 tensors."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {entry['dtype']}, not F32")
        start, end = entry["data_offsets"]
        t = torch.frombuffer(bytearray(data[start:end]), dtype=torch.float32) if end > start else torch.zeros(0)
        out[name] = t.reshape(entry["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    """Writes {name: f32 tensor} as a safetensors file (header padded to 8 bytes, as the format asks)."""
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        values = t.detach().to("cpu", torch.float32).reshape(-1).tolist()
        b = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        chunks.append(b)
        offset += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in chunks:
            f.write(b)


def read_idx(path):
    """(dims, bytes) of an uncompressed IDX file of unsigned bytes."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:3] != b"\0\0\x08":
        sys.exit(f"{path}: not an IDX file of bytes")
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    return dims, raw[4 + 4 * ndim:]


ACTIVATIONS = {"relu": torch.nn.ReLU, "gelu_tanh": lambda: torch.nn.GELU(approximate="tanh")}

AMP_TYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def grad_scaler(dev, enabled):
    """torch.amp.GradScaler with PyTorch's defaults (lazor's GradScalerConfig::default() too), where this PyTorch
    has it (2.3 on), else the CUDA one; disabled, a pass-through."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(dev.type, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def model_from(weights, activation):
    """nn.Sequential(Linear, activation, Linear, ...) of the shapes of `weights`, loaded strictly."""
    count = len([k for k in weights if k.endswith(".weight")])
    layers = []
    for i in range(count):
        out_features, in_features = weights[f"{2 * i}.weight"].shape
        if i:
            layers.append(ACTIVATIONS[activation]())
        layers.append(torch.nn.Linear(in_features, out_features))
    model = torch.nn.Sequential(*layers)
    model.load_state_dict(weights, strict=True)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="the directory `train_mlp --dump DIR` wrote")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--amp",
        choices=sorted(AMP_TYPES),
        help="train under torch.autocast to this type (f16 with a GradScaler), as `train_mlp --amp` did",
    )
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dev = torch.device(args.device)

    path = lambda name: os.path.join(args.dir, name)  # noqa: E731
    with open(path("config.json")) as f:
        config = json.load(f)
    batch, steps, lrs = config["batch"], config["steps"], config["lrs"]
    # The dump says which precision lazor trained in; a run in another would compare different things.
    if config.get("amp") != args.amp:
        sys.exit(f"{args.dir}: lazor trained with --amp {config.get('amp')}, this run asks --amp {args.amp}")
    model = model_from(read_safetensors(path("init.safetensors")), config["activation"]).to(dev)
    (count, rows, cols), images = read_idx(path("batches-images-idx3-ubyte"))
    (_,), labels = read_idx(path("batches-labels-idx1-ubyte"))
    if count < batch * steps or len(lrs) != steps:
        sys.exit(f"{args.dir}: {count} images and {len(lrs)} learning rates for {steps} steps of {batch}")
    pixels = torch.frombuffer(bytearray(images), dtype=torch.uint8).reshape(count, rows * cols)
    # As lazor: pixel / 255 standardised, in f32 (the scalars enter f32 arithmetic as f32, as lazor's do).
    x_all = ((pixels.to(torch.float32) / 255.0 - config["mean"]) / config["std"]).to(dev)
    y_all = torch.frombuffer(bytearray(labels), dtype=torch.uint8).to(torch.int64).to(dev)

    opt = torch.optim.AdamW(
        model.parameters(),
        lr=lrs[0],
        betas=tuple(config["betas"]),
        eps=config["eps"],
        weight_decay=config["weight_decay"],
    )
    amp_dtype = AMP_TYPES.get(args.amp)
    # A pass-through unless f16: bf16 has f32's range and needs no loss scaling.
    scaler = grad_scaler(dev, enabled=amp_dtype is torch.float16)
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lrs[step]
        x, y = x_all[step * batch:(step + 1) * batch], y_all[step * batch:(step + 1) * batch]
        # Under autocast the Linear layers run in the half type, cross_entropy in f32; the weights stay f32.
        region = torch.autocast(device_type=dev.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()
        with region:
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.detach().float())
    losses = torch.stack(losses).cpu().tolist()
    with open(path("torch_losses.txt"), "w") as f:
        f.writelines(f"{l!r}\n" for l in losses)
    write_safetensors(path("torch_final.safetensors"), model.state_dict())
    precision = f"{args.amp} autocast" if args.amp else "f32"
    print(
        f"torch_mlp: {steps} AdamW steps of {batch} on {dev} in {precision}: loss {losses[0]:.4f} -> {losses[-1]:.4f}; wrote "
        f"{path('torch_losses.txt')} and {path('torch_final.safetensors')}"
    )


if __name__ == "__main__":
    main()
