"""Metrics read from the lines a training script prints: `loss=0.123`, `Loss: 0.123`, `Epoch 3: acc=0.9`...

Pure logic, used in the kernel on rank 0's output, so that typical Horovod tutorial scripts plot with no change.
A line gives numbers by name, plus where it is in training (step, epoch, total) when the line says so.

Only what looks like a metric is one: `name=value`; `name: value` (or `name = value`) in a progress line (a step, an
epoch, a bar, a `[1, 2000]` counter, a `Test set:` summary) or in a line of nothing but such pairs; a tqdm postfix.
Never a warning, an error, a traceback (LineReader skips the source lines they quote) or prose ("on rank 0 x = 3"),
and never a `file.cpp:822`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
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
# Lines that are never metrics: errors, warnings and log records of a warning or worse (their `file.py:12:` and
# `x = 3` are not values). `MeanSquaredError: 0.1` (a metric named after its class) is a number, not an error.
_NOISE = re.compile(
    r"^\s*Traceback \(most recent call last\)"
    r"|^\s*File \"[^\"]*\", line \d+"
    r"|^\s*(?:During handling of the above exception|The above exception was the direct cause)"
    r"|\b(?:[A-Z]\w*)?(?:Error|Exception|Warning|Interrupt)\b(?::\s(?!\s*[-+]?[\d.]+(?:[eE][-+]?\d+)?\s*$)|\s*$)"
    r"|\b(?:WARNING|WARN|ERROR|CRITICAL|FATAL)\b"  # logging's and NCCL's levels, in capitals
    r"|^\[?[WEF]\d{4} \d\d:\d\d:\d\d"  # glog and c10: `[W1128 12:00:00.123 ...]`
    r"|^\[[WEF] \S"  # c10's older `[W socket.cpp:464]`
)
# Where the indented lines after it quote source code: a traceback (until its exception line), a warning (one line).
_TRACEBACK = re.compile(r"^\s*(?:Traceback \(most recent call last\)|File \"[^\"]*\", line \d+)")
_WARNING = re.compile(r"\b\w*Warning: ")
# A source file's name before `:822` is a place, not a metric.
_FILE = re.compile(
    r"\.(?:py|pyx|pyi|c|cc|cpp|cxx|cu|cuh|h|hh|hpp|ipynb|js|ts|java|rs|go|sh|json|ya?ml|toml|txt|log|so)['\"]?$",
    re.IGNORECASE,
)
# A counter at the start of a line is progress: `[1,  2000] loss: 2.166` (PyTorch's CIFAR-10 tutorial), `[3/10]`.
_COUNTER = re.compile(r"^\s*\[\s*\d+(?:\s*[,/]\s*\d+)*\s*\]")
# Settings printed beside a value (`grad_fn=<NllLossBackward0>`, `device='cuda:0'`) are not prose.
_SETTING = re.compile(r"\b\w+=\S*")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_'/.-]+")
_NUMBER_NEXT = re.compile(r"\s*[-+]?\.?\d")
_SPLIT_WORDS = {"train", "training", "test", "val", "valid", "validation", "eval", "evaluation"}


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
    if _NOISE.search(text):
        return out  # a warning, an error or a traceback says nothing about training
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
    pairs = list(_pairs(text, split))
    in_progress = out.step is not None or out.epoch is not None or bool(split or _COUNTER.match(text))
    if not in_progress and any(not p.tight for p in pairs) and not _record(text, pairs):
        pairs = [p for p in pairs if p.tight]  # `name: value` in prose ("x = 3 on rank 0") is not a metric
    for p in pairs:
        out.values.setdefault(p.name, p.value)
    return out


@dataclass
class _Pair:
    """A `name=value` or `name: value` of a line: the metric, and where its label starts and its value ends."""

    name: str
    value: float
    tight: bool  # `name=value`, no space around `=`: a metric wherever it is
    label: str
    start: int
    end: int


def _pairs(text: str, split: str | None) -> Iterator[_Pair]:
    """The line's `name=value` and `name: value` pairs whose name can be a metric."""
    for m in _PAIR.finditer(text):
        if m["pct"] and _BAR_PERCENT.match(text, m.end("value")):
            continue  # `desc:  37%|`: how far a bar is
        # The label is the run of words right before the separator: `lr 0.1 loss: 2` gives `loss`.
        label = _LABEL.search(re.split(r"[,;|\[\]()\t{}]| - ", m["key"])[-1].strip())
        if label is None or _FILE.search(label[0]):
            continue  # `python_variable_methods.cpp:822` is a place in a file
        sep = m.start("sep")
        tight = m["sep"] == "=" and not text[sep - 1].isspace() and not text[sep + 1 : sep + 2].isspace()
        key = _attached(label[0]) if tight else label[0]
        words = [w for w in re.split(r"[^A-Za-z0-9]+", key.lower()) if w]
        if words[-1] in _POSITION_KEYS:
            continue
        name = metric_name(key, split)
        if name in _NOT_METRICS:
            continue
        end = m.start("key") + len(m["key"].rstrip())
        yield _Pair(name, float(m["value"]), tight, key, end - len(key), m.end())


def _attached(label: str) -> str:
    """The name a `name=value` gives: its last word, with the filler or split words before it (`resuming with
    lr=0.05` gives `lr`, `val loss=0.2` gives `val loss`)."""
    words = label.split(" ")
    keep = 1
    while keep < len(words) and words[-keep - 1].strip("'\"").lower() in _FILLER | _SPLIT_WORDS:
        keep += 1
    return " ".join(words[-keep:])


def _record(text: str, pairs: list[_Pair]) -> bool:
    """Whether a line outside progress is a record of metrics (`Img/sec per CPU: 150.2`, `loss: tensor(0.69)`,
    `acc: 0.9, f1: 0.8`) rather than prose: no word outside its pairs, and labels short enough to be names."""
    rest = list(text)
    for p in pairs:
        rest[p.start : p.end] = " " * (p.end - p.start)
    left = _SETTING.sub(" ", "".join(rest))
    for m in _WORD.finditer(left):
        word = m[0].lower().strip("'")
        if word in _FILLER or word in _SPLIT_WORDS or _NUMBER_NEXT.match(left, m.end()):
            continue  # filler, a split, or a name and its number (`lr 0.001`)
        return False
    if len(pairs) >= 2:
        return True
    label = pairs[0].label.strip("'\"") if pairs else ""
    return len(label) >= 2 and (len(label.split()) <= 2 or "/" in label)  # `x = 3` or a sentence: not a name


class LineReader:
    """Reads one rank's stream line by line: `parse_line`, except for the source lines a traceback or a warning
    quotes (indented, after `File "...", line 7` or `UserWarning: ...`), which are code, not output."""

    def __init__(self) -> None:
        self._quoting = 0  # indented lines still to skip; -1: until a line that is not indented

    def read(self, line: str) -> ParsedLine:
        """The metrics of the next line of the stream."""
        text = _ANSI.sub("", line)
        if _TRACEBACK.match(text):
            self._quoting = -1
            return ParsedLine()
        if self._quoting and text[:1].isspace() and not _TQDM.search(text):
            if self._quoting > 0:
                self._quoting -= 1
            return ParsedLine()
        self._quoting = 1 if _WARNING.search(text) else 0
        return parse_line(line)
