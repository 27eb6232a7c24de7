#!/usr/bin/env python3
"""soak_serve.py - a bounded soak test of `nexus serve` on loopback (issue 14, part 4).

Starts `nexus serve` (or uses --url), then runs --clients concurrent clients for --duration
seconds (and at most --max-requests requests in all). Each client loops over a random mix of:
  - a seeded chat or completion request whose output must equal the first answer ever seen for
    the same (prompt, seed): determinism under load;
  - a streamed request the client abandons after a few chunks (a disconnect mid-stream);
  - a malformed or hostile request (bad JSON, wrong types, huge body, deep nesting, unknown path,
    wrong method, bad auth) that must get its exact 4xx status and an OpenAI error body;
  - a turn of one of --sessions conversations bound to a server session (the KV stays with it);
  - with --mcp CONFIG (server-side tools): a request whose named tool the server must call,
    either "echo" (server-everything) or "explode" (tests/server/crashing_mcp.py, a server that
    dies in the middle of every call); explode must come back as a tool error, echo as a result
    unless its server was just killed: every --kill-every seconds the soak SIGKILLs the server's
    mcp-server-everything process, mid-call or not, and the next call must start it again.
Every 5 s it samples /metrics (resident memory, busy slots, queue). At the end it checks: no
connection errors on well-formed requests, every status as expected, every seeded answer stable,
slots idle and queue empty, the KV pool holding exactly what the slots and sessions hold (no
leaked block), and resident memory flat after warm-up (the max of the second half within
--rss-slack of the max of the first half). Prints a table; --json writes the figures.
Only 127.0.0.1 is ever contacted.
"""
import argparse
import http.client
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time

PROMPTS = ["Once upon a time", "The little dog", "Tom and Lily went to the park",
           "One day, a big bird", "The sun was hot and"]


