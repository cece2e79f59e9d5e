"""The pool listens only where its owner can reach, keeps its secrets owner-readable, refuses unsigned messages, and
caps what a rank can send."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import ipyparallel as ipp
import psutil
import pytest
from conftest import pool_processes


def test_the_pool_listens_on_no_tcp_port_only_on_sockets_in_its_private_directory(pool):
    """A pool on one host: the controller and the cell channel bind ipc sockets in the pool's 0700 directory, where
    no other user can connect; no TCP port takes anyone's junk (but Open MPI's launcher's, see README)."""
    tcp, unix = [], set()
    for p in pool_processes(pool.id):
        if p.name() in ("prterun", "mpiexec", "prted"):
            continue  # Open MPI's launcher daemon: its out-of-band channel is Open MPI's own (see README)
        for c in p.net_connections(kind="inet"):
            if c.status == psutil.CONN_LISTEN:
                tcp.append((p.name(), c.laddr))
        unix |= {c.laddr for c in p.net_connections(kind="unix") if c.laddr}
    assert not tcp, tcp
    directory = str(pool.directory)
    controller = {path for path in unix if path.startswith(directory + "/ipp")}
    assert len(controller) >= 5, unix  # registration, mux, task, control, iopub, ...
    assert {str(pool.directory / "requests"), str(pool.directory / "events")} <= {
        info[6:] for info in (pool.channel.info()["requests"], pool.channel.info()["events"])
    }
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700


def test_connection_and_state_files_are_owner_only(pool):
    security = Path(pool.launcher.cluster.profile_dir) / "security"
    files = list(security.glob(f"ipcontroller-{pool.id}-*.json"))
    assert {f.name.rsplit("-", 1)[-1] for f in files} >= {"client.json", "engine.json"}
    for f in [*files, pool.file.path]:
        assert stat.S_IMODE(os.stat(f).st_mode) & 0o077 == 0, f"{f} is readable by others"


def test_open_mpis_session_files_are_in_the_pools_private_directory(pool):
    mpiexec = [p["pid"] for p in pool.launcher.processes() if p["role"] == "mpiexec"]
    assert mpiexec, pool.launcher.processes()
    # Not in /tmp, where another pool's launcher works beside them and a killed mpiexec leaves them behind.
    assert not Path(f"/tmp/ompi.{mpiexec[0]}").exists()
    assert (pool.directory / f"ompi.{mpiexec[0]}").is_dir()


def client_file(pool, tmp_path: Path, key: str | None) -> Path:
    src = Path(pool.launcher.cluster.profile_dir) / "security" / f"ipcontroller-{pool.id}-client.json"
    info = json.loads(src.read_text())
    if key is not None:
        info["key"] = key
    dst = tmp_path / "client.json"
    dst.write_text(json.dumps(info))
    return dst


def test_messages_need_the_pool_key(pool, tmp_path):
    good = ipp.Client(str(client_file(pool, tmp_path, None)), timeout=10)
    try:
        assert len(good.ids) >= 2  # the same file with the right key works
    finally:
        good.close()
    with pytest.raises((TimeoutError, OSError)):
        bad = ipp.Client(str(client_file(pool, tmp_path, "0" * 32)), timeout=5)
        bad.close()


def test_the_cell_channel_is_private_and_drops_what_the_pool_key_did_not_sign(ip, pool):
    import zmq

    from jupyter_hvd import wire

    info = pool.channel.info()
    directory = pool.directory
    # A pool on this host: ipc sockets in its private directory, which only this user can enter.
    assert info["requests"] == f"ipc://{directory}/requests" and info["events"] == f"ipc://{directory}/events"
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert not info["curve"]
    forger = zmq.Context.instance().socket(zmq.PUSH)
    forger.setsockopt(zmq.LINGER, 0)
    forger.connect(info["events"])
    # A sender of the pool's own: a message with a rank's identity and a higher number would make that rank's own
    # next messages look replayed (only the pool's key can sign one, so no one else can).
    identity = b"test-sender"
    before = dict(pool.channel.dropped)
    try:
        with pool.lock:
            pool.channel._senders[identity] = 0
            pool.channel.drain()
            # A fake "rank 0 finished, all fine" under another key, junk, a real message replayed, then a real one:
            # only the real one arrives.
            forger.send_multipart(wire.pack(os.urandom(32), wire.CellEnded(0, 1, wire.CellRecord(rank=0, ok=True))))
            forger.send_multipart([b"not", b"signed", b"at all"])
            real = wire.pack(pool.channel.key, wire.Pong(0, -1), identity, 1)
            forger.send_multipart(real)
            forger.send_multipart(real)
            event = pool.channel.receive(10)
            while isinstance(event, (wire.Rested, wire.Hello)):  # the idle rest's answers may come first
                event = pool.channel.receive(10)
            assert event == wire.Pong(0, -1)
            assert pool.channel.receive(0.5) is None
            pool.channel.drain()
            del pool.channel._senders[identity]
        dropped = {k: pool.channel.dropped[k] - before.get(k, 0) for k in ("unsigned", "replayed")}
        assert dropped == {"unsigned": 2, "replayed": 1}, dropped
    finally:
        forger.close()
    ip.run_cell_magic("hvd", "", "after_forgery = rank + 10")  # the pool still runs cells
    ip.run_line_magic("hvd_pull", "after_forgery --rank 1")
    assert ip.user_ns["after_forgery"] == 11


