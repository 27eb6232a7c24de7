#!/usr/bin/env python3
"""serve_bench.py - load benchmark of an OpenAI-compatible server on loopback: `nexus serve`
against llama.cpp's `llama-server`, same model file, threads and slots, runs interleaved.

Two workloads, both through POST /v1/completions with "stream": true (the same path on both
servers, so chat templates play no part):
  throughput  C concurrent clients (--clients 1,4,8), each sending --requests prompts of about
              --prompt-words words and asking for --gen tokens; reports aggregate generated
              tokens/s over the wall time, and TTFT (request sent -> first streamed text)
              p50 / p99.
  agent       --sessions conversations of --turns turns; each turn appends a tool result of
              about --tool-words words and asks for --agent-gen tokens, so late turns carry
              8K+ tokens of context; reports TTFT per turn and the server's KV bytes per
              session where it tells (nexus: /metrics).
Servers are started by this script (--nexus BIN and/or --llama-server BIN), one at a time, each
with a fresh process; with --rounds R the two alternate R times and the figures are per round.
Bounded: every request has a timeout, and the run stops after --max-seconds. Only 127.0.0.1.
"""
import argparse
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

WORDS = ("time little girl dog sun park ball tree house friend happy big red blue run jump "
         "play find look said went came saw liked wanted could would mother father boy day "
         "night water food bird cat fish box car road town river hill garden flower door").split()