def request(port, method, path, body=None, headers=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    out = r.read()
    c.close()
    return r.status, out


def metrics(port, key):
    st, body = request(port, "GET", "/metrics", headers={"Authorization": "Bearer " + key})
    vals = {}
    for line in body.decode().splitlines():
        m = re.match(r"^(nexus_[a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if m and not m.group(2):
            vals[m.group(1)] = float(m.group(3))
        elif m and m.group(1) == "nexus_kv_bytes":
            vals["slot_kv_sum"] = vals.get("slot_kv_sum", 0) + float(m.group(3))
    return vals


class Soak:
    def __init__(self, a):
        self.a = a
        self.lock = threading.Lock()
        self.answers = {}
        self.counts = {}
        self.failures = []
        self.n_requests = 0
        self.stop_at = time.time() + a.duration
        self.auth = {"Authorization": "Bearer " + a.api_key}
        self.kills = []
        self.latency = {}

    def count(self, kind, ok, detail=""):
        with self.lock:
            c = self.counts.setdefault(kind, [0, 0])
            c[0 if ok else 1] += 1
            if not ok and len(self.failures) < 50:
                self.failures.append(f"{kind}: {detail}")

    def take(self):
        with self.lock:
            if time.time() > self.stop_at or self.n_requests >= self.a.max_requests:
                return False
            self.n_requests += 1
            return True

    def seeded(self, rng):
        prompt, seed = rng.choice(PROMPTS), rng.randrange(4)
        chat = rng.random() < 0.5
        if chat:
            body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 24,
                    "seed": seed, "temperature": 1.0}
            path = "/v1/chat/completions"
        else:
            body = {"prompt": prompt, "max_tokens": 24, "seed": seed, "temperature": 1.0}
            path = "/v1/completions"
        st, out = request(self.a.port, "POST", path, body, self.auth)
        if st != 200:
            self.count("seeded", False, f"status {st}: {out[:200]!r}")
            return
        ch = json.loads(out)["choices"][0]
        text = ch["message"]["content"] if chat else ch["text"]
        key = (path, prompt, seed)
        with self.lock:
            first = self.answers.setdefault(key, text)
        self.count("seeded", first == text, f"{key}: {first!r} != {text!r}")

    def session_turn(self, rng, idx):
        sid = f"soak-{(idx * 7 + rng.randrange(4)) % self.a.sessions}"
        body = {"messages": [{"role": "user", "content": rng.choice(PROMPTS)}], "max_tokens": 8,
                "temperature": 0, "session": sid}
        st, out = request(self.a.port, "POST", "/v1/chat/completions", body, self.auth)
        # 429: every resident session busy / too many sessions; both are the documented answer
        self.count("session", st in (200, 429), f"{sid}: status {st}: {out[:160]!r}")

    def tool(self, rng):
        name = rng.choice(["echo", "explode"])
        body = {"messages": [{"role": "user", "content": f"{name} this"}], "max_tokens": 48,
                "temperature": 0,
                "tool_choice": {"type": "function", "function": {"name": name}}}
        t0 = time.time()
        st, out = request(self.a.port, "POST", "/v1/chat/completions", body, self.auth,
                          timeout=120)
        if st != 200:
            self.count(f"tool-{name}", False, f"status {st}: {out[:200]!r}")
            return
        steps = json.loads(out).get("nexus", {}).get("tool_steps", [])
        if not steps or steps[0]["name"] != name:
            self.count(f"tool-{name}", False, f"steps {steps!r:.200}")
        elif name == "explode":
            self.count("tool-explode", steps[0]["is_error"], f"{steps[0]!r:.200}")
        elif steps[0]["is_error"]:
            with self.lock:
                # a SIGKILLed process may take seconds to exit on a loaded machine: a kill up to
                # 5 s before the request is its cause
                killed = any(t0 - 5 <= k <= time.time() for k in self.kills)
            self.count("tool-echo-killed", killed, f"echo failed with no kill: {steps[0]!r:.200}")
        else:
            self.count("tool-echo", True)

    def killer(self, srv_pid):
        """SIGKILL the server's mcp-server-everything every --kill-every seconds."""
        while time.time() < self.stop_at:
            time.sleep(self.a.kill_every)
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    stat = open(f"/proc/{pid}/stat").read()
                    ppid = int(stat.rsplit(")", 1)[1].split()[1])
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read()
                except (OSError, ValueError, IndexError):
                    continue
                if ppid == srv_pid and b"mcp-server-everything" in cmd:
                    try:
                        os.kill(int(pid), 9)
                        with self.lock:
                            self.kills.append(time.time())
                    except OSError:
                        pass

    def disconnect(self, rng):
        s = socket.create_connection(("127.0.0.1", self.a.port), timeout=30)
        body = json.dumps({"prompt": rng.choice(PROMPTS), "max_tokens": 300, "stream": True,
                           "temperature": 1.0}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Authorization: Bearer " + self.a.api_key.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: " +
                  str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        want = rng.randrange(1, 6)
        while got.count(b"data: ") < want:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        s.close()
        self.count("disconnect", got.startswith(b"HTTP/1.1 200"), got[:80])

    def hostile(self, rng):
        k = rng.randrange(8)
        port = self.a.port
        if k == 0:
            st, out = request(port, "POST", "/v1/completions", b"{not json", self.auth)
            want = 400
        elif k == 1:
            st, out = request(port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": "a"},
                              self.auth)
            want = 400
        elif k == 2:
            st, out = request(port, "POST", "/v1/completions",
                              b'{"prompt":"' + b"a" * (self.a.max_body + 10) + b'"}', self.auth)
            want = 413
        elif k == 3:
            st, out = request(port, "POST", "/v1/chat/completions",
                              b'{"messages":' + b"[" * 500 + b"]" * 500 + b"}", self.auth)
            want = 400
        elif k == 4:
            st, out = request(port, "GET", "/v1/../../etc/passwd", None, self.auth)
            want = 404
        elif k == 5:
            st, out = request(port, "DELETE", "/v1/completions", None, self.auth)
            want = 405
        elif k == 6:
            st, out = request(port, "GET", "/v1/models", None, {"Authorization": "Bearer nope"})
            want = 401
        else:
            st, out = request(port, "POST", "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": ["x"]}]}, self.auth)
            want = 400
        ok = st == want and b'"error"' in out
        self.count(f"hostile-{want}", ok, f"case {k}: {st} {out[:120]!r}")

    def client(self, idx):
        rng = random.Random(self.a.seed * 1000 + idx)
        while self.take():
            r = rng.random()
            if r < 0.5:
                kind, fn = "seeded", lambda: self.seeded(rng)
            elif r < 0.6:
                kind, fn = "disconnect", lambda: self.disconnect(rng)
            elif r < 0.7 and self.a.sessions:
                kind, fn = "session", lambda: self.session_turn(rng, idx)
            elif r < 0.75 and self.a.mcp:
                kind, fn = "tool", lambda: self.tool(rng)
            else:
                kind, fn = "hostile", lambda: self.hostile(rng)
            t0 = time.time()
            try:
                fn()
            except (OSError, http.client.HTTPException, ValueError) as e:
                self.count("transport", False, f"{kind} after {time.time() - t0:.1f} s: {e!r}")
            with self.lock:
                self.latency.setdefault(kind, []).append(time.time() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nexus", default="build/nexus")
    ap.add_argument("-m", "--model", default="../shared/models/stories260K/stories260K.gguf")
    ap.add_argument("--port", type=int, default=18931)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--max-requests", type=int, default=200000)
    ap.add_argument("--max-body", type=int, default=65536)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rss-slack", type=float, default=0.10)
    ap.add_argument("--api-key", default="soak-key")
    ap.add_argument("--sessions", type=int, default=64,
                    help="conversations bound to server sessions (0: none)")
    ap.add_argument("--mcp", help="MCP config for the server's --mcp (server-side tools); "
                    "'auto': server-everything from build-npm/ and tests/server/crashing_mcp.py")
    ap.add_argument("--kill-every", type=float, default=7,
                    help="seconds between SIGKILLs of the server's mcp-server-everything")
    ap.add_argument("--json")
    a = ap.parse_args()
    import tempfile
    a.session_dir = tempfile.mkdtemp(prefix="nexus-soak-sessions-") if a.sessions else None
    if a.mcp == "auto":
        a.mcp = os.path.join(tempfile.mkdtemp(prefix="nexus-soak-mcp-"), "mcp.json")
        here = os.getcwd()
        with open(a.mcp, "w") as f:
            json.dump({"mcpServers": {
                "everything": {"command": f"{here}/build-npm/node_modules/.bin/"
                                          "mcp-server-everything"},
                "crashing": {"command": "/usr/bin/python3",
                             "args": [f"{here}/tests/server/crashing_mcp.py"]}}}, f)
    srv = subprocess.Popen([a.nexus, "serve", "-m", a.model, "--port", str(a.port), "-np",
                            str(a.slots), "--queue", str(4 * a.clients), "-c", "512", "-t", str(a.threads),
                            "--api-key", a.api_key, "--max-body", str(a.max_body),
                            "--max-conns", str(4 * a.clients)]
                           + (["--sessions", str(max(1, a.slots // 2)), "--session-dir",
                               a.session_dir] if a.sessions else [])
                           + (["--mcp", a.mcp, "--mcp-steps", "1"] if a.mcp else []),
                           stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            try:
                if request(a.port, "GET", "/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        soak = Soak(a)
        threads = [threading.Thread(target=soak.client, args=(i,), daemon=True)
                   for i in range(a.clients)]
        t0 = time.time()
        for t in threads:
            t.start()
        if a.mcp:
            threading.Thread(target=soak.killer, args=(srv.pid,), daemon=True).start()
        samples = []
        while any(t.is_alive() for t in threads):
            time.sleep(min(5, max(0.2, a.duration / 20)))
            m = metrics(a.port, a.api_key)
            samples.append((time.time() - t0, m.get("nexus_process_resident_bytes", 0)))
            print(f"\r  {time.time() - t0:6.0f} s  {soak.n_requests} requests  "
                  f"RSS {samples[-1][1] / 2**20:.1f} MiB", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        for t in threads:
            t.join()
        time.sleep(0.5)
        end = metrics(a.port, a.api_key)
        alive = srv.poll() is None
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=20)
        except subprocess.TimeoutExpired:
            srv.kill()
    half = len(samples) // 2
    rss1 = max(s[1] for s in samples[:max(half, 1)])
    rss2 = max(s[1] for s in samples[half:]) if samples[half:] else rss1
    checks = {
        "server alive at the end": alive,
        "every request as expected": not soak.failures,
        "slots idle at the end": end.get("nexus_slots_busy", -1) == 0,
        "queue empty at the end": end.get("nexus_queue_length", -1) == 0,
        "KV pool holds what slots and sessions hold (no leaked block)":
            end.get("nexus_kv_pool_bytes_in_use", -1) ==
            end.get("slot_kv_sum", 0) + end.get("nexus_session_kv_bytes", 0),
        f"RSS flat after warm-up (+{a.rss_slack:.0%})": rss2 <= rss1 * (1 + a.rss_slack),
    }
    print(f"{'kind':<16} {'ok':>8} {'failed':>8}")
    for k, (ok, bad) in sorted(soak.counts.items()):
        print(f"{k:<16} {ok:>8} {bad:>8}")
    print(f"requests {soak.n_requests} in {time.time() - t0:.0f} s, {a.clients} clients; "
          f"RSS first half max {rss1 / 2**20:.1f} MiB, second half max {rss2 / 2**20:.1f} MiB; "
          f"tokens generated {end.get('nexus_generated_tokens_total', 0):.0f}; "
          f"MCP server kills {len(soak.kills)}")
    for k, v in sorted(soak.latency.items()):
        v = sorted(v)
        print(f"  latency {k:<10} p50 {v[len(v) // 2]:.2f} s  p99 {v[int(len(v) * 0.99)]:.2f} s  "
              f"max {v[-1]:.2f} s")
    for f in soak.failures[:10]:
        print("  FAIL", f)
    for k, v in checks.items():
        print(f"{'PASS' if v else 'FAIL'}  {k}")
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            json.dump({"requests": soak.n_requests, "clients": a.clients,
                       "duration_s": a.duration, "counts": soak.counts,
                       "rss_first_half_max": rss1, "rss_second_half_max": rss2,
                       "mcp_kills": len(soak.kills), "end_metrics": end,
                       "latency_max_s": {k: max(v) for k, v in soak.latency.items()},
                       "checks": checks, "failures": soak.failures}, f, indent=1)
        os.replace(a.json + ".tmp", a.json)
    sys.exit(0 if all(checks.values()) else 1)


if __name__ == "__main__":
    main()