# ---- caps: nothing a rank (or a typo) sends can exhaust the kernel, and each cap says so -------------------------


def test_np_is_bounded_by_the_slots_known():
    from jupyter_hvd.kernel.launch.options import CPU_RANKS_PER_CORE, HvdPool

    limit = (os.cpu_count() or 1) * CPU_RANKS_PER_CORE
    with pytest.raises(ValueError, match=rf"-np 10000 asks for more ranks than this host runs: .* = {limit} ranks"):
        HvdPool(np=10000).validate()
    HvdPool(np=limit).validate()
    HvdPool(np=10000, oversubscribe=True).validate()  # said on purpose
    with pytest.raises(ValueError, match="more ranks than the 2 slots"):
        HvdPool(np=3, hosts="a:1,b:1").validate()


def test_one_huge_write_is_cut_to_the_cells_budget(ip, pool, capsys):
    ip.run_cell_magic("hvd", "--log-lines 10", "print('x' * 20_000_000)\nprint('last')")
    out = capsys.readouterr().out
    assert len(out) < 10 * 400 + 2000, f"{len(out)} characters reached the notebook"
    assert "more lines were not shown" in out and "last" in out


def test_big_output_arrives_whole_in_pieces_below_the_message_limit(ip, pool, capsys):
    ip.run_cell_magic("hvd", "--log-lines 30000", "print('y' * 10_000_000)")  # 10 MB: above one message's 8 MB
    assert capsys.readouterr().out.count("y") == 10_000_000


def test_a_big_value_is_shown_by_its_repr(ip, pool, capsys):
    ip.run_cell_magic("hvd", "", "b'z' * 20_000_000")
    out = capsys.readouterr().out
    assert "the value is 19 MB: shown by its repr; %hvd_pull fetches big values" in out
    assert "more characters]" in out and len(out) < 200_000


def test_a_huge_error_message_is_cut(ip, pool):
    from jupyter_hvd.kernel.errors import CellFailed

    with pytest.raises(CellFailed) as e:
        ip.run_cell_magic("hvd", "", "raise ValueError('w' * 10_000_000)")
    assert "more characters]" in str(e.value) and len(str(e.value)) < 1_000_000


def test_a_big_timeline_is_not_read_into_the_kernel(ip, pool, tmp_path, capsys, monkeypatch):
    from jupyter_hvd.kernel.diagnose import timeline

    monkeypatch.setattr(timeline, "READ_MAX_BYTES", 100)
    monkeypatch.setattr(timeline, "load_trace", lambda text: pytest.fail("the trace was read"))
    ip.run_cell_magic("hvd", f"--timeline {tmp_path}", "hvd.allreduce(torch.ones(3), name='t')")
    out = capsys.readouterr().out
    assert "more than the 0 MB the notebook summarises: open" in out and "ui.perfetto.dev" in out


def test_a_pull_bigger_than_the_free_memory_is_refused(ip, pool, monkeypatch):
    from collections import namedtuple

    from IPython.core.error import UsageError

    from jupyter_hvd.kernel import transfer

    ip.run_cell_magic("hvd", "", "big = torch.zeros(1_000_000)")  # 4 MB
    memory = namedtuple("memory", "available")
    monkeypatch.setattr(transfer.psutil, "virtual_memory", lambda: memory(6 * 2**20))
    with pytest.raises(UsageError, match=r"big on rank 0 is 3.8 MB, and this machine has 6.0 MB free"):
        ip.run_line_magic("hvd_pull", "big")
    assert "big" not in ip.user_ns
