"""Take a lock, do fenced work, notice loss. Run against a server on $FENCELOCK_ADDR."""

import time

from fencelock import Client, DistributedLock, Fence, HeldError, Lease, LeaseLostError, StaleTokenError

client = Client()  # $FENCELOCK_ADDR (comma-separated for a cluster), else 127.0.0.1:7470; close() when done
fence = Fence()  # the resource's side: the highest token it has seen
ledger = []

with Lease(client, "jobs/nightly", "worker-1", ttl=3) as lease:  # waits its turn (wait=0: try once)
    print("worker-1 holds jobs/nightly with token", lease.token)
    try:
        client.acquire("jobs/nightly", "worker-2", ttl=3, wait=0)  # try once
    except HeldError as e:
        print("worker-2 refused:", e.code, "held by", e.holder)
    fence.admit("ledger", lease.token, lambda: ledger.append(("worker-1", lease.token)))
    time.sleep(2.8)  # longer than the TTL's 0.89: the lease thread has extended meanwhile, every TTL/3
    lease.ensure()
    print("still held after 2.8 s, extensions confirmed:", lease.extensions)

    # Someone else takes over (here: we release behind the lease's back).
    client.release("jobs/nightly", "worker-1", lease.token)
    lease.lost_event.wait(5)
    print("lost:", lease.lost, "-", lease.cause, "-", lease.reason)
    try:
        lease.ensure()
    except LeaseLostError as e:
        print("ensure() raised LeaseLostError")

new = client.acquire("jobs/nightly", "worker-2", ttl=3)
fence.admit("ledger", new.token, lambda: ledger.append(("worker-2", new.token)))
try:
    fence.admit("ledger", lease.token, lambda: ledger.append(("worker-1 zombie", lease.token)))
except StaleTokenError as e:
    print("zombie write refused:", e)
print("ledger:", ledger)
client.release("jobs/nightly", "worker-2")

lock = DistributedLock(client)  # the course exercise's calls
t1 = lock.acquire("resource", "client-a", ttl=10)
print("seed: acquire a ->", t1, "| acquire b ->", lock.acquire("resource", "client-b", ttl=10),
      "| valid(t1) ->", lock.is_valid_token("resource", t1), "| release a ->", lock.release("resource", "client-a"))
client.close()
