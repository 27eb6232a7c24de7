#!/usr/bin/env python3
"""train_retrieval.py - train the Nexus retrieval model (MQAR, needle, variable tracking).

DESIGN
- Model: nxmodel.Model (the Llama architecture the engine runs), 2 layers, n_embd 64, 4 heads,
  head_dim 16, partial RoPE (8 of 16 dims rotated, base 100: wavelengths 6 to 200 tokens, so
  every rotated frequency completes periods inside the training contexts, and the 8 unrotated
  dims let a head match content at any distance, so the model can run at 8x its longest
  training length). (6 dims at base 500 aliased distance 1 with distance 7: a sharp
  previous-token head could not form.)
- Data: tasks.make_batch, a fresh seeded batch per step (no data set on disk). Loss: cross
  entropy on the answer tokens, plus --aux-prev x an auxiliary "name the previous token" loss
  at every other position (the logits at t are trained to give token t - 1 there). Answer
  losses alone left the model on the usual associative-recall plateau (it copied some value
  but did not match keys: MQAR 15% after 1000 steps); the auxiliary target makes a
  previous-token head form at once, which is half of the induction circuit recall needs, and
  at a value position it writes the key in front of it into the residual stream. It changes
  what the model predicts at filler positions (the previous token), never at answers.
  Curriculum over context length at about 2K tokens per step.
- Second phase (--init-gguf, --stages, --phase-tag): continue from a committed GGUF's weights
  (fresh AdamW state) on a new schedule, with its own data stream (batch of step s from
  [seed, phase_tag, s]). The committed model is phase 1 (the step-900 cut of the 1500-step
  curriculum) followed by a phase at 512 and 1024 tokens: phase 1 had never trained past 256
  tokens and fell from 91% at 512 to 62% at 1K (models/nexus-retrieval/README.md).
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
STAGES = [(64, 32, 400), (128, 16, 400), (256, 8, 400), (512, 4, 300)]
CONFIG = dict(n_vocab=tasks.N_VOCAB, n_layer=2, n_embd=64, n_head=4, n_head_kv=4, n_ff=128,
              n_rot=8, rope_base=100.0, rms_eps=1e-5)


def structured_init(model, cfg, seed):
    g = torch.Generator().manual_seed(seed + 12345)
    u = torch.randn(cfg.n_embd, generator=g)
    u = u / u.norm()
    hd, nr = cfg.head_dim, cfg.n_rot
    with torch.no_grad():
        e = model.tok_embd.weight
        e -= (e @ u)[:, None] * u[None, :]  # the same u-component for every token
        e += 4.0 * u
        b = model.blocks[0]
        b.wq.weight[0:hd] = 0.0
        b.wk.weight[0:hd] = 0.0
        a = 2.3
        for i in range(nr // 2):
            th = cfg.rope_base ** (-2.0 * i / nr)
            b.wq.weight[2 * i] = a * u
            b.wk.weight[2 * i] = a * math.cos(th) * u
            b.wk.weight[2 * i + 1] = a * math.sin(th) * u
        # (head 0's remaining k rows keep zero: its score is positional at first)


def load_gguf_weights(model, path):
    """Copy a GGUF's F32 tensors (build_gguf.py's names) into model."""
    import gguf_read
    ts, _ = gguf_read.read_f32_tensors(path)
    with torch.no_grad():
        for name, _, t in model.gguf_tensors_live():
            if name not in ts:
                raise KeyError("%s: no tensor %s" % (path, name))
            src = torch.from_numpy(ts[name])
            if src.shape != t.shape:
                raise ValueError("%s: %s has shape %s, model %s" % (path, name,
                                 tuple(src.shape), tuple(t.shape)))
            t.copy_(src)


def parse_stages(text):
    return [tuple(int(v) for v in part.split(":")) for part in text.split(",")]


def lr_at(step, total, peak, warm=100):
    if step < warm:
        return peak * (step + 1) / warm
    p = (step - warm) / max(1, total - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def stage_at(step, stages=STAGES):
    s = 0
    for L, B, n in stages:
        if step < s + n:
            return L, B
        s += n
    return stages[-1][0], stages[-1][1]


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
    ap.add_argument("--aux-prev", type=float, default=0.2)
    ap.add_argument("--stop-step", type=int, default=0,
                    help="stop after this step (the schedule still spans every stage), so a run "
                         "cut short can be reproduced exactly")
    ap.add_argument("--init-gguf", default=None,
                    help="start from this GGUF's weights (second phase) instead of the "
                         "structured initialisation")
    ap.add_argument("--stages", default=None, help="L:B:steps,... (default: the phase-1 "
                    "curriculum %s)" % STAGES)
    ap.add_argument("--phase-tag", type=int, default=0,
                    help="nonzero: batches from [seed, tag, step] (a second phase's own data)")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--task-probs", default="0.5,0.25,0.25", help="mqar,needle,vt")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    stages = parse_stages(a.stages) if a.stages else STAGES
    probs = tuple(float(v) for v in a.task_probs.split(","))
    cfg = nxmodel.Config(**CONFIG)
    model = nxmodel.Model(cfg)
    if a.init_gguf:
        load_gguf_weights(model, a.init_gguf)
    else:
        structured_init(model, cfg, a.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.98), weight_decay=0.01)
    total = sum(n for _, _, n in stages)
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
    end = min(total, a.stop_step) if a.stop_step > 0 else total
    while step < end:
        L, B = stage_at(step, stages)
        # the batch depends on (seed, [tag,] step) only, so a resumed run sees the same data
        rng = np.random.default_rng([a.seed, a.phase_tag, step] if a.phase_tag
                                    else [a.seed, step])
        x, t, _, _ = tasks.make_batch(rng, B, L, probs)
        x = torch.from_numpy(x)
        t = torch.from_numpy(t)
        w = t >= 0
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, a.lr, a.warmup)
        full = model(x)                      # (B, L, V)
        logits = full[w]
        tgt = t[w]
        loss = F.cross_entropy(logits, tgt)
        if a.aux_prev > 0:
            aux = ~w
            aux[:, 0] = False
            prev = torch.roll(x, 1, dims=1)
            loss = loss + a.aux_prev * F.cross_entropy(full[aux], prev[aux])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        loss_sum += loss.item()
        acc_sum += (logits.argmax(-1) == tgt).float().mean().item()
        n_sum += 1
        if step % 25 == 0 or step == end:
            row = {"step": step, "ctx": L, "loss": loss_sum / n_sum, "token_acc": acc_sum / n_sum,
                   "lr": lr_at(step - 1, total, a.lr, a.warmup), "wall_s": round(time.time() - t0, 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            acc_sum = n_sum = loss_sum = 0.0
        if step % a.ckpt_every == 0 or step == end:
            save_ckpt(ck, model, opt, step, rows)
    with open(a.out + ".curve.json.tmp", "w") as f:
        json.dump({"config": cfg.as_dict(), "stages": stages, "seed": a.seed, "lr": a.lr,
                   "aux_prev": a.aux_prev, "init_gguf": a.init_gguf, "phase_tag": a.phase_tag,
                   "task_probs": probs, "warmup": a.warmup, "rows": rows}, f, indent=1)
    os.replace(a.out + ".curve.json.tmp", a.out + ".curve.json")
    nxmodel.export_nxw(model, a.out + ".nxw")
    print("done", flush=True)


if __name__ == "__main__":
    main()