def text_of(rng, n_words):
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def stream_completion(port, prompt, n_gen, extra, timeout=600):
    """Returns (ttft_s, total_s, n_tokens) for one streamed completion."""
    body = {"prompt": prompt, "max_tokens": n_gen, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    body.update(extra)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.time()
    c.request("POST", "/v1/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
    ttft, n_chunks, usage = None, 0, None
    for raw in r:
        line = raw.decode(errors="replace").strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        j = json.loads(data)
        if j.get("error"):
            raise RuntimeError(f"stream error: {j['error'].get('message')}")
        if j.get("usage"):
            usage = j["usage"]
        for ch in j.get("choices", []):
            if ch.get("text"):
                n_chunks += 1
                if ttft is None:
                    ttft = time.time() - t0
    total = time.time() - t0
    c.close()
    n = usage["completion_tokens"] if usage else n_chunks
    return (ttft if ttft is not None else total), total, n


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def kv_bytes_per_slot(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/metrics")
        body = c.getresponse().read().decode()
        c.close()
    except OSError:
        return None
    vals = [float(m.group(1)) for m in re.finditer(r'^nexus_kv_bytes\{slot="\d+"\} (\S+)$', body,
                                                    re.M)]
    return vals or None


def start_server(kind, a):
    port = a.port
    if kind == "nexus":
        cmd = [a.nexus, "serve", "-m", a.model, "--port", str(port), "-np", str(a.slots),
               "-c", str(a.ctx), "-t", str(a.threads), "--max-tokens", str(a.ctx)]
        cmd += a.nexus_args.split() if a.nexus_args else []
    else:
        cmd = [a.llama_server, "-m", a.model, "--port", str(port), "--host", "127.0.0.1",
               "-np", str(a.slots), "-c", str(a.ctx * a.slots), "-t", str(a.threads),
               "-tb", str(a.threads), "--no-webui"]
        cmd += a.llama_args.split() if a.llama_args else []
    log = open(f"{a.out}/{kind}.log", "a")
    p = subprocess.Popen(cmd, stdout=log, stderr=log)
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return p
        except OSError:
            pass
        if p.poll() is not None:
            raise RuntimeError(f"{kind} exited: see {a.out}/{kind}.log")
        time.sleep(0.3)
    p.kill()
    raise RuntimeError(f"{kind} did not become healthy")


def throughput(kind, a, clients):
    rng = random.Random(a.seed)
    prompts = [text_of(rng, a.prompt_words) for _ in range(clients * a.requests)]
    res, errs = [], []
    lock = threading.Lock()

    def worker(i):
        for k in range(a.requests):
            try:
                r = stream_completion(a.port, prompts[i * a.requests + k], a.gen,
                                      {"ignore_eos": True} if kind == "llama" else {})
                with lock:
                    res.append(r)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                with lock:
                    errs.append(repr(e))

    t0 = time.time()
    th = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.time() - t0
    toks = sum(r[2] for r in res)
    return {"server": kind, "clients": clients, "requests": len(res), "errors": errs[:5],
            "tokens": toks, "wall_s": wall, "agg_tps": toks / wall if wall > 0 else 0,
            "ttft_p50": pct([r[0] for r in res], 50), "ttft_p99": pct([r[0] for r in res], 99)}


def agent(kind, a):
    rng = random.Random(a.seed + 1)
    system = "You are an agent. Tools return results; answer briefly.\n" + text_of(rng, 200)
    turns = [[] for _ in range(a.sessions)]
    errs = []

    def session(s):
        convo = system
        for t in range(a.turns):
            convo += f"\nTool result {t}: " + text_of(rng, a.tool_words) + "\nQuestion: what next?\n"
            extra = {"ignore_eos": True} if kind == "llama" else {}
            if kind == "nexus" and a.nexus_session:
                extra["session"] = f"bench-{s}"
            try:
                ttft, total, n = stream_completion(a.port, convo, a.agent_gen, extra)
                turns[s].append(ttft)
            except Exception as e:  # noqa: BLE001
                errs.append(repr(e))
                return
            convo += " answer" * 4

    th = [threading.Thread(target=session, args=(s,)) for s in range(a.sessions)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    per_turn = [statistics.median(x[t] for x in turns if len(x) > t)
                for t in range(min((len(x) for x in turns), default=0))]
    kv = kv_bytes_per_slot(a.port) if kind == "nexus" else None
    return {"server": kind, "ttft_per_turn": per_turn, "errors": errs[:5],
            "late_ttft": statistics.median(per_turn[-max(1, len(per_turn) // 4):])
            if per_turn else float("nan"), "kv_bytes_per_slot": kv}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--nexus", default="build/nexus")
    ap.add_argument("--llama-server", default=None)
    ap.add_argument("--nexus-args", default="")
    ap.add_argument("--llama-args", default="")
    ap.add_argument("--nexus-session", action="store_true",
                    help="bind each agent conversation to a nexus session")
    ap.add_argument("--port", type=int, default=18950)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=2048, help="context per slot")
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--prompt-words", type=int, default=200)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--sessions", type=int, default=0)
    ap.add_argument("--turns", type=int, default=16)
    ap.add_argument("--tool-words", type=int, default=400)
    ap.add_argument("--agent-gen", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="bench/results/serve")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    kinds = ["nexus"] + (["llama"] if a.llama_server else [])
    results = []
    for rnd in range(a.rounds):
        for kind in (kinds if rnd % 2 == 0 else kinds[::-1]):
            p = start_server(kind, a)
            try:
                for c in [int(x) for x in a.clients.split(",") if x]:
                    r = throughput(kind, a, c)
                    r["round"] = rnd
                    results.append(r)
                    print(f"round {rnd} {kind:5s} clients {c}: {r['agg_tps']:.1f} tok/s, "
                          f"TTFT p50 {r['ttft_p50'] * 1e3:.0f} ms p99 {r['ttft_p99'] * 1e3:.0f} ms"
                          f"{'  ERRORS ' + str(r['errors']) if r['errors'] else ''}", flush=True)
                if a.sessions:
                    r = agent(kind, a)
                    r["round"] = rnd
                    results.append(r)
                    print(f"round {rnd} {kind:5s} agent: late-turn TTFT {r['late_ttft'] * 1e3:.0f}"
                          f" ms; per turn " + " ".join(f"{x * 1e3:.0f}" for x in
                                                       r["ttft_per_turn"]) +
                          (f"; KV per slot {r['kv_bytes_per_slot']}" if r["kv_bytes_per_slot"]
                           else "") + (f"  ERRORS {r['errors']}" if r["errors"] else ""),
                          flush=True)
            finally:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
    path = os.path.join(a.out, "serve_bench.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"args": vars(a), "results": results}, f, indent=1)
    os.replace(path + ".tmp", path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
