#!/usr/bin/env python3
"""Load test of the scheduler through the real daemon (docs/sched.md).

Starts `fluffy serve` on the replay model in a fresh home, with one
webhook. Fires N signed deliveries (one session each: triggered turns) from
a pool of client threads and, while they run, asks the assistant from a
terminal (`fluffy ask`, an interactive turn) K times, each in a thread of
its own. Reports the interactive reply's latency (from the command's start
to its first byte on stdout: the replay reply is one text block, so its
first token) idle and under load, and how long the N sessions took.

usage: python3 bench/sched_load.py [N=200] [K=10]
       FLUFFY=path/to/bin/fluffy (default: bin/fluffy of this repository)
       SET="sched.global=0 ..." passes --set to the daemon (a peer without limits)
"""
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
K = int(sys.argv[2]) if len(sys.argv) > 2 else 10
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLUFFY = os.environ.get("FLUFFY", os.path.join(ROOT, "bin", "fluffy"))
SECRET = "0123456789abcdef0123456789abcdef"

CONFIG = """serve:
  listen: 127.0.0.1:0
  grace: 5s
  webhooks:
    - name: load
      secret: env:HOOK_SECRET
      signature: fluffy
      prompt: Acknowledge the event.
"""
SCRIPT = '{"turn": {"text": "Acknowledged."}}\n{"end": {}}\n'


def body(i):
    # Each delivery its own body: the same body signed in the same second
    # is the same MAC, a replay (docs/webhooks.md).
    return b'{"service": "web", "n": %d}' % i


def main():
    home = tempfile.mkdtemp(prefix="fluffy-sched-load-")
    env = dict(os.environ, HOME=home, HOOK_SECRET=SECRET, USER="me",
               XDG_CONFIG_HOME=os.path.join(home, ".config"), XDG_DATA_HOME=os.path.join(home, ".local", "share"))
    env.pop("FLUFFY_HOME", None)
    run = lambda *a: subprocess.run([FLUFFY, *a], env=env, check=True, capture_output=True, text=True)
    run("serve", "init")
    os.makedirs(os.path.join(home, ".config", "fluffy"))
    with open(os.path.join(home, ".config", "fluffy", "config.yaml"), "w") as f:
        f.write(CONFIG)
    script = os.path.join(home, "replay.jsonl")
    with open(script, "w") as f:
        f.write(SCRIPT)
    sets = []
    for kv in os.environ.get("SET", "").split():
        sets += ["--set", kv]
    daemon = subprocess.Popen([FLUFFY, "--set", "model=replay/" + script, *sets, "serve"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        listen = None
        for _ in range(300):
            p = subprocess.run([FLUFFY, "status", "--json"], env=env, capture_output=True, text=True)
            if p.returncode == 0:
                listen = (json.loads(p.stdout).get("serve") or {}).get("listen")
                if listen and not listen.endswith(":0"):
                    break
            time.sleep(0.1)
        host, port = listen.rsplit(":", 1)

        def ask(thread):
            t0 = time.monotonic()
            p = subprocess.Popen([FLUFFY, "ask", "--thread", thread, "hello"], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)
            p.stdout.read(1)
            dt = time.monotonic() - t0
            p.stdout.read()
            p.wait()
            return dt * 1000

        idle = [ask("idle-%d" % i) for i in range(K)]

        # Signed ahead, so the load is the daemon's work only.
        signed = []
        for i in range(N):
            out = run("hook", "sign", "load", "--delivery", "d-%d" % i, "--event", "load", "--body", body_file(home, i))
            headers = dict(l.split(": ", 1) for l in out.stdout.splitlines() if ": " in l)
            signed.append((i, headers))

        def post(x):
            i, h = x
            c = http.client.HTTPConnection(host, int(port), timeout=120)
            c.request("POST", "/hooks/load", body=body(i), headers=h)
            r = c.getresponse()
            r.read()
            c.close()
            return r.status

        loaded = []
        t0 = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            futs = [pool.submit(post, h) for h in signed]

            def asks():
                time.sleep(0.2)
                for i in range(K):
                    loaded.append(ask("load-%d" % i))
            at = threading.Thread(target=asks)
            at.start()
            statuses = [f.result() for f in futs]
            at.join()
        posted = time.monotonic() - t0
        bad = [s for s in statuses if s != 202]
        if bad:
            sys.exit("deliveries refused: %s" % sorted(set(bad)))
        # Until every triggered turn has run: nothing running or queued.
        while True:
            st = json.loads(subprocess.run([FLUFFY, "sched", "status", "--json"], env=env, capture_output=True,
                                           text=True, check=True).stdout)
            if not st.get("running") and not any(st.get("queued", {}).values()):
                break
            time.sleep(0.05)
        total = time.monotonic() - t0
        q = lambda xs, p: sorted(xs)[min(len(xs) - 1, int(len(xs) * p))]
        print("deliveries: %d (%d not 202), posted in %.1fs, all turns done in %.1fs (%.1f sessions/s)"
              % (N, len(bad), posted, total, N / total))
        print("interactive reply latency idle:       median %.0f ms, max %.0f ms (n=%d)"
              % (statistics.median(idle), max(idle), len(idle)))
        print("interactive reply latency under load: median %.0f ms, p90 %.0f ms, max %.0f ms (n=%d)"
              % (statistics.median(loaded), q(loaded, 0.9), max(loaded), len(loaded)))
    finally:
        daemon.terminate()
        daemon.wait(30)
        shutil.rmtree(home, ignore_errors=True)


def body_file(home, i):
    p = os.path.join(home, "event-%d.json" % i)
    with open(p, "wb") as f:
        f.write(body(i))
    return p


if __name__ == "__main__":
    main()
