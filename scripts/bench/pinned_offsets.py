#!/usr/bin/env python3
"""Does host->device bandwidth depend on how large the pinned buffer is? Copies 512 MiB chunks
from offsets spread over one large pinned buffer (default 24 GiB) and from a 1 GiB buffer,
median of 10 each. Usage: pinned_offsets.py [BUFFER_GIB]"""
import statistics
import sys

import torch

big_gib = int(sys.argv[1]) if len(sys.argv) > 1 else 24
chunk = 512 << 20
dev = torch.empty(chunk, dtype=torch.uint8, device="cuda")


def rate(host, offsets):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = []
    for i, off in enumerate(offsets * 2):
        s.record()
        dev.copy_(host[off:off + chunk], non_blocking=True)
        e.record()
        e.synchronize()
        if i >= 3:
            t.append(s.elapsed_time(e))
    return chunk / statistics.median(t) / 1e6


small = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True).fill_(1)
print(f"1 GiB buffer:        {rate(small, [0, chunk] * 4):.1f} GB/s")
big = torch.empty(big_gib << 30, dtype=torch.uint8, pin_memory=True).fill_(1)
spread = [i * ((big_gib << 30) - chunk) // 9 for i in range(10)]
print(f"{big_gib} GiB buffer, spread: {rate(big, spread):.1f} GB/s")
print(f"{big_gib} GiB buffer, start:  {rate(big, [0, chunk] * 4):.1f} GB/s")
