#!/usr/bin/env python3
"""Verify a fluffy audit export with the Python standard library only.

    python3 audit_verify.py DIR [VERIFIER-KEY|FILE] [--checkpoint FILE]...

DIR is what 'fluffy audit export DIR' wrote. Pass the verifier key
('fluffy audit key', or a file holding it) from somewhere other than DIR:
without it the key stored in the export is used, which proves only that
the export is consistent, not whose it is. --checkpoint FILE is a signed
checkpoint kept elsewhere (a copy of keys/audit.checkpoint, or a note):
the export must contain it, which catches a tail cut together with its
checkpoints. Prints "OK ..." and exits 0, or names the problem and exits 1.
The format is specified in docs/audit.md.
"""
import base64, hashlib, json, os, sys

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

def strict(b):  # JSON with no duplicate members: one reading for every verifier
    def obj(pairs):
        if len({k for k, _ in pairs}) != len(pairs): raise ValueError("duplicate member")
        return dict(pairs)
    return json.loads(b, object_pairs_hook=obj)

def open_note(note, name, pub):  # a signed checkpoint -> (size, root, chain), or None
    try:
        text, _, sigs = note.partition("\n\n")
        sig = lambda line: base64.b64decode(line.split(" ")[2], validate=True)[4:]  # after the 4-byte key hash
        if not any(line.startswith("\u2014 %s " % name) and len(sig(line)) == 64 and ed25519_ok(pub, (text + "\n").encode(), sig(line))
                   for line in sigs.splitlines()): return None
        origin, size, root, chain = text.split("\n")
        if origin != name or not (size.isascii() and size.isdigit()) or not chain.startswith("chain "): return None
        return int(size), base64.b64decode(root, validate=True), base64.b64decode(chain[6:], validate=True)
    except (ValueError, IndexError):
        return None

def kept_checkpoint(path, name, pub):  # --checkpoint FILE: a note, or fluffy's two-slot file
    b, notes = open(path, "rb").read(), []
    if not b.startswith(b"fluffy-audit-checkpoint-v1 "): notes = [b.decode()]
    for i in range(0, len(b), 4096) if not notes else ():
        hdr, _, rest = b[i:i + 4096].partition(b"\n")
        f = hdr.split(b" ")
        if len(f) == 3 and f[1].isdigit() and hashlib.sha256(rest[:int(f[1])]).hexdigest().encode() == f[2]:
            notes.append(rest[:int(f[1])].decode())  # an intact slot (a torn one is skipped)
    cps = [open_note(n, name, pub) for n in notes]
    if not cps or None in cps: fail("the checkpoint in %s does not verify with the key (another log, or edited)" % path)
    return max(cps)

def is_prune(e, size, root, chain):  # the audit.prune record fluffy writes for the anchor
    p, b64 = e.get("payload"), lambda h: base64.b64encode(h).decode()
    return (e.get("kind") == "audit.prune" and e.get("actor") == "kernel" and e.get("session") == "" and isinstance(p, dict)
            and type(p.get("anchor")) is int and p["anchor"] == size and p.get("root") == b64(root) and p.get("chain") == b64(chain))

