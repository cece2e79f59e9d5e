"""Signing the cell channel's messages: jupyter-hvd's own (HMAC-SHA256 over a pickle, jupyter_hvd/wire.py) against
jupyter_client's Session (the same HMAC, with its message dict, date header and replay record).

    python bench/signing.py [--n 20000]

Times packing one typical output message, and packing plus reading it back, per message; an empty 2-rank cell
sends 4 messages. Prints a table and writes bench/results/signing.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report
from jupyter_client.session import Session

from jupyter_hvd import wire


def per_message_us(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    args = parser.parse_args()
    key = os.urandom(32)
    message = wire.Output(0, 5, "stdout", "epoch 1 loss=0.123\n")
    session = Session(key=key, packer="pickle", unpacker="pickle")
    content = {"rank": 0, "cell": 5, "stream": "stdout", "text": "epoch 1 loss=0.123\n"}

    def session_pack() -> list[bytes]:
        return session.serialize(session.msg("stream", content))

    def session_round() -> object:
        _, frames = session.feed_identities(session_pack(), copy=True)
        return session.deserialize(frames, content=True)

    rows = []
    for name, pack, both in (
        (
            "jupyter-hvd wire.pack / unpack",
            lambda: wire.pack(key, message),
            lambda: wire.unpack(key, wire.pack(key, message)),
        ),
        ("jupyter_client Session", session_pack, session_round),
    ):
        best_pack = min(per_message_us(pack, args.n) for _ in range(3))
        best_both = min(per_message_us(both, args.n) for _ in range(3))
        rows.append(
            {"signing": name, "pack_us": best_pack, "pack_and_read_us": best_both, "empty_cell_us": 4 * best_both}
        )
    report("signing", rows, ["signing", "pack_us", "pack_and_read_us", "empty_cell_us"])


if __name__ == "__main__":
    main()
