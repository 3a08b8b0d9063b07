"""The Nexmark generator's model, seeded: persons, auctions and bids (#33).

``python -m benchmarks.nexmark.generate --events N [--prefix nexmark]`` writes them to
Kafka; :func:`events` is the pure part the benchmarks and tests share.

The model is the reference generator's (the Nexmark project's ``nexmark-flink``, itself
Beam's), re-stated here, not its code:

- Event ``n`` (from 0) is a person when ``n % 50 == 0``, an auction when
  ``n % 50`` is 1 to 3, a bid otherwise: 1 : 3 : 46.
- Ids count from 1000: the ``k``-th person (auction) is ``1000 + k``. Categories are 10
  to 14.
- A bid's auction is, half the time, the first of the newest block of 100 auctions (a
  hot auction), else a random one of the last 100 auctions or up to 10 not yet created;
  its bidder is, 3 times in 4, the second of the newest block of 100 persons (a hot
  bidder), else a random one of the last 1000 persons or up to 10 not yet created. An
  auction's seller likewise: 3 in 4 the first of the newest block of 100 persons.
- Prices (cents) are ``round(10 ** (6 r) * 100)``, r uniform in [0, 1); an auction's
  reserve is its initial bid plus another such price; it expires after ``1 + U[0, 2h)``
  ms, ``h`` the event time until the 100th auction from now (100 in flight on average).
- Strings are 3 to ``max`` letters with a space one time in 13 (trimmed); names, cities
  and states from the reference's small lists; ``extra`` pads each event to the
  reference's average size (person 200 bytes, auction 500, bid 100), within 20 %.
- Event time: event ``n`` is at ``base + n * 1e6 / rate`` microseconds, rounded down to
  the millisecond; ``rate`` is 10,000 events/s by default (the reference's
  ``firstEventRate``), ``base`` a fixed epoch (the reference takes the wall clock).
  Events are in event-time order (the reference's default ``outOfOrderGroupSize`` 1).

Where this deviates, and why:

- Each event's random numbers come from Python's generator seeded with ``(seed, n)``
  (the reference seeds Java's ``Random`` with ``n``): the same distributions, not the
  same values; a seed picks another run. Seeded per event as the reference does, so an
  event does not depend on which events were generated before it.
- ``dateTime`` and ``expires`` are epoch milliseconds (numbers), not ``TIMESTAMP(3)``
  text: that is what a JSON producer writes and what a ``BIGINT`` time column reads.
- Bids have no ``channel`` and ``url`` (added by later nexmark-flink versions for q14
  and q22, queries outside q0-q8); the extended-bid mode is left out.

Topics: three, ``<prefix>.person``, ``<prefix>.auction``, ``<prefix>.bid``, each record
the event's fields alone, persons and auctions keyed by ``id``, bids by ``auction``
(what a producer of such a system would key them by, so the joins and per-auction
windows read them partitioned by their key). Nexmark's own sources emit one stream with
a type field, which each query's view splits again; three topics let a query read only
the events it needs, as Flink's Nexmark views and Kafka producers do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from string import ascii_lowercase
from typing import Any, NamedTuple

PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
HOT_BLOCK = 100
"""The reference's HOT_SELLER_RATIO, HOT_AUCTION_RATIO and HOT_BIDDER_RATIO: hot ids are
taken from the newest block of this many."""

US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = (
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
)
FIRST_NAMES = (
    "Peter",
    "Paul",
    "Luke",
    "John",
    "Saul",
    "Vicky",
    "Kate",
    "Julie",
    "Sarah",
    "Deiter",
    "Walter",
)
LAST_NAMES = (
    "Shultz",
    "Abrams",
    "Spencer",
    "White",
    "Bartels",
    "Walton",
    "Smith",
    "Jones",
    "Noris",
)
KINDS = ("person", "auction", "bid")

_STRING_CHARS = " " + ascii_lowercase
_STRING_WEIGHTS = [26 + 12 * i for i in range(27)]
"""Cumulative weights: a space 26 in 338 (1/13), each letter 12 in 338."""
_LETTER_OF_BYTE = bytes(97 + b * 26 // 256 for b in range(256))
"""A random byte to a letter, for ``extra`` (padding: each letter 9 or 10 in 256, where
the reference's are uniform; 20 times faster than drawing each letter)."""


@dataclass(frozen=True)
class NexmarkConfig:
    """The reference's defaults (``NexmarkConfiguration``), but ``base_time_ms``."""

    events: int = 100_000
    seed: int = 0
    rate: int = 10_000
    """Events per second of event time (``firstEventRate``)."""
    base_time_ms: int = 1_700_000_000_000
    num_active_people: int = 1000
    num_in_flight_auctions: int = 100
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    avg_person_bytes: int = 200
    avg_auction_bytes: int = 500
    avg_bid_bytes: int = 100

    def timestamp(self, n: int) -> int:
        """Event ``n``'s event time, epoch milliseconds."""
        return self.base_time_ms + int(n * (1_000_000.0 / self.rate)) // 1000


class Event(NamedTuple):
    kind: str
    """``person``, ``auction`` or ``bid``."""
    key: int
    """What the record is keyed by: a person's or auction's id, a bid's auction."""
    record: dict[str, Any]


def last_person(n: int) -> int:
    """The newest person id (base 0) at event ``n``: the current one if ``n`` is a person."""
    epoch, offset = divmod(n, TOTAL_PROPORTION)
    return epoch * PERSON_PROPORTION + min(offset, PERSON_PROPORTION - 1)


def last_auction(n: int) -> int:
    """The newest auction id (base 0) at event ``n``: the current one if ``n`` is an auction
    (-1 before the first)."""
    epoch, offset = divmod(n, TOTAL_PROPORTION)
    if offset < PERSON_PROPORTION:
        return (epoch - 1) * AUCTION_PROPORTION + AUCTION_PROPORTION - 1
    if offset >= PERSON_PROPORTION + AUCTION_PROPORTION:
        return epoch * AUCTION_PROPORTION + AUCTION_PROPORTION - 1
    return epoch * AUCTION_PROPORTION + offset - PERSON_PROPORTION


def _some_person(n: int, rng: random.Random, config: NexmarkConfig) -> int:
    people = last_person(n) + 1
    active = min(people, config.num_active_people)
    return people - active + rng.randrange(active + PERSON_ID_LEAD)


def _some_auction(n: int, rng: random.Random, config: NexmarkConfig) -> int:
    newest = last_auction(n)
    oldest = max(newest - config.num_in_flight_auctions, 0)
    return oldest + rng.randrange(newest - oldest + 1 + AUCTION_ID_LEAD)


def _price(rng: random.Random) -> int:
    return round(math.pow(10.0, rng.random() * 6.0) * 100.0)


def _string(rng: random.Random, max_length: int) -> str:
    """3 to ``max_length - 1`` characters, each a space with probability 1/13, else a
    letter; trimmed."""
    length = 3 + rng.randrange(max_length - 3)
    return "".join(rng.choices(_STRING_CHARS, cum_weights=_STRING_WEIGHTS, k=length)).strip()


def _extra(rng: random.Random, size: int, average: int) -> str:
    if size > average:
        return ""
    wanted = average - size
    delta = round(wanted * 0.2)
    length = wanted - delta + (rng.randrange(2 * delta) if delta else 0)
    return rng.randbytes(length).translate(_LETTER_OF_BYTE).decode()


def _person(n: int, rng: random.Random, ts: int, config: NexmarkConfig) -> Event:
    pid = last_person(n) + FIRST_PERSON_ID
    name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
    email = f"{_string(rng, 7)}@{_string(rng, 5)}.com"
    card = " ".join(f"{rng.randrange(10_000):04d}" for _ in range(4))
    city, state = rng.choice(US_CITIES), rng.choice(US_STATES)
    size = 8 + len(name) + len(email) + len(card) + len(city) + len(state)
    record = {
        "id": pid,
        "name": name,
        "emailAddress": email,
        "creditCard": card,
        "city": city,
        "state": state,
        "dateTime": ts,
        "extra": _extra(rng, size, config.avg_person_bytes),
    }
    return Event("person", pid, record)


def _auction(n: int, rng: random.Random, ts: int, config: NexmarkConfig) -> Event:
    aid = last_auction(n) + FIRST_AUCTION_ID
    if rng.randrange(config.hot_sellers_ratio) > 0:
        seller = last_person(n) // HOT_BLOCK * HOT_BLOCK
    else:
        seller = _some_person(n, rng, config)
    category = FIRST_CATEGORY_ID + rng.randrange(NUM_CATEGORIES)
    initial = _price(rng)
    # The 100th auction from now: auctions last that long on average.
    ahead = config.num_in_flight_auctions * TOTAL_PROPORTION // AUCTION_PROPORTION
    horizon = config.timestamp(n + ahead) - ts
    expires = ts + 1 + rng.randrange(max(horizon * 2, 1))
    item, description = _string(rng, 20), _string(rng, 100)
    reserve = initial + _price(rng)
    size = 8 + len(item) + len(description) + 8 * 5
    record = {
        "id": aid,
        "itemName": item,
        "description": description,
        "initialBid": initial,
        "reserve": reserve,
        "dateTime": ts,
        "expires": expires,
        "seller": seller + FIRST_PERSON_ID,
        "category": category,
        "extra": _extra(rng, size, config.avg_auction_bytes),
    }
    return Event("auction", aid, record)


def _bid(n: int, rng: random.Random, ts: int, config: NexmarkConfig) -> Event:
    if rng.randrange(config.hot_auction_ratio) > 0:
        auction = last_auction(n) // HOT_BLOCK * HOT_BLOCK
    else:
        auction = _some_auction(n, rng, config)
    if rng.randrange(config.hot_bidders_ratio) > 0:
        bidder = last_person(n) // HOT_BLOCK * HOT_BLOCK + 1
    else:
        bidder = _some_person(n, rng, config)
    auction += FIRST_AUCTION_ID
    record = {
        "auction": auction,
        "bidder": bidder + FIRST_PERSON_ID,
        "price": _price(rng),
        "dateTime": ts,
        "extra": _extra(rng, 32, config.avg_bid_bytes),
    }
    return Event("bid", auction, record)


def event(n: int, config: NexmarkConfig) -> Event:
    """Event ``n`` (from 0); a pure function of ``n`` and the config."""
    rng = random.Random(config.seed << 40 | n)
    ts = config.timestamp(n)
    offset = n % TOTAL_PROPORTION
    if offset < PERSON_PROPORTION:
        return _person(n, rng, ts, config)
    if offset < PERSON_PROPORTION + AUCTION_PROPORTION:
        return _auction(n, rng, ts, config)
    return _bid(n, rng, ts, config)


def events(config: NexmarkConfig) -> Iterator[Event]:
    """The run's events in event-number (and event-time) order."""
    for n in range(config.events):
        yield event(n, config)


def by_kind(config: NexmarkConfig) -> dict[str, list[Event]]:
    """The run's events split by kind, each list in event-time order."""
    split: dict[str, list[Event]] = {kind: [] for kind in KINDS}
    for e in events(config):
        split[e.kind].append(e)
    return split


async def produce(
    bootstrap_servers: str, topics: dict[str, str], config: NexmarkConfig, partitions: int = 1
) -> dict[str, int]:
    """Create ``topics`` (kind -> topic) and write the run's events to them, JSON, keyed
    (the key's decimal text); how many of each kind."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, partitions, 1) for t in topics.values()])
    finally:
        await admin.close()
    counts = dict.fromkeys(KINDS, 0)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers, linger_ms=20, max_batch_size=1 << 20
    )
    await producer.start()
    try:
        pending = []
        for e in events(config):
            value = json.dumps(e.record, separators=(",", ":")).encode()
            pending.append(
                await producer.send(
                    topics[e.kind],
                    value=value,
                    key=str(e.key).encode(),
                    timestamp_ms=e.record["dateTime"],
                )
            )
            counts[e.kind] += 1
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=NexmarkConfig.events)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rate", type=int, default=NexmarkConfig.rate)
    parser.add_argument("--prefix", default="nexmark")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    args = parser.parse_args()
    config = NexmarkConfig(events=args.events, seed=args.seed, rate=args.rate)
    topics = {kind: f"{args.prefix}.{kind}" for kind in KINDS}
    counts = asyncio.run(produce(args.bootstrap_servers, topics, config, args.partitions))
    print(json.dumps({topics[k]: v for k, v in counts.items()}))


if __name__ == "__main__":
    main()
