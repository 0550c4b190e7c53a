"""transformers' side of lazor's GPT-2 example (`examples/gpt2.rs`), for the GPU machine (its python3 has torch and
transformers).

    python3 benches/hf_gpt2.py DIR [--bench]

1. Makes a GPT-2 checkpoint from random weights, as users get one from the hub: `GPT2LMHeadModel(GPT2Config(...))`
   then `save_pretrained(DIR)` (`DIR/config.json`, `DIR/model.safetensors`). GPT-2 small by default (`--layers`,
   `--heads`, `--width`, `--vocab`, `--positions` change it; `--seed` the weights).
2. For f32, f16 and bf16 (the f32 weights cast, as `--dtype` casts them on load), writes
   `DIR/expected_{f32,f16,bf16}.safetensors` holding `input_ids` (`[batch, prompt]` i32, random), transformers'
   `logits` of those prompts (`[batch, prompt, vocab]` as f32) and its greedy continuation `greedy`
   (`[batch, steps]` i32: argmax token by token, with its KV cache). lazor compares with
   `cargo run --release --example gpt2 -- DIR --dtype f16 --check DIR/expected_f16.safetensors`: logits within
   1e-4 relative in f32 (max |diff| / max |logit|), 1e-2 in f16, 5e-2 in bf16; in f32 the same greedy tokens, with
   and without lazor's cache. The script checks transformers against itself first: its greedy tokens with and
   without its cache.
3. With `--bench`: times transformers decoding GPT-2 one sequence (batch 1) of `--bench-new` (128) tokens after
   `--bench-prompt` (16), in f32, f16 and bf16: eager (`generate` with its dynamic cache) and, where it compiles,
   with a static cache and the forward compiled (`mode="reduce-overhead"`, CUDA graphs), through `generate` and
   through a hand-written loop over a `StaticCache` (`static_loop_compiled`). Decoding alone: the time of
   generating N tokens minus the time of generating 1 (the prompt's forward and the first token), over N - 1.
   Prints `hf case=gpt2_decode_<mode>_<dtype> ms_per_token=.. tokens_per_s=..`, and the lazor commands to run in the
   same call for the figures beside them.

TF32 is off, so f32 products are f32.
"""
import argparse
import copy
import os
import sys
import time

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

DTYPES = (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16))


def greedy(model, ids, steps, cache):
    """`steps` tokens chosen by argmax after `ids`, with transformers' KV cache or the whole sequence each time."""
    chosen = []
    if cache:
        out = model(input_ids=ids, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1)
        chosen.append(nxt)
        for _ in range(steps - 1):
            out = model(input_ids=nxt[:, None], past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1)
            chosen.append(nxt)
    else:
        seq = ids
        for _ in range(steps):
            nxt = model(input_ids=seq, use_cache=False).logits[:, -1].argmax(-1)
            chosen.append(nxt)
            seq = torch.cat([seq, nxt[:, None]], dim=1)
    return torch.stack(chosen, dim=1)


def expected(model, ids, steps, device, path):
    """Writes `path` (input_ids, logits, greedy) for `model`; returns whether its cached and uncached tokens agree."""
    from safetensors.torch import save_file

    ids = ids.to(device)
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits.float()
        tokens = greedy(model, ids, steps, cache=True)
        plain = greedy(model, ids, steps, cache=False)
    same = bool(torch.equal(tokens, plain))
    save_file(
        {
            "input_ids": ids.to(torch.int32).cpu().contiguous(),
            "logits": logits.cpu().contiguous(),
            "greedy": tokens.to(torch.int32).cpu().contiguous(),
        },
        path,
    )
    return same


def per_token_ms(run, new):
    """ms per decoded token of `run(n)` (seconds to generate n tokens): (N tokens - 1 token) / (N - 1), best of 3
    after 2 warm-ups."""
    with torch.no_grad():
        for _ in range(2):
            run(new)
            run(1)
        full = min(run(new) for _ in range(3))
        first = min(run(1) for _ in range(3))
    return (full - first) * 1e3 / (new - 1)


def decode_ms(model, prompt, new, **kw):
    """ms per decoded token of `model.generate`: (N tokens - 1 token) / (N - 1), best of 3 after 2 warm-ups."""
    def run(n):
        args = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0, **kw)
        torch.cuda.synchronize()
        t = time.perf_counter()
        model.generate(prompt, **args)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    return per_token_ms(run, new)


