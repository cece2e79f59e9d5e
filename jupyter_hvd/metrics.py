"""Metrics read from the lines a training script prints: `loss=0.123`, `Loss: 0.123`, `Epoch 3: acc=0.9`...

Pure logic, used in the kernel on rank 0's output, so that typical Horovod tutorial scripts plot with no change.
A line gives numbers by name, plus where it is in training (step, epoch, total) when the line says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)"
# `name=value`, `name: value`, `'name': value` (a printed dict), `name = tensor(value, ...)` (a printed tensor).
_PAIR = re.compile(
    r"(?P<key>['\"]?[A-Za-z][A-Za-z0-9_./ -]{0,40}?['\"]?)\s*(?P<sep>[=:])\s*"
    r"(?:tensor\()?\[?(?P<value>" + _NUMBER + r")\]?(?P<pct>%)?(?![\w.:/-])",
    re.IGNORECASE,
)
# Where in training: `Epoch 3`, `Epoch: 3`, `Epoch [3/10]`, `Step #100`, `Iter 5`, `step=7`, `[Epoch 2]`.
_POSITION = re.compile(
    r"\b(?P<key>epoch|global[_ ]step|step|iteration|iter|batch|it)\b['\"]?\s*[:=#]?\s*\[?\s*#?(?P<value>\d+(?:\.\d+)?)"
    r"(?:\s*/\s*(?P<total>\d+))?",
    re.IGNORECASE,
)
# A tqdm bar: ` 37/100 [00:01<00:02, 30.1it/s, loss=0.5]`.
_TQDM = re.compile(r"\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[")
# Keras' progress: `12/469 [===>....] - ETA: 3s - loss: 0.5` (Keras 2), `12/469 ━━━━ 3s 9ms/step - loss: 0.5` (Keras 3),
# `469/469 - 5s - loss: 0.3` (verbose=2): batches of the current epoch.
_KERAS = re.compile(r"^\s*(?P<n>\d+)/(?P<total>\d+)\s+(?:\[[=>.]*\]|[━─]|- \d)")
# A tqdm bar's percentage after its description (`train:  37%|███▋ |`) is progress, not a metric named `train`.
_BAR_PERCENT = re.compile(r"\s*%?\s*\|")
_LABEL = re.compile(r"['\"]?[A-Za-z][A-Za-z0-9_./-]*(?: [A-Za-z][A-Za-z0-9_./-]*)*['\"]?$")
# PyTorch's and Horovod's MNIST examples: `Train Epoch: 1 [640/60000 (1%)]` is 1% into epoch 1.
_EPOCH_PROGRESS = re.compile(r"\[\s*(?P<n>\d+)\s*/\s*(?P<total>\d+)\s*\(\s*\d+(?:\.\d+)?%\s*\)\s*\]")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A context word at the start of a line names the split a metric belongs to: `Test set: Average loss: 0.1`.
_SPLIT = re.compile(r"^\W*(?P<split>test|val|valid|validation|eval|evaluation)\b", re.IGNORECASE)
_SPLIT_PREFIX = {"valid": "val", "validation": "val", "evaluation": "eval"}
# Words that describe a number rather than name a metric: `Average loss` is `loss`.
_FILLER = {"average", "avg", "mean", "running", "set", "the", "current", "batch", "epoch"}
_POSITION_KEYS = {"epoch", "step", "global_step", "iter", "iteration", "batch", "it"}
_NOT_METRICS = {"rank", "local_rank", "size", "world_size", "v_num", "pid", "seed", "version", "gpu", "device"}


@dataclass
class ParsedLine:
    """The numbers one printed line gives: metrics by name, and its position in training where it says."""

    values: dict[str, float] = field(default_factory=dict)
    step: float | None = None
    epoch: float | None = None
    total: int | None = None

    def __bool__(self) -> bool:
        return bool(self.values)


def metric_name(key: str, split: str | None = None) -> str:
    """A printed label in the form metrics are plotted under: `Average loss` -> `loss`, `Val Acc` -> `val_acc`."""
    words = [w for w in re.split(r"[^A-Za-z0-9]+", key.strip("'\" ").lower()) if w]
    kept = [w for w in words if w not in _FILLER] or words[-1:]
    name = "_".join(kept)
    if split and not name.startswith(split):
        name = f"{split}_{name}"
    return name


def parse_line(line: str) -> ParsedLine:
    """Read metrics and the training position from one printed line (ANSI colours and tqdm bars allowed)."""
    text = _ANSI.sub("", line)
    out = ParsedLine()
    split_match = _SPLIT.match(text)
    split = _SPLIT_PREFIX.get(split_match["split"].lower(), split_match["split"].lower()) if split_match else None
    for m in _POSITION.finditer(text):
        key = m["key"].lower().replace(" ", "_")
        value = float(m["value"])
        if key == "epoch":
            if out.epoch is None:
                out.epoch = value
        elif out.step is None:
            out.step = value
            if m["total"]:
                out.total = int(m["total"])
    progress = _EPOCH_PROGRESS.search(text)
    if progress and out.epoch is not None and int(progress["total"]) > 0:
        out.epoch += int(progress["n"]) / int(progress["total"])
    bar = _TQDM.search(text) or _KERAS.match(text)
    if bar and out.step is None:
        out.step, out.total = float(bar["n"]), int(bar["total"])
    for m in _PAIR.finditer(text):
        if m["pct"] and _BAR_PERCENT.match(text, m.end("value")):
            continue  # `desc:  37%|`: how far a bar is
        # The label is the run of words right before the separator: `lr 0.1 loss: 2` gives `loss`.
        label = _LABEL.search(re.split(r"[,;|\[\]()\t{}]| - ", m["key"])[-1].strip())
        if label is None:
            continue
        words = [w for w in re.split(r"[^A-Za-z0-9]+", label[0].lower()) if w]
        if words[-1] in _POSITION_KEYS:
            continue
        name = metric_name(label[0], split)
        if name in _NOT_METRICS:
            continue
        out.values.setdefault(name, float(m["value"]))
    return out
