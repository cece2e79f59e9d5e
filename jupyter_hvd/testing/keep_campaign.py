"""A randomized restart campaign on a real 2-rank pool in a real kernel: what tests/test_keep_campaign.py asserts and
bench/keep_campaign.py reports.

Each cycle keeps a random mix of everyday objects (a module, its optimizer, a scheduler, a GradScaler, a per-rank
sampler, a per-rank counter, a dict, a value that cannot be kept), trains a few epochs with `jupyter_hvd.commit()`
after each (every rank writes a fingerprint of its state at each commit to a file of its own), then meets a random
failure: a crash mid-cell, a crash while a snapshot is written, a crash during the restore, the stop button during
the restore, a setup replay that fails and is then mended. At the end every rank's state must equal its state at one
commit, the same commit on every rank (the last one, or the one before when the crash cut the last one's write
short), and every name that did not come back must be named in what the restart said. Nothing here asserts: every
outcome is counted.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .kernel import Kernel

KINDS = ["crash_mid_cell", "crash_while_written", "crash_during_restore", "stop_during_restore", "replay_fails"]
OBJECTS = ["model", "opt", "sched", "scaler", "sampler", "counter", "notes", "feed"]

# The fingerprint of a rank's kept state (and its random generator), the same code before and after a restart.
FINGERPRINT = """
import hashlib, io, json, os, pickle
def _fp(names):
    h = {}
    for n in names:
        obj = globals()[n]
        if hasattr(obj, "state_dict"):
            buf = io.BytesIO(); torch.save(obj.state_dict(), buf); data = buf.getvalue()
            if n == "opt":
                s = obj.state_dict()
                data = repr((s["param_groups"], {k: {kk: vv.tolist() if hasattr(vv, "tolist") else vv
                    for kk, vv in v.items()} for k, v in s["state"].items()})).encode()
            elif n == "model":
                data = repr({k: v.tolist() for k, v in obj.state_dict().items()}).encode()
        elif n == "sampler":
            data = repr((obj.rank, obj.epoch, list(obj), obj.dataset is dataset)).encode()
        else:
            data = repr(obj).encode()
        h[n] = hashlib.sha1(data).hexdigest()[:12]
    h["rng"] = hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()[:12]
    return h
def _record(index):
    with open(os.path.join(STATE, f"fp-{rank}.jsonl"), "a") as f:
        f.write(json.dumps({"i": index, "fp": _fp(CHECKED)}) + "\\n")
"""


@dataclass
class Cycle:
    """One cycle's draw."""

    number: int
    kind: str
    objects: list[str]
    victim: int
    epochs: int
    crash_epoch: int
    state: Path

    @property
    def checked(self) -> list[str]:
        return [o for o in self.objects if o != "feed"]


@dataclass
class Outcome:
    cycles: int = 0
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    silent: list[str] = field(default_factory=list)  # a state that differs with nothing said: the defect
    errors: list[str] = field(default_factory=list)  # a cell that should have worked and did not
    seconds: float = 0.0

    def count(self, kind: str, what: str) -> None:
        self.by_kind.setdefault(kind, {}).setdefault(what, 0)
        self.by_kind[kind][what] += 1


def _setup(c: Cycle) -> str:
    o = set(c.objects)
    lines = [
        "%%hvd --setup",
        "import os, time, torch.nn.functional as F",
        f"STATE = {str(c.state)!r}",
        f"CHECKED = {c.checked!r}",
        "if os.path.exists(os.path.join(STATE, 'broken')):\n    raise RuntimeError('the data is not there')",
        "torch.manual_seed(1)",
        "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))",
        "opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),"
        " named_parameters=model.named_parameters())",
        "hvd.broadcast_parameters(model.state_dict(), root_rank=0)",
        "X = torch.randn(64, 8, generator=torch.Generator().manual_seed(7 + rank)); Y = X.sum(1, keepdim=True)",
    ]
    if "sched" in o:
        lines.append("sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)")
    if "scaler" in o:
        lines.append("scaler = torch.amp.GradScaler('cpu', init_scale=1024.0)")
    if "sampler" in o:
        lines += [
            "from torch.utils.data import DistributedSampler, TensorDataset",
            "dataset = TensorDataset(torch.arange(16.0))",
            "sampler = DistributedSampler(dataset, num_replicas=size, rank=rank, shuffle=True, seed=3)",
        ]
    if "counter" in o:
        lines.append("counter = 0")
    if "notes" in o:
        lines.append("notes = {'rank': rank, 'losses': []}")
    if "feed" in o:
        lines.append("feed = (i for i in range(10**6))")
    if c.kind == "crash_during_restore":
        lines += [
            "class Bomb:",
            "    def __setstate__(self, state):",
            "        import os, signal",
            "        self.__dict__.update(state)",
            "        marker = os.path.join(STATE, 'bomb-went-off')",
            "        if not os.path.exists(marker):",
            "            open(marker, 'w').close()",
            "            os.kill(os.getpid(), signal.SIGKILL)",
            "bomb = Bomb(); bomb.n = 0",
        ]
    if c.kind == "stop_during_restore":
        lines += [
            "class Slow:",
            "    def __setstate__(self, state):",
            "        self.__dict__.update(state)",
            "        deadline = time.monotonic() + 30",
            "        while os.path.exists(os.path.join(STATE, 'slow')) and time.monotonic() < deadline:",
            "            time.sleep(0.05)",
            "slow = Slow(); slow.n = 0",
        ]
    return "\n".join(lines) + "\n" + FINGERPRINT


