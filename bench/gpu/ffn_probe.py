#!/usr/bin/env python3
"""ffn_probe.py - would BERT-base's feed-forward block run faster at the
power cap if it ran in row chunks, so that each chunk's 3072-wide
intermediate stays in L2 between the two GEMMs instead of going to DRAM
and back? PyTorch's cuBLASLt GEMMs (GELU and residual in the epilogues),
12 blocks (one per layer) captured into one CUDA graph per chunk count,
timed back to back under sustained load in interleaved rounds, and once
alone (one replay between idle gaps). Prints ms per block and the ratio to
one chunk; checks that every chunking gives the same output.

Usage: ffn_probe.py [--rows 8192] [--rounds 6] [--seconds 1.0]
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import capture_graph  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--ffn", type=int, default=3072)
    ap.add_argument("--chunks", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=1.0)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev, dt = "cuda", torch.half
    M, H, F, L = a.rows, a.hidden, a.ffn, 12
    x = torch.randn(M, H, device=dev, dtype=dt)
    res = torch.randn(M, H, device=dev, dtype=dt)
    W1 = [(torch.randn(H, F, device=dev, dtype=dt) * 0.03) for _ in range(L)]
    b1 = [(torch.randn(F, device=dev, dtype=dt) * 0.1) for _ in range(L)]
    W2 = [(torch.randn(F, H, device=dev, dtype=dt) * 0.03) for _ in range(L)]
    chunks = [int(c) for c in a.chunks.split(",")]
    outs, graphs = {}, {}
    try:
        torch._addmm_activation(b1[0], x[:8], W1[0], use_gelu=True, out=torch.empty(8, F, device=dev, dtype=dt))
        OUT_OK = [True]
    except Exception as e:  # noqa: BLE001
        print("no out= for _addmm_activation:", e)
        OUT_OK = [False]
    for c in chunks:
        rows = M // c
        h = torch.empty(rows, F, device=dev, dtype=dt)  # one intermediate, reused by every chunk
        out = torch.empty(M, H, device=dev, dtype=dt)

        def block():
            for l in range(L):
                for k in range(c):
                    s = slice(k * rows, (k + 1) * rows)
                    src = x if l == 0 else out
                    if OUT_OK[0]:
                        torch._addmm_activation(b1[l], src[s], W1[l], use_gelu=True, out=h)
                        hh = h
                    else:  # no out= variant: the graph pool reuses one block anyway
                        hh = torch._addmm_activation(b1[l], src[s], W1[l], use_gelu=True)
                    torch.addmm(res[s], hh, W2[l], out=out[s])

        g = capture_graph(block)
        g.replay()
        torch.cuda.synchronize()
        outs[c], graphs[c] = out, g
    ref = outs[chunks[0]].float()
    for c in chunks:
        d = (outs[c].float() - ref).abs().max().item()
        print(f"chunks {c}: output max |diff| to {chunks[0]} chunk(s): {d:.3g}")

    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def sustained(g, seconds):
        n, t0 = 0, time.perf_counter()
        ev0.record()
        while time.perf_counter() - t0 < seconds:
            for _ in range(20):
                g.replay()
            n += 20
        ev1.record()
        ev1.synchronize()
        return ev0.elapsed_time(ev1) / n

    def alone(g, reps=30):
        ts = []
        for _ in range(reps):
            torch.cuda.synchronize()
            time.sleep(0.002)
            ev0.record()
            g.replay()
            ev1.record()
            ev1.synchronize()
            ts.append(ev0.elapsed_time(ev1))
        return statistics.median(ts)

    b2b = {c: [] for c in chunks}
    solo = {c: [] for c in chunks}
    for r in range(a.rounds):
        order = chunks[r % len(chunks):] + chunks[:r % len(chunks)]
        for c in order:
            sustained(graphs[c], 0.3)  # its own load first
            b2b[c].append(sustained(graphs[c], a.seconds))
            solo[c].append(alone(graphs[c]))
    base_b, base_s = statistics.median(b2b[chunks[0]]), statistics.median(solo[chunks[0]])
    print(f"{L} FFN blocks of {M} rows, {H} -> {F} -> {H}, float16; ms for all {L} (median of {a.rounds} rounds)")
    for c in chunks:
        mb, ms = statistics.median(b2b[c]), statistics.median(solo[c])
        print(f"chunks {c}: back to back {mb:.3f} (x{base_b / mb:.3f})  alone {ms:.3f} (x{base_s / ms:.3f})"
              f"  rounds {min(b2b[c]):.3f}-{max(b2b[c]):.3f}")


if __name__ == "__main__":
    main()
