#!/usr/bin/env python3
"""evaluate.py - held-out accuracy of the retrieval model, in torch and in the engine.

DESIGN
- Held-out instances come from tasks.make_seq with rng seeds [EVAL_TAG, length, index], a seed
  space training never uses (training draws with [seed, step]).
- torch: accuracy per task and context length with a dense causal mask and with a local-only
  mask (attention sinks + the recent window: what a sink + recent cache can see). An instance
  (one query) is correct iff every answer token is the top-1 under teacher forcing.
- engine: writes the same sequences to `nexus logits --tokens` and compares the engine's
  argmax at every answer position (and its logits at all positions) with torch's.
Output: a JSON report (--json) and a table on stdout.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nxmodel  # noqa: E402
import tasks  # noqa: E402

EVAL_TAG = 977


def load(ckpt, cfg_dict=None):
    return nxmodel.load_checkpoint(ckpt, cfg_dict)[0]


def instances(L, task, n):
    out = []
    for i in range(n):
        rng = np.random.default_rng([EVAL_TAG, L, tasks.TASKS.index(task), i])
        out.append(tasks.make_seq(rng, L, task))
    return out


def score(logits, seq, spans):
    """Per query: all answer tokens top-1 (logits row p-1 predicts token p)."""
    am = logits.argmax(-1)
    return [all(int(am[p - 1]) == int(seq[p]) for p in span) for span in spans]


@torch.no_grad()
def torch_acc(model, L, task, n, sink=None, window=None):
    batch = max(1, 4096 // L)  # bounds the (batch, heads, L, L) attention tensor
    mask = nxmodel.causal_mask(L, sink, window)
    ok = []
    inst = instances(L, task, n)
    for b in range(0, n, batch):
        chunk = inst[b:b + batch]
        x = torch.from_numpy(np.stack([c[0] for c in chunk]))
        lo = model(x, mask=mask)
        for j, (seq, _, spans) in enumerate(chunk):
            ok += score(lo[j], seq, spans)
    return float(np.mean(ok)), len(ok)


def nexus_logits(nexus, gguf, seq, extra=()):
    cmd = [nexus, "logits", "-m", gguf, "-t", "1", "--top", "1", "--kv-type", "f32",
           "--tokens", ",".join(str(int(t)) for t in seq)] + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    am, top = [], []
    for line in r.stdout.splitlines():
        f = dict(kv.split("=", 1) for kv in line.split())
        am.append(int(f["argmax"]))
        top.append(float(f["top1"].split(":")[1]))
    return np.array(am), np.array(top)


@torch.no_grad()
def engine_check(model, nexus, gguf, L, n):
    """Answer agreement and max |logit| difference of the top-1 logit, engine vs torch."""
    agree = tot = 0
    ok_engine = []
    max_diff = 0.0
    for task in tasks.TASKS:
        for seq, _, spans in instances(L, task, n):
            lo = model(torch.from_numpy(seq)[None])[0]
            am_e, top_e = nexus_logits(nexus, gguf, seq)
            am_t = lo.argmax(-1).numpy()
            top_t = lo.gather(1, torch.from_numpy(am_e)[:, None])[:, 0].numpy()
            max_diff = max(max_diff, float(np.abs(top_t - top_e).max()))
            for span in spans:
                for p in span:
                    agree += int(am_e[p - 1] == am_t[p - 1])
                    tot += 1
                ok_engine.append(all(int(am_e[p - 1]) == int(seq[p]) for p in span))
    return {"answer_tokens": tot, "argmax_agree": agree, "max_abs_logit_diff": max_diff,
            "engine_acc": float(np.mean(ok_engine)), "engine_instances": len(ok_engine)}


def write_tasks(path, L, n):
    """JSON lines for `nexus task-eval`: the prompt ends where the query region starts."""
    with open(path + ".tmp", "w") as f:
        for task in tasks.TASKS:
            for seq, _, spans in instances(L, task, n):
                f.write(json.dumps({"task": task, "tokens": [int(t) for t in seq],
                                    "prompt_len": int(spans[0][0] - 2),
                                    "answers": [[int(p) for p in sp] for sp in spans]}) + "\n")
    os.replace(path + ".tmp", path)


@torch.no_grad()
def write_ref(model, path, L, n):
    """torch's answers and logits on n instances per task at length L: the oracle the C test
    (tests/test_import.c) holds the engine to."""
    seqs = []
    for task in tasks.TASKS:
        for seq, _, spans in instances(L, task, n):
            lo = model(torch.from_numpy(seq)[None])[0]
            pos = [p - 1 for sp in spans for p in sp]
            seqs.append({"task": task, "tokens": [int(t) for t in seq],
                         "check_pos": pos,
                         "argmax": [int(lo[p].argmax()) for p in pos],
                         "logits": [[round(float(v), 5) for v in lo[p]] for p in pos]})
    nxmodel.write_json(path, {"length": L, "sequences": seqs})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--curve", default=None, help="curve JSON with the config (default: the "
                    "checkpoint's)")
    ap.add_argument("--lengths", default="512,1024,2048,4096")
    ap.add_argument("--n", type=int, default=64, help="sequences per task and length")
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--sink", type=int, default=4)
    ap.add_argument("--nexus", default=None, help="path of the nexus binary (engine check)")
    ap.add_argument("--gguf", default=None)
    ap.add_argument("--engine-len", type=int, default=1024)
    ap.add_argument("--engine-n", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--write-tasks", default=None, metavar="FILE",
                    help="only write held-out instances at --lengths (first) for task-eval")
    ap.add_argument("--write-ref", default=None, metavar="FILE",
                    help="only write torch reference logits at --lengths (first) for the C test")
    a = ap.parse_args()
    if a.write_ref:
        torch.set_num_threads(a.threads)
        model = load(a.ckpt, json.load(open(a.curve))["config"] if a.curve else None)
        write_ref(model, a.write_ref, int(a.lengths.split(",")[0]), a.n)
        return
    if a.write_tasks:
        write_tasks(a.write_tasks, int(a.lengths.split(",")[0]), a.n)
        return
    torch.set_num_threads(a.threads)
    model = load(a.ckpt, json.load(open(a.curve))["config"] if a.curve else None)
    rep = {"window": a.window, "sink": a.sink, "n_per_cell": a.n, "dense": {}, "local": {}}
    for L in [int(s) for s in a.lengths.split(",")]:
        for task in tasks.TASKS:
            d, nd = torch_acc(model, L, task, a.n)
            lo, _ = torch_acc(model, L, task, a.n, a.sink, a.window)
            rep["dense"]["%s@%d" % (task, L)] = d
            rep["local"]["%s@%d" % (task, L)] = lo
            print("L=%5d %-6s dense %.3f  local(sink %d + recent %d) %.3f  (%d queries)"
                  % (L, task, d, a.sink, a.window, lo, nd), flush=True)
    if a.nexus and a.gguf:
        rep["engine"] = engine_check(model, a.nexus, a.gguf, a.engine_len, a.engine_n)
        rep["engine"]["length"] = a.engine_len
        print("engine:", json.dumps(rep["engine"]), flush=True)
    if a.json:
        nxmodel.write_json(a.json, rep, indent=1)


if __name__ == "__main__":
    main()