def _train(c: Cycle) -> str:
    o = set(c.objects)
    body = [
        "%%hvd",
        "import jupyter_hvd, os, signal, time",
        f"for epoch in range({c.epochs}):",
        "    for i in range(0, 64, 16):",
        "        opt.zero_grad()",
        "        loss = F.mse_loss(model(X[i:i + 16]), Y[i:i + 16])",
        "        loss.backward()",
        "        opt.step()",
    ]
    if "sched" in o:
        body.append("    sched.step()")
    if "scaler" in o:
        body.append("    scaler.scale(torch.ones(1)); scaler.update(scaler.get_scale() / 2)")
    if "sampler" in o:
        body.append("    sampler.set_epoch(epoch + 1)")
    if "counter" in o:
        body.append("    counter += rank + 1")
    if "notes" in o:
        body.append("    notes['losses'].append(round(loss.item(), 6))")
    if c.kind == "crash_during_restore":
        body.append("    bomb.n += 1")
    if c.kind == "stop_during_restore":
        body.append("    slow.n += 1")
    body += ["    jupyter_hvd.commit()", "    _record(epoch + 1)"]
    if c.kind == "crash_mid_cell":
        body.append(f"    if epoch == {c.crash_epoch}:\n        time.sleep(1.0)  # every write is done")
        body.append(f"        if rank == {c.victim}:\n            os.kill(os.getpid(), signal.SIGKILL)")
    if c.kind == "crash_while_written":
        body.append(
            f"    if epoch == {c.crash_epoch} and rank == {c.victim}:\n        os.kill(os.getpid(), signal.SIGKILL)"
        )
    body.append("    time.sleep(0.05)")
    return "\n".join(body) + "\n"


def _history(c: Cycle, rank: int) -> dict[int, dict[str, str]]:
    path = c.state / f"fp-{rank}.jsonl"
    out = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        record = json.loads(line)
        out[record["i"]] = record["fp"]
    return out


def _now(k: Kernel, c: Cycle) -> list[dict[str, str]] | str:
    """Every rank's fingerprint now (or why it could not be read)."""
    r = k.run(f"%%hvd\n_now = json.dumps(_fp({c.checked!r}))", timeout=120)
    if r.status != "ok":
        return r.error_text[-400:]
    found = []
    for rank in (0, 1):
        got = k.run(f"%hvd_pull _now --rank {rank}\nprint('@@', _now)")
        if got.status != "ok" or "@@ " not in got.stdout:
            return got.error_text[-400:]
        found.append(json.loads(got.stdout.split("@@ ", 1)[1]))
    return found


def _judge(c: Cycle, k: Kernel, said: str, out: Outcome, allowed: list[int]) -> None:
    """Every rank at the same commit (one of `allowed`), names not restored named, or a silent difference."""
    now = _now(k, c)
    if isinstance(now, str):
        out.errors.append(f"cycle {c.number} ({c.kind}): the state could not be read: {now}")
        out.count(c.kind, "error")
        return
    histories = [_history(c, r) for r in (0, 1)]
    named = {
        n for n in c.objects if f"not restored: {n}" in said or re.search(rf"\b{n}\b[^;]*not in the snapshot", said)
    }
    for index in allowed:
        if all(index in histories[r] for r in (0, 1)):
            differ = [
                (r, n)
                for r in (0, 1)
                for n, v in histories[r][index].items()
                if now[r].get(n) != v and n not in named and n != "rng"
            ]
            rng_differs = any(now[r].get("rng") != histories[r][index].get("rng") for r in (0, 1))
            if not differ and not (rng_differs and not named):
                if "feed" in c.objects and "feed" not in named:
                    out.silent.append(f"cycle {c.number} ({c.kind}): feed was not restored and not named: {said}")
                    out.count(c.kind, "silent")
                    return
                out.count(c.kind, "as committed" if index == allowed[0] else "as the commit before")
                return
    what = f"cycle {c.number} ({c.kind}, {c.objects}, victim {c.victim})"
    out.silent.append(f"{what}: the state equals no commit in {allowed}; said: {said}")
    out.count(c.kind, "silent")


