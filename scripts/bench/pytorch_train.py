#!/usr/bin/env python3
"""PyTorch reference for `train` cells: one training step of Hugging Face GPT2LMHeadModel or
LlamaForCausalLM with sweetspot's built-in shapes as pytorch_eager.py builds them (an untied
lm_head, as sweetspot's layout; LLaMA without biases, RMSNorm eps 1e-5, sweetspot's rotary theta
and scaling), random weights: forward with the loss, backward, clip_grad_norm_(1.0) and fused AdamW
(lr 3e-4, betas 0.9 / 0.95, eps 1e-8, fp32 master weights and state). bf16 and fp16 run under
autocast over fp32 parameters (fp16 with a GradScaler); fp32 runs with TF32 off, as sweetspot's
fp32 cells. SDPA attention. Each step is timed with CUDA events after the warm-ups; the median and
tokens/s are printed, one line per configuration:
  model dtype batch seq median_ms tokens_per_s peak_gib
or "out of memory" for a batch that does not fit.
Usage: pytorch_train.py [--model gpt2_1.5b] [--dtypes bf16,fp32] [--batches 4,8] [--steps 10]
       pytorch_train.py --model llama_1b --dtypes bf16 --batches 1,2,4 --seq 2048
"""
import argparse
import statistics

import torch

from pytorch_eager import SHAPES, model_maker  # beside this script

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def train_steps(model_name, dtype, batch, seq, warmups, steps):
    make, vocab = model_maker(model_name, "sdpa")
    torch.manual_seed(0)
    model = make().cuda().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0,
                                  fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == "fp16")
    tokens = torch.randint(0, vocab, (batch, seq + 1), device="cuda")
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
