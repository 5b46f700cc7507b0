"""Sessions: many locks, one keep-alive, lost together (docs/PRIMITIVES.md, "Sessions")."""

from fencelock import Client, HeldError, Session

c = Client()  # $FENCELOCK_ADDR, $FENCELOCK_CLIENT_CA/_CERT/_KEY, $FENCELOCK_AUTH_TOKEN

# The handle: one thread keeps the session, and every lock under it, alive.
with Session(c, "app/batch", ttl=15) as s:
    l = s.acquire("jobs/a")  # waits its turn in the FIFO; wait=0 tries once
    print("session", s.id, "holds", l.key, "token", l.token)
    try:
        c.acquire("jobs/a", "app/other", 10, wait=0)
    except HeldError as e:
        print("app/other refused:", e.code, "holder", e.holder)
    s.ensure()  # raises SessionLostError once the session is lost
print("after close:", c.list("jobs/a"))

# The plain calls, as the CLI makes them: nothing keeps this one alive.
info = c.open_session("app/batch", 30)
print("opened", info.id)
for k in ("jobs/1", "jobs/2", "jobs/3"):
    print(k, c.acquire(k, "app/batch", session=info.id).token)
ext = c.extend_session(info.id, "app/batch")
print("session %d: %d locks, %.1f s left" % (ext.id, ext.locks, ext.remaining))
closed = c.close_session(info.id, "app/batch")
print("session %d closed: %d locks released" % (closed.id, closed.locks))