def main(d, vkey=None, kept=()):
    if vkey is None:
        vkey = open(d + "/key.txt").read().strip()
        print("warning: using the key stored in the export itself: this shows the export is consistent, not that it is "
              "the log you think; pass the verifier key kept elsewhere", file=sys.stderr)
    elif os.path.isfile(vkey):
        vkey = open(vkey).read().strip()
    try:
        name, _, key = vkey.split("+", 2)
        key = base64.b64decode(key, validate=True); pub = key[1:]
        if key[0] != 1 or len(pub) != 32: raise ValueError
    except (ValueError, IndexError):
        sys.exit("audit_verify.py: %r is not an Ed25519 verifier key (name+hash+key, from 'fluffy audit key')" % vkey)
    anchor = strict(open(d + "/anchor.json", "rb").read())
    if anchor.get("format") != "fluffy-audit-export-v1": fail("anchor.json is not a fluffy-audit-export-v1 anchor")
    if set(anchor) != {"format", "origin", "size", "chain", "range"}: fail("anchor.json: members %s" % sorted(anchor))
    if anchor["origin"] != name: fail("the export is log %s, the key is %s" % (anchor["origin"], name))
    cps = {}  # tree size -> (root, chain hash), signatures checked
    for c in strict(open(d + "/checkpoints.json", "rb").read()):
        if set(c) != {"size", "note"}: fail("checkpoints.json: members %s" % sorted(c))
        cp = open_note(c["note"], name, pub)
        if cp is None or cp[0] != c["size"]: fail("checkpoint at size %s does not verify" % c["size"])
        cps[cp[0]] = cp[1:]
    trusted = {}  # checkpoints kept elsewhere: the export must contain them
    for path in kept:
        size, root, chain = kept_checkpoint(path, name, pub)
        if size < anchor["size"]: print("note: the checkpoint in %s (size %d) predates the anchor and was not compared" % (path, size), file=sys.stderr)
        else: trusted[size] = (root, chain)
    size, chain = anchor["size"], base64.b64decode(anchor["chain"])
    if type(size) is not int or size < 0: fail("anchor.json: size %r" % size)
    stack = [base64.b64decode(h) for h in anchor["range"]]  # compact Merkle range [0, size)
    def root():
        r = stack[-1] if stack else H()
        for h in reversed(stack[:-1]): r = H(b"\x01", h, r)
        return r
    if size and cps.get(size) != (root(), chain): fail("the anchor at %d is not the signed checkpoint" % size)
    if size in trusted and trusted[size] != (root(), chain): fail("the anchor at %d is not the checkpoint kept elsewhere" % size)
    if not size and (chain != bytes(32) or stack): fail("anchor.json: size 0 with a chain hash or range")
    pruned = not size  # entries 1..A may be missing only behind fluffy's own audit.prune record for A
    for line in open(d + "/entries.jsonl", "rb"):
        body, size = line[:-1], size + 1
        if not line.endswith(b"\n"): fail("entries.jsonl does not end with a newline (truncated?)")
        try: e = strict(body); seq = e["seq"]
        except (ValueError, KeyError, TypeError): fail("line for entry %d is not an entry" % size)
        if type(seq) is not int or seq != size: fail("line for entry %d holds entry %s" % (size, seq))
        chain = H(b"fluffy-audit-chain-v1\x00", chain, size.to_bytes(8, "big"), body)
        stack.append(H(b"\x00", chain)); n = size - 1
        while n & 1: r = stack.pop(); stack.append(H(b"\x01", stack.pop(), r)); n >>= 1
        if size in cps and cps[size] != (root(), chain): fail("entries up to %d do not match the signed checkpoint" % size)
        if size in trusted and trusted[size] != (root(), chain): fail("entries up to %d do not match the checkpoint kept elsewhere" % size)
        pruned = pruned or is_prune(e, anchor["size"], *cps[anchor["size"]])
    newest = max([*cps, *trusted], default=0)
    if size < newest: fail("truncated: entries end at %d, a checkpoint covers %d" % (size, newest))
    if size > max(cps, default=0): fail("entries %d..%d are not signed by any checkpoint" % (max(cps, default=0) + 1, size))
    if not pruned: fail("entries 1..%d are missing and no audit.prune entry written by fluffy (actor kernel) records a pruning "
                        "at %d: they were deleted without pruning, or the export was cut" % (anchor["size"], anchor["size"]))
    print("OK %s: entries %d..%d, %d signed checkpoints" % (name, anchor["size"] + 1, size, len(cps)))

if __name__ == "__main__":
    args, kept = sys.argv[1:], []
    while "--checkpoint" in args:
        i = args.index("--checkpoint"); kept.append(args[i + 1]); del args[i:i + 2]
    if not 1 <= len(args) <= 2: sys.exit(__doc__)
    try: main(args[0], args[1] if len(args) > 1 else None, kept)
    except OSError as e: sys.exit("audit_verify.py: %s" % e)
    except KeyError as e: fail("the export is malformed: member %s is missing" % e)
    except (ValueError, TypeError, AttributeError) as e: fail("the export is malformed: %s" % e)
