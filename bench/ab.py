#!/usr/bin/env python3
# Interleaved A/B wall-time comparison: one run of each command in turn, N rounds,
# so that the machine's drift over minutes hits every command alike (hyperfine
# runs all of one command first). A command may start with VAR=value words.
#   python3 bench/ab.py N 'cmd a' 'cmd b' ...
# BLOCK=K runs each command K times in a row per round (N rounds of K), and
# times only the last K-1: work a command leaves running after it exits
# (the sandbox server builds the next sandbox then) lands on its own next
# run, not on the next command's. GAP_MS=G sleeps G ms before each run (an
# agent's commands come seconds apart; back to back is hyperfine's case).
import os, sys, time, statistics, shlex
n = int(sys.argv[1]); cmds = [shlex.split(c) for c in sys.argv[2:]]
envs = []
for c in cmds:
    e = dict(os.environ)
    while c and '=' in c[0] and not c[0].startswith('/'):
        k, v = c.pop(0).split('=', 1); e[k] = v
    envs.append(e)
devnull = os.open(os.devnull, os.O_RDWR)
times = [[] for _ in cmds]
for c in cmds:  # warm-up
    for _ in range(3):
        pid = os.posix_spawnp(c[0], c, envs[cmds.index(c)], file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)])
        os.waitpid(pid, 0)
block = int(os.environ.get("BLOCK", "1"))
gap = float(os.environ.get("GAP_MS", "0")) / 1000
for i in range(n):
    for j, c in enumerate(cmds):
      for k in range(block):
        if gap:
            time.sleep(gap)
        t0 = time.perf_counter()
        pid = os.posix_spawnp(c[0], c, envs[j], file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)])
        _, st = os.waitpid(pid, 0)
        if block == 1 or k > 0:
            times[j].append((time.perf_counter() - t0) * 1000)
        if st != 0: print("exit", st, c, file=sys.stderr)
for j, c in enumerate(sys.argv[2:]):
    t = sorted(times[j])
    print(f"{statistics.median(t):6.2f} ms median  p10 {t[len(t)//10]:6.2f}  p90 {t[len(t)*9//10]:6.2f}  mean {statistics.mean(t):6.2f}  {c}")
