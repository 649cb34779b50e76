"""Workers sharing a study: who asked which trials (one study attribute per asked batch), and which
running trials are orphans (their worker died on this host, or they are older than stale_after_s)."""
from __future__ import annotations


from dse.store.lock import process_alive

BATCH_ATTR = "dse_batch:"         # study user attribute per asked batch: {worker, host, pid, asked_at, trials}


def askers(ostudy) -> dict:
    """Trial number -> who asked it ({worker, host, pid, asked_at}), from the batch records."""
    who = {}
    records = [v for k, v in ostudy.user_attrs.items() if k.startswith(BATCH_ATTR)]
    for rec in sorted(records, key=lambda r: r.get("asked_at", 0.0)):  # a later adoption wins
        for number in rec.get("trials", ()):
            who[number] = rec
    return who


def is_orphan(t, who: dict, host: str, stale_s: float, now: float) -> bool:
    ua = who.get(t.number, {})
    if ua.get("host") == host and isinstance(ua.get("pid"), int) and not process_alive(ua["pid"]):
        return True
    return now - float(ua.get("asked_at", 0.0)) > stale_s
