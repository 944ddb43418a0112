"""The honest bound for ``crawlherd dispatch --once``: the raw drivers doing the same transactional work.

Run as a process of its own by ``bench/dispatch.py`` and timed from start to exit, like ``crawlherd
dispatch --once``; written plainly with asyncpg and aio-pika / redis-py against crawlherd's own schema
(``scrape_targets``, ``dispatch_outbox``). Until nothing is due, per batch of ``--batch`` (5,000):

1. one transaction: claim the due targets and advance them by their interval in one ``UPDATE ...
   FROM (SELECT ... FOR UPDATE SKIP LOCKED) ... RETURNING``, build each job body (the website's
   spec serialised once, spliced into every body) and write the outbox rows in one ``INSERT ...
   SELECT FROM unnest(...)``;
2. publish them: RabbitMQ -- persistent, publisher confirms, ``--in-flight`` (500) outstanding;
   Redis -- ``XADD`` pipelined ``--in-flight`` per round trip;
3. delete the sent rows in one ``DELETE ... WHERE id = ANY(...)``.

It prints the number of messages published. It runs on uvloop (``--loop``), as crawlherd does when
uvloop is installed. Only interval targets with one due slot are handled (the
bench's workload): the bound does none of crawlherd's schedule, misfire or lineage work.

    python bench/dispatch_bound.py --database-url postgresql://postgres@127.0.0.1:5432/db \\
        --broker-url amqp://guest:guest@127.0.0.1:5672/ --queue bench.bound
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from typing import Any
from urllib.parse import quote_plus

import asyncpg

CLAIM = """
UPDATE scrape_targets t
SET next_run_at = t.next_run_at + t.interval_seconds * interval '1 second',
    last_scheduled = t.next_run_at, updated_at = now()
FROM (SELECT id FROM scrape_targets WHERE active AND next_run_at <= now()
      ORDER BY next_run_at LIMIT $1 FOR UPDATE SKIP LOCKED) due
WHERE t.id = due.id
RETURNING t.id, t.website_id, t.keywords, t.location,
          t.next_run_at - t.interval_seconds * interval '1 second' AS slot_at
"""
INSERT = """
INSERT INTO dispatch_outbox (target_id, slot_at, key, status, attempts, leased_until, body, created_at)
SELECT t, s, k, 'pending', 1, now(), b, now() FROM unnest($1::bigint[], $2::timestamptz[], $3::text[], $4::text[])
  AS v(t, s, k, b)
ON CONFLICT (target_id, slot_at) DO NOTHING
RETURNING id, key, body
"""
DELETE = "DELETE FROM dispatch_outbox WHERE id = ANY($1::bigint[])"
NAMESPACE = uuid.UUID("6f1c1c64-1d38-4d9c-9a4f-3c7b0b2f5d11")


class Bodies:
    """Job bodies of the websites' targets: each website's spec serialised once."""

    def __init__(self, sites: dict[int, dict[str, Any]]) -> None:
        self.sites = {site_id: (json.dumps(spec, separators=(",", ":")), spec["search_url_template"])
                      for site_id, spec in sites.items()}

    def body(
        self, target_id: int, website_id: int, keywords: str, location: str, slot: str, now: str
    ) -> tuple[str, str]:
        key = f"{target_id}:{slot}"
        spec, template = self.sites[website_id]
        url = template.replace("{keywords}", quote_plus(keywords)).replace("{location}", quote_plus(location))
        body = (
            f'{{"schema_version":1,"job_id":"{uuid.uuid5(NAMESPACE, key)}","idempotency_key":"{key}",'
            f'"target_id":{target_id},"slot_at":"{slot}","website_id":{website_id},"site":{spec},'
            f'"search_url":{json.dumps(url)},"keywords_used":{json.dumps(keywords)},'
            f'"location_used":{json.dumps(location or None)},"attempt_count":0,"created_at":"{now}"}}'
        )
        return key, body


async def claim(conn: asyncpg.Connection, bodies: Bodies, batch: int) -> list[asyncpg.Record]:
    """One transaction: claim and advance up to ``batch`` due targets, write their outbox rows."""
    async with conn.transaction():
        due = await conn.fetch(CLAIM, batch)
        if not due:
            return []
        now = (await conn.fetchval("SELECT now()")).isoformat()
        ids, slots, keys, texts = [], [], [], []
        for r in due:
            slot = r["slot_at"]
            key, body = bodies.body(r["id"], r["website_id"], r["keywords"], r["location"], slot.isoformat(), now)
            ids.append(r["id"])
            slots.append(slot)
            keys.append(key)
            texts.append(body)
        return await conn.fetch(INSERT, ids, slots, keys, texts)


async def publish_amqp(url: str, queue: str, in_flight: int, batches: Any) -> int:
    import aio_pika

    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(queue, durable=True, arguments={"x-queue-type": "classic"})
        exchange = channel.default_exchange
        headers = {"schema_version": "1"}
        sent = 0
        async for rows, done in batches:
            async def publisher(todo: Any) -> None:
                for row in todo:
                    message = aio_pika.Message(row["body"].encode(), headers=headers, message_id=row["key"],
                                               delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
                    await exchange.publish(message, queue)

            todo = iter(rows)
            await asyncio.gather(*(publisher(todo) for _ in range(min(in_flight, len(rows)))))
            await done(rows)
            sent += len(rows)
        return sent
    finally:
        await connection.close()


async def publish_redis(url: str, stream: str, in_flight: int, batches: Any) -> int:
    import redis.asyncio as aioredis

    client = aioredis.from_url(url)
    try:
        headers = json.dumps({"schema_version": "1"})
        sent = 0
        async for rows, done in batches:
            for start in range(0, len(rows), in_flight):
                async with client.pipeline(transaction=False) as pipe:
                    for row in rows[start : start + in_flight]:
                        pipe.xadd(stream, {"k": row["key"], "b": row["body"].encode(), "h": headers})
                    await pipe.execute()
            await done(rows)
            sent += len(rows)
        return sent
    finally:
        await client.aclose()


async def main(args: argparse.Namespace) -> None:
    conn = await asyncpg.connect(args.database_url)
    try:
        sites = {r["id"]: json.loads(r["spec"]) for r in await conn.fetch("SELECT id, spec FROM websites")}
        bodies = Bodies(sites)

        async def done(rows: list[asyncpg.Record]) -> None:
            await conn.execute(DELETE, [r["id"] for r in rows])

        async def batches() -> Any:
            while rows := await claim(conn, bodies, args.batch):
                yield rows, done

        if args.broker_url.startswith("amqp"):
            sent = await publish_amqp(args.broker_url, args.queue, args.in_flight, batches())
        else:
            sent = await publish_redis(args.broker_url, args.queue, args.in_flight, batches())
    finally:
        await conn.close()
    print(sent)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--broker-url", required=True, help="amqp://... or redis://...")
    parser.add_argument("--queue", required=True, help="the queue (RabbitMQ) or stream (Redis) to publish to")
    parser.add_argument("--batch", type=int, default=5000, help="targets claimed per transaction")
    parser.add_argument("--in-flight", type=int, default=500, help="confirms outstanding / XADDs per round trip")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop",
                        help="the event loop (uvloop: as crawlherd's default when it is installed)")
    args = parser.parse_args()
    if args.loop == "uvloop":
        import uvloop

        uvloop.run(main(args))
    else:
        asyncio.run(main(args))
