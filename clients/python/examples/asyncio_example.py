"""The asyncio flavour: the client, a lease, a session and a watch on one event loop."""

import asyncio

from fencelock.aio import AsyncClient, AsyncLease, AsyncSession


async def main() -> None:
    async with AsyncClient() as c:  # the same arguments and variables as fencelock.Client
        _, rev = await c.watch_list("jobs/")
        async with AsyncLease(c, "jobs/nightly", "app/worker-1", ttl=3) as lease:
            await asyncio.sleep(2.5)  # the keep-alive task extends meanwhile, every TTL/3
            lease.ensure()
            print("lease token", lease.token, "extensions", lease.extensions)
        async with AsyncSession(c, "app/batch", ttl=10) as s:
            a = await s.acquire("jobs/a")
            b, d = await s.acquire_all(["jobs/b", "jobs/d"])
            print("session", s.id, "tokens", a.token, b.token, d.token)
        n = 0
        async for ev in c.watch("jobs/", after=rev):
            print(ev.revision, ev.type, ev.key, ev.holder)
            n += 1
            if n == 8:
                break


asyncio.run(main())
