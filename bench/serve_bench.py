#!/usr/bin/env python3
"""serve_bench.py - load benchmark of an OpenAI-compatible server on loopback: `nexus serve`
against llama.cpp's `llama-server`, same model file, threads and slots, runs interleaved.

Two workloads, both through POST /v1/completions with "stream": true (the same path on both
servers, so chat templates play no part):
  throughput  C concurrent clients (--clients 1,4,8), each sending --requests prompts of about
              --prompt-words words and asking for --gen tokens; reports aggregate generated
              tokens/s over the wall time, and TTFT (request sent -> first streamed text)
              p50 / p99. Every prompt is new to the server (prompts are drawn per client
              count and round), so no prompt cache helps either side.
  agent       --sessions conversations of --turns turns, all at once; each turn appends a
              tool result of about --tool-words words and the server's own previous answer,
              and asks for --agent-gen tokens, so late turns carry 8K+ tokens of context;
              reports TTFT per turn (median over sessions), late-turn TTFT (the last quarter),
              the KV bytes one session holds (nexus: its /metrics gauges of the largest
              session; llama-server: F16 bytes per token x the conversation's tokens, since a
              slot keeps every token), and the share of answers equal to the reference
              server's (--reference, the first --server by default), so the answers of a
              session under eviction are reported next to the dense ones (each server goes
              on with its own answers, as an agent would, so after a first differing answer
              the conversations differ too).
Servers (--server NAME=KIND:ARGS, repeatable; KIND nexus or llama) are started by this script
one at a time, each a fresh process; with --rounds R they rotate R times, alternating the
order, and the table gives medians over rounds. Bounded: every request has a timeout, and no
new server is started after --max-seconds. Only 127.0.0.1. llama-server is run with
LD_LIBRARY_PATH=--llama-lib (or $LLAMA_LIB). Writes OUT/serve_bench.json and OUT/serve_bench.md.
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


def stream_completion(port, prompt, n_gen, extra, timeout=600, detail=False):
    """Returns (ttft_s, total_s, n_tokens) for one streamed completion; with detail, also the
    text and the usage object."""
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
    ttft, n_chunks, usage, text = None, 0, None, []
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
                text.append(ch["text"])
                if ttft is None:
                    ttft = time.time() - t0
    total = time.time() - t0
    c.close()
    n = usage["completion_tokens"] if usage else n_chunks
    if detail:
        return (ttft if ttft is not None else total), total, n, "".join(text), usage
    return (ttft if ttft is not None else total), total, n


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def metric(port, name):
    """A gauge of nexus serve's /metrics (None when absent or unreachable)."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/metrics")
        body = c.getresponse().read().decode()
        c.close()
    except OSError:
        return None
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


def kv_bytes_per_cell(out_dir):
    """F16 KV bytes per token of one sequence (what llama-server's default cache holds):
    2 (K and V) x layers x KV heads x head dim x 2 bytes, the shape read from the start-up
    line of a nexus serve log in out_dir ('model llama 8L 512d 8h/2kv hd64 ...')."""
    for fn in sorted(os.listdir(out_dir)):
        if not fn.endswith(".log"):
            continue
        m = re.search(r"model \S+ (\d+)L \d+d \d+h/(\d+)kv hd(\d+)",
                      open(os.path.join(out_dir, fn), errors="replace").read())
        if m:
            return 2 * int(m.group(1)) * int(m.group(2)) * int(m.group(3)) * 2
    return None