def static_loop_ms(model, prompt, new):
    """ms per decoded token of a hand-written greedy loop over a static KV cache with the one-token forward compiled
    ("reduce-overhead": CUDA graphs), as transformers' docs and gpt-fast decode: `generate`'s own static path can
    fail with CUDA graphs ("overwritten by a subsequent run"). Each step marks a new graph step and keeps a clone of
    the token it reads. Timed as `decode_ms`: (N tokens - 1 token) / (N - 1), best of 3 after 2 warm-ups."""
    from transformers import StaticCache

    total = prompt.shape[1] + new
    try:
        cache = StaticCache(config=model.config, max_batch_size=1, max_cache_len=total, device="cuda", dtype=model.dtype)
    except TypeError:
        cache = StaticCache(config=model.config, max_cache_len=total)

    def one(ids, pos):
        out = model(input_ids=ids, cache_position=pos, past_key_values=cache, use_cache=True)
        return out.logits[:, -1].argmax(-1)

    step = torch.compile(one, mode="reduce-overhead", fullgraph=True)

    def run(n):
        cache.reset()
        torch.cuda.synchronize()
        t = time.perf_counter()
        p = prompt.shape[1]
        nxt = one(prompt, torch.arange(p, device="cuda"))
        for i in range(n - 1):
            torch.compiler.cudagraph_mark_step_begin()
            nxt = step(nxt[:, None], torch.tensor([p + i], device="cuda")).clone()
        torch.cuda.synchronize()
        return time.perf_counter() - t

    return per_token_ms(run, new)


def bench(master, args):
    prompt = torch.randint(0, master.config.vocab_size, (1, args.bench_prompt), device="cuda")
    # Every dtype of one mode before the next mode: the compiled modes take longest to start.
    for mode in args.bench_modes.split(","):
        for name, dt in DTYPES:
            case = f"gpt2_decode_{mode}_{name}"
            try:
                model = copy.deepcopy(master).to("cuda", dt).eval()
                kw = {}
                if mode == "static_compiled":
                    model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
                    kw["cache_implementation"] = "static"
                if mode == "static_loop_compiled":
                    ms = static_loop_ms(model, prompt, args.bench_new)
                else:
                    ms = decode_ms(model, prompt, args.bench_new, **kw)
                print(f"hf case={case} ms_per_token={ms:.3f} tokens_per_s={1e3 / ms:.1f}", flush=True)
            except Exception as e:  # noqa: BLE001 - a mode that fails is reported, the others still run
                print(f"hf case={case} error={type(e).__name__}: {str(e)[:300]}", flush=True)
            finally:
                model = None
                torch.cuda.empty_cache()
    prompt_ids = ",".join(str(int(t)) for t in prompt[0])
    for name, _ in DTYPES:
        print(
            f"lazor: cargo run --release --example gpt2 -- {args.dir} --dtype {name} --prompt {prompt_ids} "
            f"--max-new {args.bench_new}",
            flush=True,
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="where the checkpoint and the expected files go")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=4, help="prompts of the expected files")
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--steps", type=int, default=64, help="greedy tokens of the expected files")
    ap.add_argument("--bench", action="store_true", help="time transformers' decoding too")
    ap.add_argument("--bench-prompt", type=int, default=16)
    ap.add_argument("--bench-new", type=int, default=128)
    ap.add_argument(
        "--bench-modes",
        default="eager,static_compiled,static_loop_compiled",
        help="comma-separated: eager, static_compiled (generate), static_loop_compiled (a hand-written loop)",
    )
    args = ap.parse_args()

    from transformers import GPT2Config, GPT2LMHeadModel

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    config = GPT2Config(
        vocab_size=args.vocab,
        n_positions=args.positions,
        n_embd=args.width,
        n_layer=args.layers,
        n_head=args.heads,
    )
    master = GPT2LMHeadModel(config).eval()
    os.makedirs(args.dir, exist_ok=True)
    master.save_pretrained(args.dir)
    for f in ("config.json", "model.safetensors"):
        if not os.path.exists(os.path.join(args.dir, f)):
            sys.exit(f"save_pretrained wrote no {f} in {args.dir}")
    params = sum(p.numel() for p in master.parameters())
    print(f"hf checkpoint={args.dir} params={params} layers={args.layers} width={args.width} device={device}", flush=True)

    ids = torch.randint(0, args.vocab, (args.batch, args.prompt_len), generator=torch.Generator().manual_seed(args.seed + 1))
    for name, dt in DTYPES:
        model = copy.deepcopy(master).to(device, dt).eval()
        path = os.path.join(args.dir, f"expected_{name}.safetensors")
        same = expected(model, ids, args.steps, device, path)
        print(f"hf expected={path} dtype={name} cached_equals_uncached={same}", flush=True)
        print(f"lazor: cargo run --release --example gpt2 -- {args.dir} --dtype {name} --check {path}", flush=True)
        model = None
    if args.bench:
        if device != "cuda":
            sys.exit("--bench needs a CUDA device")
        bench(master, args)


if __name__ == "__main__":
    main()
