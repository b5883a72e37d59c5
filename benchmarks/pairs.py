"""Our drain against a peer's, measured side by side: ours, peer, ours, ..., ours.

A peer's best drain and ours are otherwise minutes apart, and this VM's speed drifts by a
quarter or more in that time. Here each peer drain (in its own process, at the
configuration its own scenario picked) sits between two of ours at our picked
claim sizes, and the reported ratio is the median over peer drains of the
geometric mean of its two neighbours / the peer's rate, as the drains are paired with
the pipeline.
"""

from __future__ import annotations

import statistics
from typing import Any

from . import ours
from .common import (
    PAIRED_DRAIN_METRIC,
    Results,
    Target,
    over_neighbours,
    run_json_subprocess,
)

#: peer system name -> (its runner module, our drain it is set against: batch or not)
PEERS = {
    "faststream-sqlbroker": ("benchmarks.peers.sqlbroker_peer", False),
    "pgqueuer": ("benchmarks.peers.pgqueuer_peer", True),
}
COLUMN = {"faststream-sqlbroker": "sqlbroker", "pgqueuer": "pgqueuer"}


async def run_pairs(
    target: Target,
    peer: str,
    peer_args: dict[str, Any],
    rounds: int,
    results: Results,
    *,
    timeout: float,
) -> None:
    db = target.database
    module, batch = PEERS[peer]
    scenario = "drain-batch" if batch else "drain"
    mine = results.find(ours.SYSTEM, scenario, "msg_per_s", db)
    theirs = results.find(peer, "drain", "msg_per_s", db)
    if not mine or not theirs or not mine.get("value") or not theirs.get("value"):
        results.error(scenario, db, f"paired with {peer}", "needs both drains in this run")
        return
    claims = str(mine["details"]["best_claims"])
    config = theirs["details"].get("best_config")

    async def our_drain() -> float:
        run = await ours.drain_once(
            target.url, int(peer_args["drain_n"]), claims=claims, batch=batch
        )
        if run["problem"]:
            raise RuntimeError(run["problem"])
        return float(run["msg_per_s"])

    async def their_drain() -> float:
        args = {**peer_args, "database": db, "url": target.peer_url,
                "workloads": ["paired_drain"], "config": config}
        out = await run_json_subprocess(module, args, timeout=timeout)
        values = [f["value"] for f in out["figures"] if f["metric"] == PAIRED_DRAIN_METRIC]
        if out["errors"] or not values:
            raise RuntimeError(f"{peer} paired drain: {out['errors'] or 'no figure'}")
        return float(values[0])

    mine_runs, their_runs = [await our_drain()], []
    for _ in range(rounds):
        their_runs.append(await their_drain())
        mine_runs.append(await our_drain())
    # ours over the peer: the inverse of the peer over its two neighbours of ours
    ratios = [
        1 / over_neighbours(their_runs[i], mine_runs[i], mine_runs[i + 1]) for i in range(rounds)
    ]
    results.add(
        ours.SYSTEM, scenario, f"over_paired_{COLUMN[peer]}", db, statistics.median(ratios),
        "x", pairs=ratios, ours=mine_runs, peer=their_runs, claims=claims,
        peer_config=config,
    )
