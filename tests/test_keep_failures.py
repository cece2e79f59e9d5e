"""Restores that cannot half-happen: a crash during the restore comes back again from the same snapshot, the stop
button during %hvd_restart ends it with one line saying what state the pool is in, an interrupt during the restore
leaves every rank at the state the setup cells built (never a mix), and a snapshot cut short by a crash leaves no
half-written file behind.

Real kernels with real 2-rank CPU pools.
"""

from __future__ import annotations

import threading
import time

import pytest
from conftest import Kernel, new_kernel, wait_until_gone

START = "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2"


@pytest.fixture
def kernel():
    k = new_kernel()
    yield k
    k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []


def interrupt_after(k: Kernel, seconds: float):
    """on_start callback for Kernel.run: press the stop button `seconds` after the cell was sent."""

    def start(_result) -> None:
        threading.Timer(seconds, k.km.interrupt_kernel).start()

    return start


def interrupt_while(k: Kernel, doing: str, after: float = 1.0):
    """on_start callback for Kernel.run: press the stop button `after` seconds into the kernel's pool saying (in its
    pool file, as the sidebar reads it) that it does `doing`: a moment a fixed delay misses on a loaded machine."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for pool in k.pools():
                if doing in str(pool.get("cell") or ""):
                    time.sleep(after)
                    k.km.interrupt_kernel()
                    return
            time.sleep(0.05)

    def start(_result) -> None:
        threading.Thread(target=watch, daemon=True).start()

    return start


def weights(k: Kernel) -> list[str]:
    assert k.run("%%hvd\nw = round(model.weight.sum().item(), 5)").status == "ok"
    return [k.run(f"%hvd_pull w --rank {r}\nprint('@@', w)").stdout.split("@@ ")[1].strip() for r in (0, 1)]


def test_a_crash_during_the_restore_restores_again_from_the_same_snapshot(kernel, tmp_path):
    k = kernel
    marker = tmp_path / "crashed-once"
    assert k.run(START, timeout=120).status == "ok"
    # The first rank to rebuild the kept Bomb dies (SIGKILL) in the middle of the restore; the second try succeeds.
    setup = f"""%%hvd --setup
class Bomb:
    def __setstate__(self, state):
        import os, signal
        self.__dict__.update(state)
        if not os.path.exists({str(marker)!r}):
            open({str(marker)!r}, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
model = torch.nn.Linear(3, 1)
bomb = Bomb()
bomb.n = 0
"""
    assert k.run(setup).status == "ok"
    assert k.run("%hvd_keep model bomb").status == "ok"
    train = "%%hvd\nwith torch.no_grad():\n    model.weight += 1\nbomb.n += 1"
    assert k.run(train).status == "ok"
    before = weights(k)
    r = k.run("%hvd_restart", timeout=180)
    assert r.status == "ok", r.error_text
    assert marker.exists(), "the restore did not reach the kept value"
    assert "restored model, bomb" in r.stdout, r.stdout
    assert weights(k) == before
    r = k.run("%%hvd\nprint('n', bomb.n)")
    assert "n 1" in r.stdout, r.stdout + r.error_text
    # Snapshots go on after it: the new engines were told what to keep.
    assert k.run(train).status == "ok"
    listing = k.run("%hvd_snapshots").stdout
    assert listing.count("model, bomb") >= 2, listing


def test_the_stop_button_during_a_restart_says_what_state_the_pool_is_in(kernel, tmp_path):
    k = kernel
    slow = tmp_path / "slow"  # while it exists, the setup cell's replay takes 10 s
    assert k.run(START, timeout=120).status == "ok"
    setup = "%%hvd --setup\nimport os, time\nmodel = torch.nn.Linear(3, 1)\n"
    setup += f"time.sleep(10 if os.path.exists({str(slow)!r}) else 0)"
    assert k.run(setup).status == "ok"
    assert k.run("%hvd_keep model").status == "ok"
    assert k.run("%%hvd\nwith torch.no_grad():\n    model.weight += 1").status == "ok"
    before = weights(k)
    slow.touch()
    r = k.run("%hvd_restart", timeout=120, on_start=interrupt_after(k, 6.0))
    assert r.status == "error", r.stdout
    said = r.error_text
    assert "Traceback" not in said and "KeyboardInterrupt" not in said, said
    assert "The restart was interrupted" in said and "%hvd_restart" in said, said
    if "the pool is stopped" in said:  # the engines were still starting (a slow machine)
        assert "stopped" in k.run("%hvd_status").stdout
    else:
        assert "while replaying setup entry 1 of 1" in said, said
        r = k.run("%%hvd\nprint('alive', hvd.allreduce(torch.ones(1), op=hvd.Sum).item())")
        assert r.status == "ok" and "alive 2.0" in r.stdout, r.stdout + r.error_text
    slow.unlink()
    r = k.run("%hvd_restart", timeout=180)
    assert r.status == "ok" and "restored model" in r.stdout, r.stdout + r.error_text
    assert weights(k) == before


def test_an_interrupt_during_the_restore_leaves_every_rank_as_the_setup_cells_built_it(kernel):
    k = kernel
    assert k.run(START, timeout=120).status == "ok"
    setup = """%%hvd --setup
import time
class Slow:
    def __setstate__(self, state):
        self.__dict__.update(state)
        time.sleep(self.delay)
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
slow = Slow()
slow.delay = 0
"""
    assert k.run(setup).status == "ok"
    built = weights(k)
    assert k.run("%hvd_keep model slow").status == "ok"
    assert k.run("%%hvd\nwith torch.no_grad():\n    model.weight += 1\nslow.delay = 15").status == "ok"
    assert weights(k) != built
    # The snapshot's `slow` takes 15 s to unpickle: the stop button lands while the ranks read the snapshot.
    r = k.run("%hvd_restart", timeout=120, on_start=interrupt_while(k, "reading the snapshot"))
    assert r.status == "error", r.stdout
    assert "The restart was interrupted while restoring model, slow" in r.error_text, r.error_text
    # Nothing of the snapshot was put in place, on any rank.
    assert weights(k) == built
    r = k.run("%%hvd\nprint('delay', slow.delay)")
    assert r.stdout.count("delay 0") == 1, r.stdout


def test_a_snapshot_cut_short_by_a_crash_leaves_no_half_written_file(kernel):
    k = kernel
    assert k.run(START, timeout=120).status == "ok"
    setup = "%%hvd --setup\nbig = torch.nn.Linear(4000, 4000)\n"  # 64 MB: its write takes a while
    assert k.run(setup).status == "ok"
    assert k.run("%hvd_keep big").status == "ok"
    crash = (
        "%%hvd\nimport jupyter_hvd, os, signal\nwith torch.no_grad():\n    big.weight += 1\n"
        "jupyter_hvd.commit()\nif rank == 0:\n    os.kill(os.getpid(), signal.SIGKILL)\nimport time; time.sleep(5)"
    )
    r = k.run(crash, timeout=120)
    assert r.status == "error" and "died on signal 9" in r.error_text, r.error_text
    find = (
        "from jupyter_hvd.kernel.owner import current\nleft = sorted(str(p) for p in (current().directory / 'kept')"
        ".rglob('.tmp-*'))\nprint('@@', left)"
    )
    deadline = time.monotonic() + 10
    left = ""
    while time.monotonic() < deadline:
        left = k.run(find).stdout
        if "@@ []" in left:
            break
        time.sleep(0.5)
    assert "@@ []" in left, left