def _interrupt_after(k: Kernel, seconds: float) -> Any:
    def start(_result: Any) -> None:
        threading.Timer(seconds, k.km.interrupt_kernel).start()

    return start


def campaign(k: Kernel, cycles: int, seed: int, state: Path) -> Outcome:
    """Run `cycles` cycles on the pool of kernel `k` (started with 2 ranks)."""
    rng = random.Random(seed)
    out = Outcome()
    t0 = time.monotonic()
    for number in range(cycles):
        kind = KINDS[number % len(KINDS)] if number < len(KINDS) else rng.choice(KINDS)
        objects = ["model", "opt"] + [o for o in OBJECTS[2:] if rng.random() < 0.5]
        if rng.random() < 0.2:
            objects.remove("opt")
        epochs = rng.randint(2, 4)
        c = Cycle(number, kind, objects, rng.randrange(2), epochs, rng.randrange(epochs), state / f"cycle-{number}")
        c.state.mkdir(parents=True)
        out.cycles += 1
        try:
            _cycle(k, c, out)
        except Exception as exc:  # a wait that did not end, a kernel that broke: counted, the campaign goes on
            out.errors.append(f"cycle {number} ({kind}): {type(exc).__name__}: {exc}")
            out.count(kind, "error")
    out.seconds = time.monotonic() - t0
    return out


def _cycle(k: Kernel, c: Cycle, out: Outcome) -> None:
    kept = [*c.objects, *(["bomb"] if c.kind == "crash_during_restore" else [])]
    kept += ["slow"] if c.kind == "stop_during_restore" else []
    for code in ("%hvd_setup --clear", "%hvd_keep --forget " + " ".join([*OBJECTS, "bomb", "slow"])):
        k.run(code)
    r = k.run(_setup(c), timeout=120)
    if r.status != "ok":
        out.errors.append(f"cycle {c.number}: setup failed: {r.error_text[-400:]}")
        out.count(c.kind, "error")
        return
    k.run("%hvd_keep " + " ".join(kept))
    k.run("%%hvd\n_record(0)")
    trained = k.run(_train(c), timeout=180)
    last = c.epochs
    if (
        c.kind.startswith("crash_")
        and c.kind != "crash_during_restore"
        and "died on signal 9" not in trained.error_text
    ):
        out.errors.append(f"cycle {c.number}: the crash did not happen as drawn: {trained.error_text[-600:]}")
        out.count(c.kind, "error")
        return
    if c.kind == "crash_mid_cell":
        _judge(c, k, trained.error_text, out, [c.crash_epoch + 1])
        return
    if c.kind == "crash_while_written":
        _judge(c, k, trained.error_text, out, [c.crash_epoch + 1, c.crash_epoch])
        return
    if trained.status != "ok":
        out.errors.append(f"cycle {c.number}: training failed: {trained.error_text[-400:]}")
        out.count(c.kind, "error")
        return
    if c.kind == "crash_during_restore":
        r = k.run("%hvd_restart", timeout=240)
        said = r.stdout + r.error_text
        if not (c.state / "bomb-went-off").exists():
            out.errors.append(f"cycle {c.number}: the restore never reached the bomb: {said}")
        _judge(c, k, said, out, [last])
        return
    if c.kind == "stop_during_restore":
        (c.state / "slow").touch()
        r = k.run("%hvd_restart", timeout=240, on_start=_interrupt_after(k, 8.0))
        said = r.stdout + r.error_text
        (c.state / "slow").unlink()
        if r.status == "ok" or "The restart was interrupted" not in said:
            out.errors.append(f"cycle {c.number}: the stop button did not end the restart as said: {said[-400:]}")
        r = k.run("%hvd_restart", timeout=240)
        _judge(c, k, r.stdout + r.error_text, out, [last])
        return
    if c.kind == "replay_fails":
        (c.state / "broken").touch()
        r = k.run("%hvd_restart", timeout=240)
        if "failed on replay" not in r.stdout + r.error_text:
            out.errors.append(f"cycle {c.number}: the failed replay was not named: {r.stdout + r.error_text}")
        k.run("%%hvd\ntry:\n    counter = -1\nexcept NameError:\n    pass")  # cells after it must not overwrite it
        (c.state / "broken").unlink()
        r = k.run("%hvd_restart", timeout=240)
        _judge(c, k, r.stdout + r.error_text, out, [last])
