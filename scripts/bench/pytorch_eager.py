#!/usr/bin/env python3
"""PyTorch eager reference for `device` cells: Hugging Face GPT2LMHeadModel with sweetspot's
built-in shapes, random weights, eval mode, timed with CUDA events after warm-up (median).

Prints one line per configuration:
  model dtype batch seq attn median_ms p10_ms p90_ms
Usage: pytorch_eager.py [--models gpt2_1.5b,gpt3_6.7b] [--iters 10]
"""
import argparse
import statistics

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SHAPES = {  # name: (layers, hidden, heads, positions), vocab 50257 as in sweetspot
    "gpt2_small": (12, 768, 12, 1024),
    "gpt2_1.5b": (48, 1600, 25, 1024),
    "gpt3_6.7b": (32, 4096, 32, 2048),
    "gpt3_13b": (40, 5120, 40, 2048),
}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def time_forward(model, tokens, warmups, iters):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    with torch.inference_mode():
        for i in range(warmups + iters):
            start.record()
            model(tokens)
            end.record()
            end.synchronize()
            if i >= warmups:
                samples.append(start.elapsed_time(end))
    samples.sort()
    q = statistics.quantiles(samples, n=10)
    return statistics.median(samples), q[0], q[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="gpt2_1.5b,gpt3_6.7b")
    p.add_argument("--configs", default="fp32:1:1024,fp16:1:512", help="dtype:batch:seq,...")
    p.add_argument("--attn", default="eager,sdpa")
    p.add_argument("--warmups", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # true fp32, as sweetspot's default
    torch.backends.cudnn.allow_tf32 = False
    print("model dtype batch seq attn median_ms p10_ms p90_ms", flush=True)
    for name in a.models.split(","):
        layers, hidden, heads, positions = SHAPES[name]
        for attn in a.attn.split(","):
            cfg = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, n_positions=positions, vocab_size=50257,
                             attn_implementation=attn)
            for spec in a.configs.split(","):
                dtype, batch, seq = spec.split(":")
                torch.manual_seed(0)
                with torch.device("cuda"):
                    model = GPT2LMHeadModel(cfg).to(DTYPES[dtype]).eval()
                tokens = torch.randint(0, 50257, (int(batch), int(seq)), device="cuda")
                med, p10, p90 = time_forward(model, tokens, a.warmups, a.iters)
                print(f"{name} {dtype} {batch} {seq} {attn} {med:.3f} {p10:.3f} {p90:.3f}", flush=True)
                del model
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
