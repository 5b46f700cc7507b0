"""Read/write locks: many readers or one writer, FIFO between them, fenced by RWFence."""

import threading

from fencelock import Client, HeldError, Lease, RWFence, StaleTokenError

c = Client()
rw = RWFence()  # the resource's side
r1 = Lease(c, "docs/index", "app/reader-1", ttl=30, mode="read").acquire()
r2 = Lease(c, "docs/index", "app/reader-2", ttl=30, mode="read").acquire()
print("two readers:", r1.token, r2.token, [h.holder for h in c.get("docs/index").holders])

w = Lease(c, "docs/index", "app/writer", ttl=30, mode="write")  # waits its turn
t = threading.Thread(target=w.acquire)
t.start()
while True:  # readers join the readers until the writer is queued; after it, they wait
    try:
        Lease(c, "docs/index", "app/reader-3", mode="read", wait=0).acquire().release()
    except HeldError:
        print("reader-3 refused: a writer is queued before it (no writer starvation)")
        break
rw.admit_read("docs/index", r1.token, lambda: print("reader-1 reads under", r1.token))
r1.release()
r2.release()
t.join()
rw.admit_write("docs/index", w.token, lambda: print("the writer writes under", w.token))
try:
    rw.admit_read("docs/index", r2.token, lambda: print("never"))
except StaleTokenError as e:
    print("a reader from before the write:", e)
w.release()
