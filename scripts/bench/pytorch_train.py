#!/usr/bin/env python3
"""PyTorch reference for `train` cells: one training step of Hugging Face GPT2LMHeadModel (an
untied lm_head, as sweetspot's layout) with sweetspot's built-in shapes, random weights: forward
with the loss, backward, clip_grad_norm_(1.0) and fused AdamW (lr 3e-4, betas 0.9 / 0.95, eps 1e-8,
fp32 master weights and state). bf16 and fp16 run under autocast over fp32 parameters (fp16 with a
GradScaler); fp32 runs with TF32 off, as sweetspot's fp32 cells. SDPA attention. Each step is timed
with CUDA events after the warm-ups; the median and tokens/s are printed, one line per
configuration:
  model dtype batch seq median_ms tokens_per_s peak_gib
or "out of memory" for a batch that does not fit.
Usage: pytorch_train.py [--model gpt2_1.5b] [--dtypes bf16,fp32] [--batches 4,8] [--steps 10]
"""
import argparse
import statistics

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SHAPES = {  # name: (layers, hidden, heads, positions), vocab 50257 as in sweetspot
    "gpt2_small": (12, 768, 12, 1024),
    "gpt2_1.5b": (48, 1600, 25, 1024),
}
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def train_steps(model_name, dtype, batch, seq, warmups, steps):
    layers, hidden, heads, positions = SHAPES[model_name]
    config = GPT2Config(vocab_size=50257, n_positions=positions, n_embd=hidden, n_layer=layers, n_head=heads,
                        tie_word_embeddings=False, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).cuda().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0,
                                  fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == "fp16")
    tokens = torch.randint(0, 50257, (batch, seq + 1), device="cuda")
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    torch.cuda.reset_peak_memory_stats()
    for i in range(warmups + steps):
        start.record()
        with torch.autocast("cuda", dtype=AUTOCAST.get(dtype, torch.float32), enabled=dtype in AUTOCAST):
            logits = model(inputs).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        end.record()
        end.synchronize()
        if i >= warmups:
            samples.append(start.elapsed_time(end))
    median = statistics.median(samples)
    return median, batch * seq / (median / 1000.0), torch.cuda.max_memory_allocated() / 2**30


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gpt2_1.5b", choices=sorted(SHAPES))
    parser.add_argument("--dtypes", default="bf16,fp32")
    parser.add_argument("--batches", default="4")
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--warmups", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print("model dtype batch seq median_ms tokens_per_s peak_gib")
    for dtype in args.dtypes.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            try:
                median, rate, peak = train_steps(args.model, dtype, batch, args.seq, args.warmups, args.steps)
                print(f"{args.model} {dtype} {batch} {args.seq} {median:.1f} {rate:.0f} {peak:.2f}", flush=True)
            except torch.OutOfMemoryError:
                print(f"{args.model} {dtype} {batch} {args.seq} out of memory", flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
