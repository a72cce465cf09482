#!/usr/bin/env python3
"""PyTorch's padded and packed LLaMA forwards on one ragged batch, beside sweetspot's packing cells.

Hugging Face LlamaForCausalLM (pytorch_eager.py's shapes), random weights, eval, SDPA, bf16, one
batch of sequences of the given lengths, three ways:
  padded    right-padded to the longest, attention_mask marking the real tokens (what a padded
            framework computes: every row of the rectangle);
  packed    all sequences in one row, position ids restarting per sequence and a block-diagonal
            causal mask as a 4-D boolean attention mask, so no sequence attends to another;
  position  the same row with position ids alone, which the model does not read as boundaries:
            its sequences attend across each other (how packing goes wrong).
Each is timed with CUDA events (median of --iters after --warmups) with its peak memory
(torch.cuda.max_memory_allocated over a forward, weights included), and its logits on the real
tokens are compared with each of the first --check sequences run alone: max |Δ| / max |alone|.

  pytorch_packing.py --lengths 12,300,77,...          the lengths as a list
  pytorch_packing.py --lengths-file F                  one per line
  pytorch_packing.py --lognormal 330,0.85 --batch 32 --seed 1 --clip 16,2048
Prints one line per way: model mode tokens rows median_ms p10_ms p90_ms peak_gib check_rel_err
"""
import argparse
import math
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_eager import model_maker  # noqa: E402


def lengths_from(a):
    if a.lengths:
        return [int(v) for v in a.lengths.split(",")]
    if a.lengths_file:
        with open(a.lengths_file) as f:
            return [int(line.split("#")[0]) for line in f if line.split("#")[0].strip()]
    median, sigma = (float(v) for v in a.lognormal.split(","))
    low, high = (int(v) for v in a.clip.split(","))
    gen = torch.Generator().manual_seed(a.seed)
    z = torch.randn(a.batch, generator=gen, dtype=torch.float64)
    return [min(max(round(median * math.exp(sigma * float(v))), low), high) for v in z]


def padded_inputs(tokens, lengths):
    longest = max(lengths)
    ids = torch.zeros(len(lengths), longest, dtype=torch.long, device="cuda")
    mask = torch.zeros(len(lengths), longest, dtype=torch.long, device="cuda")
    for i, (t, n) in enumerate(zip(tokens, lengths)):
        ids[i, :n] = t
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask}


def packed_inputs(tokens, lengths, with_mask):
    ids = torch.cat(tokens).unsqueeze(0)
    positions = torch.cat([torch.arange(n, device="cuda") for n in lengths]).unsqueeze(0)
    inputs = {"input_ids": ids, "position_ids": positions}
    if with_mask:
        seq_of = torch.cat([torch.full((n,), i, device="cuda") for i, n in enumerate(lengths)])
        same = seq_of[:, None] == seq_of[None, :]
        causal = torch.ones(len(seq_of), len(seq_of), dtype=torch.bool, device="cuda").tril()
        inputs["attention_mask"] = (same & causal)[None, None]
    return inputs


def real_logits(model, inputs, lengths, mode):
    """The logits of each sequence's real tokens, [n, vocab] per sequence."""
    logits = model(**inputs).logits
    if mode == "padded":
        return [logits[i, :n] for i, n in enumerate(lengths)]
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    return [logits[0, s:s + n] for s, n in zip(starts, lengths)]


def time_ms(model, inputs, warmups, iters):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for i in range(warmups + iters):
        start.record()
        model(**inputs)
        end.record()
        end.synchronize()
        if i >= warmups:
            samples.append(start.elapsed_time(end))
    q = statistics.quantiles(samples, n=10)
    return statistics.median(samples), q[0], q[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="llama_1b")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--lengths", help="comma-separated lengths")
    given.add_argument("--lengths-file", help="one length per line ('#' comments)")
    given.add_argument("--lognormal", metavar="MEDIAN,SIGMA", help="draw --batch lengths (torch's generator, --seed)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--clip", default="16,2048", help="LOW,HIGH for --lognormal")
    p.add_argument("--modes", default="padded,packed,position")
    p.add_argument("--check", type=int, default=4, help="sequences run alone for the logits check")
    p.add_argument("--warmups", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args()
    lengths = lengths_from(a)
    real = sum(lengths)
    print(f"# {len(lengths)} sequences, {real} real tokens, longest {max(lengths)}, "
          f"padding {1 - real / (len(lengths) * max(lengths)):.1%}", flush=True)
    print("model mode tokens rows median_ms p10_ms p90_ms peak_gib check_rel_err", flush=True)
    for name in a.models.split(","):
        make, vocab = model_maker(name, "sdpa")
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = make().to(torch.bfloat16).eval()
        gen = torch.Generator(device="cuda").manual_seed(a.seed)
        tokens = [torch.randint(0, vocab, (n,), device="cuda", generator=gen) for n in lengths]
        with torch.inference_mode():
            alone = [model(input_ids=t[None]).logits[0].float() for t in tokens[:a.check]]
            for mode in a.modes.split(","):
                inputs = padded_inputs(tokens, lengths) if mode == "padded" else \
                    packed_inputs(tokens, lengths, with_mask=mode == "packed")
                got = real_logits(model, inputs, lengths, mode)[:a.check]
                err = max(float((g.float() - w).abs().max() / w.abs().max()) for g, w in zip(got, alone))
                del got
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                model(**inputs)
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated() / 2**30
                med, p10, p90 = time_ms(model, inputs, a.warmups, a.iters)
                rows = inputs["input_ids"].numel()
                print(f"{name} {mode} {real} {rows} {med:.3f} {p10:.3f} {p90:.3f} {peak:.3f} {err:.3e}", flush=True)
                del inputs
                torch.cuda.empty_cache()
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
