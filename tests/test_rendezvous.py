"""The multi-host rendezvous' two ends on loopback (kernel/launch/rendezvous.py serves, engine/distributed/rendezvous.py
asks): it answers as torch's own stores do, only to the key made for the ranks, and it outlives the Python reference
torch drops. tests/test_multihost.py runs it in a real two-host pool and attacks it from the other host."""

from __future__ import annotations

import datetime
import gc
from collections.abc import Iterator

import pytest
import zmq

from jupyter_hvd.kernel.launch.rendezvous import Rendezvous

dist = pytest.importorskip("torch.distributed")
SHORT = datetime.timedelta(seconds=0.3)


@pytest.fixture
def served() -> Iterator[Rendezvous]:
    rendezvous = Rendezvous("127.0.0.1")
    try:
        yield rendezvous
    finally:
        rendezvous.close()


def _ops(store: object) -> list[object]:
    """What a store answers to the calls Gloo, NCCL and torch.distributed make, with TCPStore's edge cases."""
    s: object = store
    said: list[object] = []
    s.set("a", b"\x00\xffbinary")
    said += [s.get("a"), s.check(["a"]), s.check(["a", "b"])]
    said += [s.add("n", 2), s.add("n", -5), s.get("n")]
    said += [s.compare_set("c", b"", b"first"), s.compare_set("c", b"first", b"second"), s.compare_set("c", b"x", b"y")]
    said += [s.compare_set("missing", b"expected", b"z"), s.check(["missing"])]
    said += [s.num_keys(), s.delete_key("a"), s.delete_key("a"), s.num_keys()]
    s.wait(["n", "c"])
    with pytest.raises(dist.DistStoreError):
        s.wait(["never"], SHORT)
    return said


def test_answers_as_torch_stores_do(served: Rendezvous) -> None:
    from jupyter_hvd.engine.distributed.rendezvous import PoolStore

    ours = PoolStore(served.info(), datetime.timedelta(seconds=5))
    # torch's TCPStore, whose place it takes between hosts, on loopback.
    reference = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    assert _ops(ours) == _ops(reference)
    with pytest.raises(dist.DistStoreError, match="did not appear in the pool's rendezvous"):
        PoolStore(served.info(), SHORT).get("never")


def test_torch_keeps_using_it_after_the_last_python_reference(served: Rendezvous) -> None:
    from jupyter_hvd.engine.distributed.rendezvous import PoolStore

    # As in prelude(): torch keeps the store (here a PrefixStore over it), the Python object itself is dropped.
    held = dist.PrefixStore("0", PoolStore(served.info(), datetime.timedelta(seconds=5)))
    gc.collect()
    held.set("k", b"v")
    assert (held.get("k"), held.num_keys(), held.delete_key("k"), held.clone().check(["k"])) == (b"v", 1, True, False)


def test_lets_in_the_ranks_key_only(served: Rendezvous) -> None:
    info = served.info()
    assert info["endpoint"].startswith("tcp://127.0.0.1:")
    ctx = zmq.Context.instance()
    answered = []
    for key_pair in (None, zmq.curve_keypair()):  # no CURVE; a key pair of its own with the server's public key
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if key_pair:
            sock.curve_serverkey, (sock.curve_publickey, sock.curve_secretkey) = (
                info["curve"]["server"].encode(),
                key_pair,
            )
        sock.connect(info["endpoint"])
        sock.send_multipart([b"1", b"num_keys"])
        answered.append(sock.poll(1000))
        sock.close()
    assert answered == [0, 0]
