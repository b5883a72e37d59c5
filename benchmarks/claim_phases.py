"""What a claim and an outcome write cost per message, apart from the handlers.

Inserts `--messages` plain messages, then claims them `--claim` at a time through the
driver (`Driver.claim`, rows read into messages included), acks each claim's messages
and writes their outcomes (`Driver.write_outcomes`), timing the two phases apart.
Prints the median over `--rounds` drains of microseconds per message for each phase:

    python -m benchmarks.claim_phases [--databases sqlite postgresql mysql]
        [--messages 20000] [--claim 1000] [--rounds 5]

To compare two revisions, run it in a checkout of each.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from faststream_sqla.subscriber.config import default_retry_strategy

from .common import DATABASES, fresh_target, make_targets
from .ours import QUEUE, acked_outcomes, our_driver, preinsert


async def one_drain(url: str, messages: int, claim: int) -> tuple[float, float]:
    """Seconds spent claiming and writing outcomes in one drain of `messages`."""
    await preinsert(url, messages)
    strategy = default_retry_strategy()
    claiming = writing = 0.0
    done = 0
    async with our_driver(url) as (engine, driver):
        while done < messages:
            began = time.perf_counter()
            claimed = await driver.claim(engine, QUEUE, claim)
            claiming += time.perf_counter() - began
            if not claimed:
                msg = f"only {done} of {messages} messages could be claimed"
                raise RuntimeError(msg)
            outcomes = acked_outcomes(claimed, strategy)
            began = time.perf_counter()
            await driver.write_outcomes(engine, outcomes)
            writing += time.perf_counter() - began
            done += len(claimed)
    return claiming, writing


async def main(databases: list[str], messages: int, claim: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for database, target in make_targets(databases, Path(tmp)).items():
            await fresh_target(database, target.url)
            claims, writes = [], []
            for _ in range(rounds):
                claiming, writing = await one_drain(target.url, messages, claim)
                claims.append(1e6 * claiming / messages)
                writes.append(1e6 * writing / messages)
            print(
                f"{database:10} claim {statistics.median(claims):6.2f} µs/msg, "
                f"outcome write {statistics.median(writes):6.2f} µs/msg "
                f"(median of {rounds}; claims of {claim}, {messages} messages)"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", nargs="+", default=list(DATABASES), choices=DATABASES)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--claim", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.databases, args.messages, args.claim, args.rounds))
