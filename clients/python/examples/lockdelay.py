"""Lock-delay: after an expiry (not a release) the key is granted to nobody for a while."""

import time

from fencelock import Client, LockDelayError

c = Client()
g = c.acquire("jobs/fragile", "app/w1", ttl=0.5, lock_delay=2)  # then app/w1 "pauses" and never extends
while c.check("jobs/fragile", g.token):
    time.sleep(0.05)
print("app/w1's lease expired")
try:
    c.acquire("jobs/fragile", "app/w2", 10, wait=0)  # try once
except LockDelayError as e:
    print("app/w2 refused:", e.code, "for %.1f s more" % (e.remaining or 0))
t0 = time.monotonic()
new = c.acquire("jobs/fragile", "app/w2", 10, wait=10)  # waiters keep their place and get it at the end
print("app/w2 granted token %d after %.1f s (the new token is higher: %s)" % (new.token, time.monotonic() - t0,
                                                                            new.token > g.token))
c.release("jobs/fragile", "app/w2", new.token)
