"""Semaphores: N permits, each its own lease and token, fenced per slot."""

from fencelock import Client, Fence, HeldError, KindMismatchError, Lease, permit_resource

c = Client()
fence = Fence()  # the resource's side
permits = [Lease(c, "pool/gpu", "app/job-%d" % i, ttl=30, permits=4).acquire() for i in range(4)]
for p in permits:
    fence.admit(permit_resource("pool/gpu", p.slot), p.token, lambda: None)
print("4 of 4:", [(p.holder, "slot", p.slot, "token", p.token) for p in permits])
try:
    Lease(c, "pool/gpu", "app/job-4", permits=4, wait=0).acquire()  # try once
except HeldError as e:
    print("a fifth:", e.code)
try:
    Lease(c, "pool/gpu", "app/job-4", permits=8, wait=0).acquire()
except KindMismatchError as e:
    print("another N:", e.code, e.kind, e.permits)
permits[1].release()
with Lease(c, "pool/gpu", "app/job-4", ttl=30, permits=4) as p:  # waits for a permit
    fence.admit(permit_resource("pool/gpu", p.slot), p.token, lambda: print("job-4 runs on slot", p.slot))
    try:
        old = permits[1]  # a holder whose permit passed on, waking from a pause
        fence.admit(permit_resource("pool/gpu", old.slot), old.token, lambda: print("never"))
    except Exception as e:
        print("stale permit refused:", e)
for p in permits:
    p.close()
