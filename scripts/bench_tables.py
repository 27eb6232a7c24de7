#!/usr/bin/env python3
"""Render the benchmark JSON files in bench/results/ as the Markdown tables of the README.

Usage: python3 scripts/bench_tables.py [bench/results]
The JSON files are written by `nexus bench --json` (see README, "Benchmarks").
"""
import json
import os
import sys

d = sys.argv[1] if len(sys.argv) > 1 else "bench/results"


def load(name):
    p = os.path.join(d, name)
    if not os.path.exists(p) or os.path.getsize(p) == 0:
        return None
    with open(p) as f:
        return json.load(f)


print("| model | pp t/s (median, min-max) | tg t/s (median, min-max) | roofline t/s | fraction |")
print("|---|---|---|---|---|")
for name, label in [("engine_q4km_pp512_tg128.json", "Q4_K_M, pp512 / tg128"),
                    ("engine_q4km_tg128_depth4096.json", "Q4_K_M, tg128 at depth 4096"),
                    ("engine_q8_0_pp512_tg128.json", "Q8_0, pp512 / tg128"),
                    ("engine_f16_pp128_tg128.json", "F16, pp128 / tg128")]:
    r = load(name)
    if not r:
        continue
    pp = (f"{r['pp_tps']:.1f} ({r['pp_tps_min']:.1f}-{r['pp_tps_max']:.1f})"
          if r["n_prompt"] else "-")
    print(f"| {label} | {pp} | {r['tg_tps']:.1f} ({r['tg_tps_min']:.1f}-{r['tg_tps_max']:.1f}) "
          f"| {r['roofline_tps']:.1f} | {r['roofline_fraction']:.2f} |")

print()
for ctx in (4096, 2048):
    full = load(f"kv_full_ctx{ctx}.json")
    if not full:
        continue
    print(f"Context {ctx} ({ctx - 128} prompt tokens, then 128 decoded), 20% density, stream regime:")
    print()
    print("| policy | tg t/s (median, min-max) | vs full | KV final MiB | vs full | KV peak MiB "
          "| evicting, % of decode |")
    print("|---|---|---|---|---|---|---|")
    for pol in ["full", "nexus", "streaming", "h2o", "snapkv", "pyramidkv", "adakv", "morphkv",
                "tova"]:
        r = load(f"kv_{pol}_ctx{ctx}.json")
        if not r:
            continue
        share = 100.0 * r["evict_seconds"] / r["decode_seconds"] if r["decode_seconds"] else 0
        print(f"| {pol} | {r['tg_tps']:.1f} ({r['tg_tps_min']:.1f}-{r['tg_tps_max']:.1f}) "
              f"| {r['tg_tps'] / full['tg_tps']:.2f}x | {r['kv_bytes_final'] / 2**20:.1f} "
              f"| {r['kv_bytes_final'] / full['kv_bytes_final']:.3f}x "
              f"| {r['kv_bytes_peak'] / 2**20:.1f} | {share:.1f} |")
    print()
