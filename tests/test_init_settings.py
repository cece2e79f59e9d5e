"""What a cell's hvd.init() does with the HOROVOD_* variables the cell set (pure logic:
engine/horovod/init_settings.py)."""

from __future__ import annotations

from jupyter_hvd.engine.horovod.init_settings import plan, start_env


def test_a_variable_horovod_reads_at_its_start_is_applied():
    p = plan({"HOROVOD_STALL_CHECK_TIME_SECONDS": "10"}, {"HOROVOD_STALL_CHECK_TIME_SECONDS": "5"})
    assert p.applied == {"HOROVOD_STALL_CHECK_TIME_SECONDS": ("10", "5")} and not p.named
    assert p.start_with == {"HOROVOD_STALL_CHECK_TIME_SECONDS": "5"}


def test_a_fixed_tuning_is_named_with_its_start_option_and_kept():
    p = plan({}, {"HOROVOD_CYCLE_TIME": "5", "HOROVOD_FUSION_THRESHOLD": "1024"})
    assert not p.applied and p.start_with == {}
    assert len(p.named) == 1 and "--cycle-time MS, --fusion-mb MB" in p.named[0] and "segfault" in p.named[0]


def test_one_way_switches_and_refused_values_are_named():
    p = plan(
        {"HOROVOD_DISABLE_GROUP_FUSION": "1", "HOROVOD_BATCH_D2D_MEMCOPIES": "0"},
        {"HOROVOD_CONTROLLER": "Gloo", "HOROVOD_LOG_LEVEL": "debug"},
    )
    assert not p.applied
    said = " ".join(p.named)
    for words in ("HOROVOD_DISABLE_GROUP_FUSION stays 1", "HOROVOD_BATCH_D2D_MEMCOPIES stays 0", "CONTROLLER=Gloo"):
        assert words in said, said
    assert "HOROVOD_LOG_LEVEL is read once per process" in said
    assert p.start_with == {"HOROVOD_DISABLE_GROUP_FUSION": "1", "HOROVOD_BATCH_D2D_MEMCOPIES": "0"}
    # Switching them on is applied.
    assert plan({}, {"HOROVOD_DISABLE_GROUP_FUSION": "1"}).applied == {"HOROVOD_DISABLE_GROUP_FUSION": (None, "1")}


def test_a_setting_removed_starts_with_horovods_default():
    p = plan({"HOROVOD_CACHE_CAPACITY": "0"}, {})
    assert p.applied == {"HOROVOD_CACHE_CAPACITY": ("0", None)} and p.start_with == {}
    assert start_env(p.start_with)["HOROVOD_CACHE_CAPACITY"] == "1024"
    assert start_env({"HOROVOD_CACHE_CAPACITY": "0"})["HOROVOD_CACHE_CAPACITY"] == "0"