def start_server(name, kind, args, a):
    port = a.port
    env = dict(os.environ)
    if kind == "nexus":
        cmd = [a.nexus, "serve", "-m", a.model, "--port", str(port), "-np", str(a.slots),
               "-c", str(a.ctx), "-t", str(a.threads), "--max-tokens", str(a.ctx)]
    else:
        cmd = [a.llama_server, "-m", a.model, "--port", str(port), "--host", "127.0.0.1",
               "-np", str(a.slots), "-c", str(a.ctx * a.slots), "-t", str(a.threads),
               "-tb", str(a.threads), "--no-webui"]
        if a.llama_lib:
            env["LD_LIBRARY_PATH"] = a.llama_lib
    cmd += args.split() if args else []
    log_path = f"{a.out}/{name}.log"
    log = open(log_path, "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=log, env=env)
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return p, log_path
        except OSError:
            pass
        if p.poll() is not None:
            raise RuntimeError(f"{name} exited: see {log_path}")
        time.sleep(0.3)
    p.kill()
    raise RuntimeError(f"{name} did not become healthy")


def throughput(kind, a, clients, rnd):
    # New prompts for every (clients, round): a server started for a round serves every
    # client count in turn, and repeating the earlier counts' prompts would let its prompt
    # cache answer them (llama-server keeps each slot's last prompt). Every server of a round
    # gets the same prompts.
    rng = random.Random(a.seed * 1000003 + clients * 1009 + rnd)
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


def agent(name, kind, a):
    """The agent workload: --sessions conversations of --turns turns, all at once."""
    rng = random.Random(a.seed + 1)
    system = "You are an agent. Tools return results; answer briefly.\n" + text_of(rng, 200)
    results = [[] for _ in range(a.sessions)]  # per session: (ttft, answer, prompt_tokens)
    errs = []
    tool_texts = [[text_of(rng, a.tool_words) for _ in range(a.turns)] for _ in range(a.sessions)]

    def session(s):
        convo = system
        for t in range(a.turns):
            convo += f"\nTool result {t}: " + tool_texts[s][t] + "\nQuestion: what next?\n"
            extra = {"ignore_eos": True} if kind == "llama" else {}
            if kind == "nexus" and a.nexus_session:
                extra["session"] = f"bench-{s}"
            try:
                ttft, total, n, text, usage = stream_completion(a.port, convo, a.agent_gen,
                                                                extra, detail=True)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                errs.append(f"session {s} turn {t}: {e!r}")
                return
            results[s].append((ttft, text, (usage or {}).get("prompt_tokens", 0) + n))
            # the conversation goes on with the server's own answer, as an agent's would
            convo += text

    th = [threading.Thread(target=session, args=(s,)) for s in range(a.sessions)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    n_turns = min((len(x) for x in results), default=0)
    per_turn = [statistics.median(x[t][0] for x in results) for t in range(n_turns)]
    late = per_turn[-max(1, n_turns // 4):]
    tokens = max((x[-1][2] for x in results if x), default=0)
    if kind == "nexus":
        kv_now = metric(a.port, "nexus_session_kv_bytes_max")
        kv_peak = metric(a.port, "nexus_session_kv_peak_bytes_max")
        compactions = metric(a.port, "nexus_kv_compactions_total")
    else:
        compactions = None
        cell = kv_bytes_per_cell(a.out)
        # a slot holds every token of its conversation: bytes per cell x tokens
        kv_now = kv_peak = cell * tokens if cell else None
    return {"server": name, "kind": kind, "workload": "agent", "ttft_per_turn": per_turn,
            "errors": errs[:5], "late_ttft": statistics.median(late) if late else float("nan"),
            "conversation_tokens": tokens, "kv_bytes_session": kv_now,
            "kv_bytes_session_peak": kv_peak, "compactions": compactions,
            "answers": [[r[1] for r in x] for x in results]}


def parse_servers(a):
    """--server NAME=KIND:ARGS entries (kind nexus or llama), plus the defaults."""
    out = []
    for spec in a.server:
        name, rest = spec.split("=", 1)
        kind, _, args = rest.partition(":")
        if kind not in ("nexus", "llama"):
            raise SystemExit(f"--server {spec}: kind must be nexus or llama")
        out.append((name, kind, args))
    if not out:
        out.append(("nexus", "nexus", a.nexus_args))
        if a.llama_server:
            out.append(("llama", "llama", a.llama_args))
    return out


def agreement(answers, ref):
    """Share of (session, turn) answers equal to the reference run's, and their count."""
    pairs = [(x, y) for sa, sr in zip(answers, ref) for x, y in zip(sa, sr)]
    return (sum(x == y for x, y in pairs) / len(pairs) if pairs else float("nan")), len(pairs)


def write_table(path, results, servers):
    rows = ["| server | workload | clients | agg tok/s | TTFT p50 ms | TTFT p99 ms | errors |",
            "|---|---|---:|---:|---:|---:|---:|"]
    for name, _, _ in servers:
        for c in sorted({r["clients"] for r in results if r.get("clients")}):
            rs = [r for r in results if r["server"] == name and r.get("clients") == c]
            if not rs:
                continue
            rows.append(f"| {name} | throughput | {c} | "
                        f"{statistics.median(r['agg_tps'] for r in rs):.1f} | "
                        f"{statistics.median(r['ttft_p50'] for r in rs) * 1e3:.0f} | "
                        f"{statistics.median(r['ttft_p99'] for r in rs) * 1e3:.0f} | "
                        f"{sum(len(r['errors']) for r in rs)} |")
    rows += ["", "| server | late-turn TTFT ms | conversation tokens | KV per session MiB "
                 "(peak) | answers equal to the reference | errors |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, _, _ in servers:
        rs = [r for r in results if r["server"] == name and r.get("workload") == "agent"]
        if not rs:
            continue
        kv = [r["kv_bytes_session_peak"] for r in rs if r["kv_bytes_session_peak"]]
        agr = [r["agreement"] for r in rs if r.get("agreement") is not None]
        rows.append(f"| {name} | {statistics.median(r['late_ttft'] for r in rs) * 1e3:.0f} | "
                    f"{max(r['conversation_tokens'] for r in rs)} | "
                    + (f"{statistics.median(kv) / 1048576:.1f}" if kv else "n/a") + " | "
                    + (f"{statistics.median(agr):.2f}" if agr else "reference") + " | "
                    f"{sum(len(r['errors']) for r in rs)} |")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(rows) + "\n")
    os.replace(path + ".tmp", path)
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--nexus", default="build/nexus")
    ap.add_argument("--llama-server", default=None)
    ap.add_argument("--nexus-args", default="")
    ap.add_argument("--llama-args", default="")
    ap.add_argument("--server", action="append", default=[],
                    help="NAME=KIND:ARGS (KIND nexus or llama); repeatable; replaces the default "
                         "pair (nexus with --nexus-args, llama with --llama-args)")
    ap.add_argument("--reference", default=None,
                    help="the server whose agent answers the others are compared with (first)")
    ap.add_argument("--llama-lib", default=os.environ.get("LLAMA_LIB"),
                    help="LD_LIBRARY_PATH for llama-server (default: $LLAMA_LIB)")
    ap.add_argument("--max-seconds", type=float, default=3600,
                    help="start no new server after this many seconds")
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
    servers = parse_servers(a)
    results = []
    t_start = time.time()
    for rnd in range(a.rounds):
        for name, kind, args in (servers if rnd % 2 == 0 else servers[::-1]):
            if time.time() - t_start > a.max_seconds:
                print(f"stopping: --max-seconds {a.max_seconds} reached", flush=True)
                break
            p, _ = start_server(name, kind, args, a)
            try:
                for c in [int(x) for x in a.clients.split(",") if x]:
                    r = throughput(kind, a, c, rnd)
                    r["server"], r["kind"], r["round"] = name, kind, rnd
                    results.append(r)
                    print(f"round {rnd} {name:12s} clients {c}: {r['agg_tps']:.1f} tok/s, "
                          f"TTFT p50 {r['ttft_p50'] * 1e3:.0f} ms p99 {r['ttft_p99'] * 1e3:.0f} ms"
                          f"{'  ERRORS ' + str(r['errors']) if r['errors'] else ''}", flush=True)
                if a.sessions:
                    r = agent(name, kind, a)
                    r["round"] = rnd
                    results.append(r)
                    kv = r["kv_bytes_session_peak"]
                    print(f"round {rnd} {name:12s} agent: late-turn TTFT {r['late_ttft'] * 1e3:.0f}"
                          f" ms, {r['conversation_tokens']} tokens, KV per session "
                          + (f"{kv / 1048576:.1f} MiB" if kv else "n/a") + "; per turn "
                          + " ".join(f"{x * 1e3:.0f}" for x in r["ttft_per_turn"])
                          + (f"  ERRORS {r['errors']}" if r["errors"] else ""), flush=True)
            finally:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
    ref = a.reference or servers[0][0]
    for r in results:
        if r.get("workload") != "agent":
            continue
        refs = [x for x in results if x.get("workload") == "agent" and x["server"] == ref
                and x["round"] == r["round"]]
        if r["server"] != ref and refs:
            r["agreement"], r["agreement_n"] = agreement(r["answers"], refs[0]["answers"])
    print(write_table(os.path.join(a.out, "serve_bench.md"), results, servers))
    path = os.path.join(a.out, "serve_bench.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"args": vars(a), "results": results}, f, indent=1)
    os.replace(path + ".tmp", path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
