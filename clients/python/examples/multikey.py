"""Multi-key acquire: all or none, one token per key (docs/PRIMITIVES.md)."""

import threading

from fencelock import Client, HeldError

c = Client()
held = c.acquire("acct/2", "app/audit", 30)
try:
    c.acquire_all(["acct/1", "acct/2", "acct/3"], "app/xfer", 30, wait=0)  # try once
except HeldError as e:
    print("refused:", e)
print("held now:", [(g.key, g.holder) for g in c.list("acct/")])  # no partial hold

# By default the client tries again until it has them all (the server never queues an acquire-all).
threading.Timer(0.3, lambda: c.release("acct/2", "app/audit", held.token)).start()
got = c.acquire_all(["acct/1", "acct/2", "acct/3"], "app/xfer", 30, wait=10)
print("granted:", [(g.key, g.token) for g in got])
for g in got:
    c.release(g.key, "app/xfer", g.token)
