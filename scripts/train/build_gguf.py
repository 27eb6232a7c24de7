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
    ap.add_argument("--curve", required=True)
    ap.add_argument("--nexus", default="./build/nexus")
    ap.add_argument("--name", required=True)
    ap.add_argument("--ctx", type=int, required=True, help="context_length metadata")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    cfg = nxmodel.Config(**json.load(open(a.curve))["config"])
    m = nxmodel.Model(cfg)
    m.load_state_dict(torch.load(a.ckpt)["model"])
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
