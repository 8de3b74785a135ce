#!/usr/bin/env python3
"""Verify a fluffy audit export with the Python standard library only.

    python3 audit_verify.py DIR [VERIFIER-KEY]

DIR is what 'fluffy audit export DIR' wrote; pass the verifier key
('fluffy audit key') from somewhere other than DIR to rule out a forged
export. Prints "OK ..." and exits 0, or names the problem and exits 1.
The format is specified in docs/audit.md.
"""
import base64, hashlib, json, sys

def H(*parts): return hashlib.sha256(b"".join(parts)).digest()

# Ed25519 signature verification (RFC 8032, 5.1.7), extended coordinates.
P = 2**255 - 19; L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P; SQRT_M1 = pow(2, (P - 1) // 4, P)
def add(a, b):
    A, B = (a[1] - a[0]) * (b[1] - b[0]) % P, (a[1] + a[0]) * (b[1] + b[0]) % P
    C, E = 2 * a[3] * b[3] * D % P, 2 * a[2] * b[2] % P
    return ((B - A) * (E - C) % P, (E + C) * (B + A) % P, (E - C) * (E + C) % P, (B - A) * (B + A) % P)
def mul(s, pt, acc=(0, 1, 1, 0)):
    while s:
        if s & 1: acc = add(acc, pt)
        pt, s = add(pt, pt), s >> 1
    return acc
def point(b):
    y = int.from_bytes(b, "little") & ((1 << 255) - 1)
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P: x = x * SQRT_M1 % P
    if y >= P or (x * x - x2) % P: raise ValueError("not a curve point")
    x = P - x if (x & 1) != b[31] >> 7 else x
    return (x, y, 1, x * y % P)
BASE = point((4 * pow(5, P - 2, P) % P).to_bytes(32, "little"))
def ed25519_ok(pub, msg, sig):
    s, k = int.from_bytes(sig[32:], "little"), int.from_bytes(hashlib.sha512(sig[:32] + pub + msg).digest(), "little")
    a, b = mul(s, BASE), add(point(sig[:32]), mul(k % L, point(pub)))
    return s < L and (a[0] * b[2] - b[0] * a[2]) % P == 0 and (a[1] * b[2] - b[1] * a[2]) % P == 0

def fail(msg): sys.exit("DAMAGED: " + msg)

def main(d, vkey=None):
    name, _, key = (vkey or open(d + "/key.txt").read().strip()).split("+", 2)
    key = base64.b64decode(key); pub = key[1:]  # key[0] == 1: Ed25519
    anchor = json.load(open(d + "/anchor.json"))
    if anchor["origin"] != name: fail("the export is log %s, the key is %s" % (anchor["origin"], name))
    cps = {}  # tree size -> (root, chain hash), signatures checked
    for c in json.load(open(d + "/checkpoints.json")):
        text, _, sigs = c["note"].partition("\n\n")
        ok = any(line.startswith("\u2014 %s " % name) and ed25519_ok(pub, (text + "\n").encode(), base64.b64decode(line.split(" ")[2])[4:])
                 for line in sigs.splitlines())
        origin, size, root, chain = text.split("\n")
        if not ok or origin != name or int(size) != c["size"]: fail("checkpoint at size %d does not verify" % c["size"])
        cps[int(size)] = (base64.b64decode(root), base64.b64decode(chain.removeprefix("chain ")))
    size, chain = anchor["size"], base64.b64decode(anchor["chain"])
    stack = [base64.b64decode(h) for h in anchor["range"]]  # compact Merkle range [0, size)
    def root():
        r = stack[-1] if stack else H()
        for h in reversed(stack[:-1]): r = H(b"\x01", h, r)
        return r
    if size and cps.get(size) != (root(), chain): fail("the anchor at %d is not the signed checkpoint" % size)
    for line in open(d + "/entries.jsonl", "rb"):
        body, size = line[:-1], size + 1
        if json.loads(body)["seq"] != size: fail("line for entry %d holds entry %s" % (size, json.loads(body)["seq"]))
        chain = H(b"fluffy-audit-chain-v1\x00", chain, size.to_bytes(8, "big"), body)
        stack.append(H(b"\x00", chain)); n = size - 1
        while n & 1: r = stack.pop(); stack.append(H(b"\x01", stack.pop(), r)); n >>= 1
        if size in cps and cps[size] != (root(), chain): fail("entries up to %d do not match the signed checkpoint" % size)
    if size < max(cps, default=0): fail("truncated: entries end at %d, a checkpoint covers %d" % (size, max(cps)))
    if size > max(cps, default=0): fail("entries %d..%d are not signed by any checkpoint" % (max(cps, default=0) + 1, size))
    print("OK %s: entries %d..%d, %d signed checkpoints" % (name, anchor["size"] + 1, size, len(cps)))

if __name__ == "__main__":
    main(*sys.argv[1:3])
