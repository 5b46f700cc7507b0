"""Watches: a resumable stream of a prefix's changes, as an iterator and a callback."""

import threading

from fencelock import Client

c = Client()
locks, rev = c.watch_list("jobs/")  # the present, and the revision it was read at
print("live now:", [g.key for g in locks], "at revision", rev)

g = c.acquire("jobs/nightly", "app/alice", 30)
t = threading.Thread(target=lambda: c.acquire("jobs/nightly", "app/bob", 30, wait=10))
t.start()
with c.watch("jobs/", after=rev) as w:  # the iterator form
    for ev in w:
        print(ev.revision, ev.type, ev.key, ev.holder, "token=%d" % ev.token if ev.token else "")
        if ev.type == "wait-joined":
            c.release("jobs/nightly", "app/alice", g.token)
        if ev.type == "granted" and ev.holder == "app/bob":
            break
t.join()
print("resume after", w.revision)

done = threading.Event()


def on_event(ev):  # the callback form, on a thread of its own
    print("callback:", ev.revision, ev.type, ev.key, ev.holder)
    done.set()


w2 = c.watch("jobs/", after=w.revision).start(on_event)
c.release("jobs/nightly", "app/bob")
done.wait(10)
w2.close()
