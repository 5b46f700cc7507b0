"""Leader election: campaign, observe, resign; the leadership's fencing token."""

import threading
import time

from fencelock import Client, Election, Fence, StaleTokenError

c = Client()
e = Election(c, "elections/billing", ttl=10)
seen = []
obs = e.observe().start(lambda ld: seen.append((ld.candidate or "(nobody)", ld.token, str(ld.revision))))

db = Fence()  # the resource's side: the largest token it has seen
leader = e.campaign("app/worker-7")  # waits, in FIFO order among the candidates
print("elected:", leader.candidate, "token", leader.token)
for job in ("job-1", "job-2"):
    leader.ensure()  # LeaseLostError: no longer the leader, stop
    db.admit("ledger", leader.token, lambda: print("write", job, "under", leader.token))

nxt = []
_held, rev = c.watch_list(key="elections/billing")
t = threading.Thread(target=lambda: nxt.append(e.campaign("app/worker-8")))
t.start()
with c.watch(key="elections/billing", after=rev) as w:  # until worker-8 is in line
    next(ev for ev in w if ev.type == "wait-joined")
leader.resign()  # the next candidate is elected in the same step
t.join()
print("now:", e.leader().candidate, "token", nxt[0].token)
db.admit("ledger", nxt[0].token, lambda: print("worker-8 writes"))
try:
    db.admit("ledger", leader.token, lambda: print("never"))
except StaleTokenError as err:
    print("the deposed leader is refused:", err)
nxt[0].resign()
for _ in range(1000):  # the observer's last report comes on its own thread
    if len(seen) >= 5:
        break
    time.sleep(0.01)
obs.close()
print("observed:", seen)
