"""jupyter_hvd/compat.py: the Horovod and ipykernel internals jupyter-hvd uses say clearly when a version lacks them."""

from __future__ import annotations

import pytest

from jupyter_hvd import compat


def test_the_installed_versions_are_supported():
    assert compat.check_horovod() == ""
    assert compat.check_ipykernel() == ""


def test_another_horovod_version_is_named_with_what_to_install(monkeypatch):
    monkeypatch.setattr(compat, "_version", lambda package: "0.29.0")
    warning = compat.check_horovod()
    assert "finds 0.29.0" in warning and "0.28.x" in warning and "horovod==0.28.1" in warning


def test_a_missing_internal_is_named(monkeypatch):
    from horovod.torch import mpi_ops

    monkeypatch.delattr(mpi_ops, "_handle_map")
    with pytest.raises(compat.CompatError, match=r"has no mpi_ops\._handle_map, which jupyter-hvd uses to know"):
        compat.handles_in_flight()


def test_the_flush_interval_of_a_stream_that_has_none_is_left_alone():
    import io

    stream = io.StringIO()
    assert compat.flush_interval(stream) is None
    compat.set_flush_interval(stream, 0.02)
    assert not hasattr(stream, "flush_interval")


def test_a_query_that_horovod_stops_under_is_answered_from_the_rest():
    """hvd.rank() on a rank whose Horovod another rank stops between the check and the call (this rank voted to rest
    meanwhile): the remembered answer, not Horovod's "not initialised" (-1, which hvd.rank() raises on)."""
    stopping = []

    class Library:
        def horovod_rank(self) -> int:
            stopping.append(True)  # the other rank's stop lands during the call
            return -1

    answering = compat._Answering(Library(), lambda name, args: 1 if stopping else None)
    assert answering.horovod_rank() == 1
    awake = compat._Answering(Library(), lambda name, args: None)  # awake all along: Horovod's own answer
    assert awake.horovod_rank() == -1
