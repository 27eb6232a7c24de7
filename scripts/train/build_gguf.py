#!/usr/bin/env python3
"""build_gguf.py - checkpoint -> NXW1 -> GGUF via `nexus mkmodel` (template with the same
shapes and the synthetic SentencePiece vocabulary) and `nexus import` (the trained weights,
plus the keys mkmodel has no flag for: partial RoPE width, context length, name)."""
import argparse
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nxmodel  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--curve", default=None, help="curve JSON with the config (default: the "
                    "checkpoint's)")
    ap.add_argument("--nexus", default="./build/nexus")
    ap.add_argument("--name", required=True)
    ap.add_argument("--ctx", type=int, required=True, help="context_length metadata")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--curve-out", default=None,
                    help="also write the checkpoint's training log as a curve JSON here")
    ap.add_argument("--meta", default="{}", help="JSON object merged into the curve JSON")
    ap.add_argument("--bos-like", type=int, default=None, metavar="ID",
                    help="give BOS (id 1) the embedding of token ID (a model trained without "
                    "BOS: the engine's streams start with it)")
    a = ap.parse_args()
    m, st = nxmodel.load_checkpoint(a.ckpt, json.load(open(a.curve))["config"] if a.curve else None)
    cfg = m.cfg
    if a.bos_like is not None:
        with torch.no_grad():
            m.tok_embd.weight[1] = m.tok_embd.weight[a.bos_like]
    if a.curve_out:
        doc = {"config": cfg.as_dict(), "step": st["step"], "rows": st["log"]}
        doc.update(json.loads(a.meta))
        nxmodel.write_json(a.curve_out, doc, indent=1)
    nxw = a.out + ".nxw"
    tmpl = a.out + ".template.gguf"
    nxmodel.export_nxw(m, nxw)
    subprocess.run([a.nexus, "mkmodel", "-q", "-o", tmpl, "--arch", "llama",
                    "--layers", str(cfg.n_layer), "--embd", str(cfg.n_embd),
                    "--heads", str(cfg.n_head), "--heads-kv", str(cfg.n_head_kv),
                    "--ff", str(cfg.n_ff), "--vocab", str(cfg.n_vocab), "--ctx", str(a.ctx),
                    "--rope-base", repr(cfg.rope_base), "--eps", repr(cfg.rms_eps),
                    "--type", "f32", "--name", a.name], check=True)
    subprocess.run([a.nexus, "import", "-w", nxw, "--like", tmpl, "-o", a.out,
                    "--set", "llama.rope.dimension_count=u32:%d" % cfg.n_rot], check=True)
    os.remove(nxw)
    os.remove(tmpl)


if __name__ == "__main__":
    main()
