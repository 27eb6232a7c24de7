#!/usr/bin/env python3
"""train_lm.py - a byte-level Llama language model on the King James Bible (public domain).

STATUS: the committed models/nexus-kjv (README there; recipe scripts/train/make_kjv.sh) is the
ninth session's: 1000 steps on 2048-token windows from the first step (steps 1-200 on
--stages 2048:1:1300, then resumed on 2048:1:1000), one torch thread. Two earlier schedules with
a 256-token first stage (240 steps, sixth session; 1000 + 150 steps, eighth) gave models that
did worse with their full context than with the last 256 tokens: the long stage came too late,
at a low learning rate, for distances past 256 to be learned.

DESIGN
- Text: `bible -f Gen1:1-Rev22:21` from Debian's bible-kjv + bible-kjv-text packages (the KJV
  text is public domain), verse references stripped, one verse per line. The SHA-256 of the
  text is logged so the data is checkable. The last 5% of the token stream (the end of the New
  Testament) is held out; training windows are drawn from the first 95% only.
- Tokens match the engine's tokenizer for the synthetic SentencePiece vocabulary of 260 tokens
  that `nexus mkmodel --vocab 260` writes: byte b -> id b + 3 (byte-fallback tokens), except the
  space -> id 259 ("▁"); `nexus tokenize` on the same text gives the same ids (after its dummy
  prefix), so `nexus eval --file` runs on real text.
- Model: nxmodel.Model, 3 layers, n_embd 64, 4 heads / 2 KV heads, SwiGLU 192, RoPE on 12 of 16
  head dims (base 10000). Full 2048-token windows from the first step (the default schedule),
  so every rotated frequency and every distance up to 2K is seen while the learning rate is
  high; --stages L:B:steps,... gives other schedules (short windows first was tried: STATUS).
- Deterministic for --seed and --threads; batches are a function of (seed, step).
- --eval-ctx: held-out perplexity by context length (does it use its context?): on held-out
  windows of 2048 tokens, the nll of tokens [1024, 2048) with the full causal context against a
  local-only one (the first 4 tokens plus the last W, for W = 64, 256, 1024), as JSON.
"""
import argparse
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nxmodel  # noqa: E402

STAGES = [(2048, 1, 1000)]  # default schedule (the committed model's): --stages overrides
CONFIG = dict(n_vocab=260, n_layer=3, n_embd=64, n_head=4, n_head_kv=2, n_ff=192, n_rot=12,
              rope_base=10000.0, rms_eps=1e-5)
SPACE_ID = 259


def kjv_text():
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, check=True).stdout
    lines = [re.sub(rb"^\S+ ", b"", ln) for ln in out.split(b"\n") if ln.strip()]
    return b"\n".join(lines) + b"\n"


def encode(text):
    a = np.frombuffer(text, dtype=np.uint8).astype(np.int64) + 3
    a[a == ord(" ") + 3] = SPACE_ID
    return a


def split(tokens):
    n = int(len(tokens) * 0.95)
    return tokens[:n], tokens[n:]


def lr_at(step, total, peak, warm=50):
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
    return STAGES[-1][:2]


@torch.no_grad()
def heldout_loss(model, held, L, n):
    model.eval()
    tot = cnt = 0.0
    for i in range(n):
        s = (len(held) - L - 1) * i // max(1, n - 1)
        x = torch.from_numpy(held[s:s + L + 1][None])
        lo = model(x[:, :-1])
        tot += F.cross_entropy(lo[0], x[0, 1:], reduction="sum").item()
        cnt += L
    model.train()
    return tot / cnt


@torch.no_grad()
def eval_ctx(a):
    """nll (nats / token) of tokens [1024, 2048) of held-out 2048-token windows, full context
    against sink 4 + the last W tokens (causal_mask's local-only form)."""
    model, st = nxmodel.load_checkpoint(a.eval_ctx)
    text = kjv_text()
    _, held = split(encode(text))
    L, n = 2048, a.eval_windows
    res = {"checkpoint_step": st["step"], "windows": n, "window_len": L, "scored": [1024, L],
           "text_sha256": hashlib.sha256(text).hexdigest(), "nll": {}}
    masks = [("full", nxmodel.causal_mask(L))] + [
        ("sink4+last%d" % w, nxmodel.causal_mask(L, sink=4, window=w)) for w in (64, 256, 1024)]
    per = {k: [] for k, _ in masks}
    for i in range(n):
        s = (len(held) - L - 1) * i // max(1, n - 1)
        x = torch.from_numpy(held[s:s + L + 1][None])
        for k, m in masks:
            lo = model(x[:, :-1], mask=m)[0, 1023:L - 1]
            per[k].append(F.cross_entropy(lo, x[0, 1024:L]).item())
    for k, v in per.items():
        d = np.array(v) - np.array(per["full"])
        res["nll"][k] = {"mean": float(np.mean(v)), "ppl": float(math.exp(np.mean(v))),
                         "diff_vs_full": float(d.mean()),
                         "diff_se": float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0,
                         "per_window": v}
    nxmodel.write_json(a.out, res, indent=1)
    print(json.dumps({k: (round(r["ppl"], 4), round(r["diff_vs_full"], 4), round(r["diff_se"], 4))
                      for k, r in res["nll"].items()}), flush=True)


