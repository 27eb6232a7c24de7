#!/usr/bin/env python3
"""train_retrieval.py - train the Nexus retrieval model (MQAR, needle, variable tracking).

DESIGN
- Model: nxmodel.Model (the Llama architecture the engine runs), 2 layers, n_embd 64, 4 heads,
  head_dim 16, partial RoPE (6 of 16 dims rotated, base 500: every rotated frequency completes
  a period inside the shortest training context, and the 10 unrotated dims let a head match
  content at any distance, so the model runs at 4x its longest training length).
- Data: tasks.make_batch, a fresh seeded batch per step (no data set on disk). Loss on answer
  tokens only (as in Zoology). Curriculum over context length at about 2K tokens per step.
- Deterministic for --seed with torch.set_num_threads(--threads) (CPU only). Checkpoints every
  --ckpt-every steps (resumable with --resume); one JSON line per logged step to --log; the
  final weights go to OUT.nxw for `nexus import`.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nxmodel  # noqa: E402
import tasks  # noqa: E402

# (context length, batch size, steps)
STAGES = [(64, 32, 800), (128, 16, 800), (256, 8, 800), (512, 4, 700)]
CONFIG = dict(n_vocab=tasks.N_VOCAB, n_layer=2, n_embd=64, n_head=4, n_head_kv=4, n_ff=128,
              n_rot=6, rope_base=500.0, rms_eps=1e-5)


def lr_at(step, total, peak, warm=100):
    if step < warm:
        return peak * (step + 1) / warm
    p = (step - warm) / max(1, total - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def stage_at(step):
    s = 0
    for L, B, n in STAGES:
        if step < s + n:
            return L, B
        s += n
    return STAGES[-1][0], STAGES[-1][1]


def save_ckpt(path, model, opt, step, log_rows):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                "log": log_rows, "config": model.cfg.as_dict()}, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="output prefix (OUT.nxw, OUT.ckpt, OUT.curve.json)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--resume", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cfg = nxmodel.Config(**CONFIG)
    model = nxmodel.Model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.98), weight_decay=0.01)
    total = sum(n for _, _, n in STAGES)
    step, rows = 0, []
    ck = a.out + ".ckpt"
    if a.resume and os.path.exists(ck):
        st = torch.load(ck)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, rows = st["step"], st["log"]
        print("resumed at step", step, flush=True)
    t0 = time.time()
    acc_sum = n_sum = loss_sum = 0.0
    while step < total:
        L, B = stage_at(step)
        # the batch depends on (seed, step) only, so a resumed run sees the same data
        rng = np.random.default_rng([a.seed, step])
        x, t, _, _ = tasks.make_batch(rng, B, L)
        x = torch.from_numpy(x)
        t = torch.from_numpy(t)
        w = t >= 0
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, a.lr)
        logits = model(x, where=w)
        tgt = t[w]
        loss = F.cross_entropy(logits, tgt)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        loss_sum += loss.item()
        acc_sum += (logits.argmax(-1) == tgt).float().mean().item()
        n_sum += 1
        if step % 25 == 0 or step == total:
            row = {"step": step, "ctx": L, "loss": loss_sum / n_sum, "token_acc": acc_sum / n_sum,
                   "lr": lr_at(step - 1, total, a.lr), "wall_s": round(time.time() - t0, 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            acc_sum = n_sum = loss_sum = 0.0
        if step % a.ckpt_every == 0 or step == total:
            save_ckpt(ck, model, opt, step, rows)
    with open(a.out + ".curve.json.tmp", "w") as f:
        json.dump({"config": cfg.as_dict(), "stages": STAGES, "seed": a.seed, "lr": a.lr,
                   "rows": rows}, f, indent=1)
    os.replace(a.out + ".curve.json.tmp", a.out + ".curve.json")
    nxmodel.export_nxw(model, a.out + ".nxw")
    print("done", flush=True)


if __name__ == "__main__":
    main()
