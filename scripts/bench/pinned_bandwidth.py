#!/usr/bin/env python3
"""Pinned host->device copy bandwidth through PyTorch by copy size, as a cross-check of
sweetspot's link probe (1 GiB copies). Prints GB/s (1e9 bytes), median of 10 copies per size.
Usage: pinned_bandwidth.py [SIZE_MIB ...]   (default: 32 128 512 1024)"""
import statistics
import sys

import torch

sizes = [int(s) for s in sys.argv[1:]] or [32, 128, 512, 1024]
host = torch.empty(max(sizes) << 20, dtype=torch.uint8, pin_memory=True).fill_(1)
dev = torch.empty_like(host, device="cuda")
for mib in sizes:
    n = mib << 20
    for name, dst, src in (("h2d", dev[:n], host[:n]), ("d2h", host[:n], dev[:n])):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t = []
        for i in range(13):
            s.record()
            dst.copy_(src, non_blocking=True)
            e.record()
            e.synchronize()
            if i >= 3:
                t.append(s.elapsed_time(e))
        print(f"{name} {mib:5d} MiB {n / statistics.median(t) / 1e6:6.1f} GB/s")
