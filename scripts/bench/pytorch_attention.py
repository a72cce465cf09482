#!/usr/bin/env python3
"""PyTorch's fused attention on the shapes of build/tests/bench_attention, beside sweetspot's.

Times torch.nn.functional.scaled_dot_product_attention (causal, TF32 off, so fp32 is true fp32)
with CUDA events: 3 warm-ups, the median of 20 runs, the same as bench_attention. Counts flops the
same way (4·batch·heads·seq²·hd / 2). With --sweetspot FILE (bench_attention's table), prints that
table with PyTorch's columns and FlashAttention-2's published H100 forward throughput beside the
flash kernel's.

With --backward, times the backward instead (torch.autograd.grad of the causal attention's
output, the forward run once before), fp16 and bf16 at FlashAttention-2's shapes, counting
2.5 × the forward's flops (the backward's five products against the forward's two).

  pytorch_attention.py                            PyTorch's table alone
  pytorch_attention.py --sweetspot bench.txt      the side-by-side table of docs/benchmarks.md
  pytorch_attention.py --backward                 PyTorch's backward table
"""
import argparse
import sys

# FlashAttention-2's H100 forward throughput (causal, fp16, TFLOP/s), by head dim and seq:
# approximate, the ends of the range its paper's H100 figure shows at seq 512 and 2k, seq 1k in
# between. The target for sweetspot's flash kernel is half of it.
FA2_H100 = {64: {512: 180, 1024: 220, 2048: 260}, 128: {512: 190, 1024: 250, 2048: 300}}

# bench_attention's shapes (batch, heads, seq, head dim): FlashAttention-2's (16k tokens, 2048
# channels), then one layer of GPT-2 1.5B, GPT-3 6.7B and GPT-3 13B at batch 1, seq 1024.
SHAPES = [(16384 // s, 2048 // hd, s, hd) for hd in (64, 128) for s in (512, 1024, 2048)] + \
         [(1, 25, 1024, 64), (1, 32, 1024, 128), (1, 40, 1024, 128)]


def pytorch_ms(torch, batch, heads, seq, hd, dtype):
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.rand(batch, heads, seq, hd, device="cuda", dtype=dtype, generator=gen) * 2 - 1
               for _ in range(3))
    f = torch.nn.functional.scaled_dot_product_attention
    for _ in range(3):
        f(q, k, v, is_causal=True)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(20):
        start.record()
        f(q, k, v, is_causal=True)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return sorted(times)[len(times) // 2]


def pytorch_backward_ms(torch, batch, heads, seq, hd, dtype):
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v, dout = (torch.rand(batch, heads, seq, hd, device="cuda", dtype=dtype, generator=gen) * 2 - 1
                     for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    def backward():
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    for _ in range(3):
        backward()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(20):
        start.record()
        backward()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return sorted(times)[len(times) // 2]


def print_backward():
    import torch
    print("| dtype | batch | heads | seq | head dim | PyTorch SDPA backward ms | TFLOP/s (2.5 × forward) |")
    print("|---|---|---|---|---|---|---|")
    for batch, heads, seq, hd in SHAPES[:6]:
        for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            ms = pytorch_backward_ms(torch, batch, heads, seq, hd, dtype)
            print(f"| {name} | {batch} | {heads} | {seq} | {hd} | {ms:.3f} | {2.5 * tflops(batch, heads, seq, hd, ms):.1f} |")


def tflops(batch, heads, seq, hd, ms):
    return 4.0 * batch * heads * seq * seq * hd / 2.0 / (ms * 1e9)


def measure():
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    names = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    result = {}
    for batch, heads, seq, hd in SHAPES:
        for name, dtype in names.items():
            result[(name, batch, heads, seq, hd)] = pytorch_ms(torch, batch, heads, seq, hd, dtype)
    return result


def read_sweetspot(path):
    """bench_attention's rows: (dtype, batch, heads, seq, hd) -> (baseline ms, flash ms)."""
    rows = {}
    with open(path) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != 9 or not cells[1].isdigit():
                continue
            key = (cells[0], int(cells[1]), int(cells[2]), int(cells[3]), int(cells[4]))
            rows[key] = (float(cells[5]), float(cells[7]))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweetspot", help="bench_attention's output, to print beside PyTorch's")
    p.add_argument("--backward", action="store_true", help="time the backward (fp16, bf16) instead")
    a = p.parse_args()
    if a.backward:
        print_backward()
        return 0
    ours = read_sweetspot(a.sweetspot) if a.sweetspot else None
    theirs = measure()
    if ours is None:
        print("| dtype | batch | heads | seq | head dim | PyTorch SDPA ms | TFLOP/s |")
        print("|---|---|---|---|---|---|---|")
        for (dtype, b, h, s, hd), ms in theirs.items():
            print(f"| {dtype} | {b} | {h} | {s} | {hd} | {ms:.3f} | {tflops(b, h, s, hd, ms):.1f} |")
        return 0
    print("| dtype | batch × heads | seq | head dim | flash TFLOP/s | PyTorch SDPA TFLOP/s | "
          "FlashAttention-2 (published) | flash ÷ SDPA |")
    print("|---|---|---|---|---|---|---|---|")
    for key, ms in theirs.items():
        if key not in ours:
            continue
        dtype, b, h, s, hd = key
        flash = tflops(b, h, s, hd, ours[key][1])
        sdpa = tflops(b, h, s, hd, ms)
        fa2 = FA2_H100.get(hd, {}).get(s) if dtype != "fp32" else None
        fa2_text = f"{fa2} (half: {fa2 / 2:.0f})" if fa2 else "–"
        print(f"| {dtype} | {b} × {h} | {s} | {hd} | {flash:.1f} | {sdpa:.1f} | {fa2_text} | {flash / sdpa:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