@torch.no_grad()
def write_ref(a):
    """torch's logits on the engine's first held-out stream (BOS, then the tokenizer's dummy-prefix
    space and the held-out text; BOS with the embedding of id --bos-like, as build_gguf.py
    exports it) at a few positions: the oracle tests/test_import.c holds the engine to."""
    model, st = nxmodel.load_checkpoint(a.write_ref)
    model.tok_embd.weight[1] = model.tok_embd.weight[a.bos_like]
    text = kjv_text()
    _, held = split(encode(text))
    toks = [1, SPACE_ID] + [int(t) for t in held[:2046]]
    lo = model(torch.tensor([toks]))[0]
    pos = [0, 1, 255, 511, 1023, 1535, 2046, 2047]
    seq = {"task": "kjv-heldout", "tokens": toks, "check_pos": pos,
           "argmax": [int(lo[p].argmax()) for p in pos],
           "logits": [[round(float(v), 5) for v in lo[p]] for p in pos]}
    nll = F.cross_entropy(lo[1023:2047], torch.tensor(toks[1024:2048])).item()
    nxmodel.write_json(a.out, {"length": len(toks), "checkpoint_step": st["step"],
                               "bos_like": a.bos_like, "ppl_1024_2047": math.exp(nll),
                               "sequences": [seq]})
    print("torch ppl of tokens 1024-2047: %.5f" % math.exp(nll), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--stages", default=None, help="L:B:steps,... (default: STAGES)")
    ap.add_argument("--stop-step", type=int, default=0,
                    help="stop after this step (checkpoint kept; --resume continues, possibly "
                    "with other --stages: the schedule is read at every step)")
    ap.add_argument("--eval-ctx", default=None, metavar="CKPT",
                    help="only evaluate CKPT: held-out nll by context length (JSON to --out)")
    ap.add_argument("--eval-windows", type=int, default=8)
    ap.add_argument("--write-heldout", default=None, metavar="FILE",
                    help="only write the held-out text (the last 5%% of the bytes) to FILE")
    ap.add_argument("--write-ref", default=None, metavar="CKPT",
                    help="only write torch's logits on the first held-out stream as the engine "
                    "builds it (JSON to --out; tests/test_import.c)")
    ap.add_argument("--bos-like", type=int, default=13,
                    help="--write-ref: BOS gets this token's embedding (as build_gguf.py)")
    a = ap.parse_args()
    global STAGES
    if a.stages:
        STAGES = [tuple(int(v) for v in st.split(":")) for st in a.stages.split(",")]
    torch.set_num_threads(a.threads)
    if a.write_heldout:
        text = kjv_text()
        with open(a.write_heldout, "wb") as f:
            f.write(text[int(len(text) * 0.95):])
        return None
    if a.eval_ctx:
        return eval_ctx(a)
    if a.write_ref:
        return write_ref(a)
    torch.manual_seed(a.seed)
    text = kjv_text()
    print("text bytes", len(text), "sha256", hashlib.sha256(text).hexdigest(), flush=True)
    train, held = split(encode(text))
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
    t0 = time.time()
    acc = n_acc = 0.0
    stop = a.stop_step if a.stop_step > 0 else total
    while step < min(total, stop):
        L, B = stage_at(step)
        rng = np.random.default_rng([a.seed, step])
        starts = rng.integers(0, len(train) - L - 1, size=B)
        x = torch.from_numpy(np.stack([train[s:s + L + 1] for s in starts]))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, a.lr)
        lo = model(x[:, :-1])
        loss = F.cross_entropy(lo.reshape(-1, cfg.n_vocab), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        acc += loss.item()
        n_acc += 1
        if step % 25 == 0 or step == total:
            row = {"step": step, "ctx": L, "train_loss": acc / n_acc,
                   "wall_s": round(time.time() - t0, 1)}
            if step % 100 == 0 or step == total:
                row["heldout_loss_256"] = heldout_loss(model, held, 256, 16)
            rows.append(row)
            print(json.dumps(row), flush=True)
            acc = n_acc = 0.0
        if step % a.ckpt_every == 0 or step == total or step == stop:
            tmp = ck + ".tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                        "log": rows, "config": cfg.as_dict()}, tmp)
            os.replace(tmp, ck)
    if step < total:
        print("stopped at step", step, flush=True)
        return None
    nxmodel.write_json(a.out + ".curve.json",
                       {"config": cfg.as_dict(), "stages": STAGES, "seed": a.seed, "lr": a.lr,
                        "text_sha256": hashlib.sha256(text).hexdigest(), "rows": rows}, indent=1)
    print("done", flush=True)


if __name__ == "__main__":
    main()
