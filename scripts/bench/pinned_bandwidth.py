#!/usr/bin/env python3
"""Pinned host<->device copy bandwidth through PyTorch, as a cross-check of sweetspot's own link
probe. Prints GB/s (1e9 bytes) for H2D and D2H, median of 10 copies of SIZE_GIB."""
import statistics
import sys

import torch

size = int(float(sys.argv[1] if len(sys.argv) > 1 else 1) * (1 << 30))
host = torch.empty(size, dtype=torch.uint8, pin_memory=True).fill_(1)
dev = torch.empty(size, dtype=torch.uint8, device="cuda")
for name, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = []
    for i in range(13):
        s.record()
        dst.copy_(src, non_blocking=True)
        e.record()
        e.synchronize()
        if i >= 3:
            t.append(s.elapsed_time(e))
    print(f"{name} {size / statistics.median(t) / 1e6:.1f} GB/s")
