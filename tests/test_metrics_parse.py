"""Metrics read from printed lines: the formats of Horovod's own examples and of common tutorials."""

from __future__ import annotations

import math

import pytest

from jupyter_hvd.metrics import metric_name, parse_line

# (where the format comes from, the printed line, metrics, step, epoch, total)
REAL_WORLD = [
    (
        "horovod examples/pytorch/pytorch_mnist.py (train)",
        "Train Epoch: 2 [15360/30000 (51%)]\tLoss: 0.412345",
        {"loss": 0.412345},
        None,
        2.512,
        None,
    ),
    (
        "horovod examples/pytorch/pytorch_mnist.py (test)",
        "\nTest set: Average loss: 0.1234, Accuracy: 97.50%\n",
        {"test_loss": 0.1234, "test_accuracy": 97.5},
        None,
        None,
        None,
    ),
    (
        "horovod examples/pytorch/pytorch_imagenet_resnet50.py (tqdm postfix)",
        "Train Epoch     #1:  37%|███▋      | 37/100 [00:01<00:02, 30.10it/s, loss=0.512, accuracy=83.1]",
        {"loss": 0.512, "accuracy": 83.1},
        37,
        1,
        100,
    ),
    (
        "horovod examples/tensorflow2/tensorflow2_mnist.py",
        "Step #100\tLoss: 0.203411",
        {"loss": 0.203411},
        100,
        None,
        None,
    ),
    (
        "horovod examples/pytorch/pytorch_synthetic_benchmark.py",
        "Iter #3: 123.4 img/sec per CPU",
        {},
        3,
        None,
        None,
    ),
    (
        "horovod examples/pytorch/pytorch_synthetic_benchmark.py (total)",
        "Img/sec per CPU: 150.2 +-3.4",
        {"img_sec_per_cpu": 150.2},
        None,
        None,
        None,
    ),
    ("jupyter-hvd quickstart style f-string", "Epoch 3: loss=0.123", {"loss": 0.123}, None, 3, None),
    ("colon after epoch", "Epoch: 3, loss: 0.5, acc: 0.91", {"loss": 0.5, "acc": 0.91}, None, 3, None),
    ("PyTorch CIFAR10 tutorial", "[1,  2000] loss: 2.166", {"loss": 2.166}, None, None, None),
    (
        "yunjey/pytorch-tutorial",
        "Epoch [1/5], Step [100/600], Loss: 0.2218",
        {"loss": 0.2218},
        100,
        1,
        600,
    ),
    (
        "Keras fit progress (horovod keras examples)",
        "469/469 [==============================] - 5s 10ms/step - loss: 0.3171 - accuracy: 0.9048",
        {"loss": 0.3171, "accuracy": 0.9048},
        469,
        None,
        469,
    ),
    (
        "Keras fit progress, mid-epoch",
        "120/469 [======>.......................] - ETA: 3s - loss: 0.5210 - accuracy: 0.8512",
        {"loss": 0.521, "accuracy": 0.8512},
        120,
        None,
        469,
    ),
    (
        "Keras 3 fit progress",
        "\x1b[1m120/469\x1b[0m \x1b[32m━━━━━\x1b[0m\x1b[37m━━━━━━━━━━━━━━━\x1b[0m \x1b[1m3s\x1b[0m 9ms/step"
        " - accuracy: 0.8512 - loss: 0.5210",
        {"loss": 0.521, "accuracy": 0.8512},
        120,
        None,
        469,
    ),
    (
        "tqdm with a description and set_postfix",
        "train:  37%|███▋      | 37/100 [00:01<00:02, 30.10it/s, loss=0.512]",
        {"loss": 0.512},
        37,
        None,
        100,
    ),
    (
        "Keras with validation",
        "469/469 - 5s - loss: 0.3171 - accuracy: 0.9048 - val_loss: 0.1412 - val_accuracy: 0.9571",
        {"loss": 0.3171, "accuracy": 0.9048, "val_loss": 0.1412, "val_accuracy": 0.9571},
        469,
        None,
        469,
    ),
    (
        "Hugging Face Trainer log dict",
        "{'loss': 0.6931, 'learning_rate': 5e-05, 'epoch': 0.5}",
        {"loss": 0.6931, "learning_rate": 5e-05},
        None,
        0.5,
        None,
    ),
    (
        "PyTorch Lightning bar",
        "Epoch 0: 100%|██████████| 10/10 [00:00<00:00, 50.00it/s, v_num=0, train_loss=0.500]",
        {"train_loss": 0.5},
        10,
        0,
        10,
    ),
    (
        "a printed tensor",
        "loss: tensor(0.6931, grad_fn=<NllLossBackward0>)",
        {"loss": 0.6931},
        None,
        None,
        None,
    ),
    ("spaces around =", "step = 7  loss = 1.5e-2", {"loss": 0.015}, 7, None, None),
    ("global step", "global_step=10 loss=0.1 lr=0.001", {"loss": 0.1, "lr": 0.001}, 10, None, None),
    ("validation prefix", "Validation: loss=0.2 acc=0.95", {"val_loss": 0.2, "val_acc": 0.95}, None, None, None),
    ("ANSI colours", "\x1b[32mloss=0.3\x1b[0m \x1b[1macc=0.7\x1b[0m", {"loss": 0.3, "acc": 0.7}, None, None, None),
    ("a clock time is not a number", "time: 12:30:01 loss=1", {"loss": 1.0}, None, None, None),
    ("a number before the label", "lr 0.001 loss: 0.5", {"loss": 0.5}, None, None, None),
    ("ranks and sizes are not metrics", "rank=0 size=2 local_rank=0", {}, None, None, None),
    ("plain prose", "Starting training on 2 ranks", {}, None, None, None),
]


@pytest.mark.parametrize(
    ("source", "line", "values", "step", "epoch", "total"), REAL_WORLD, ids=[r[0] for r in REAL_WORLD]
)
def test_real_world_print_formats(source, line, values, step, epoch, total) -> None:
    parsed = parse_line(line)
    assert parsed.values == pytest.approx(values), source
    assert parsed.step == step
    assert parsed.epoch == (pytest.approx(epoch) if epoch is not None else None)
    assert parsed.total == total
    assert bool(parsed) == bool(values)


def test_nan_loss_is_kept_so_the_user_sees_training_diverge() -> None:
    assert math.isnan(parse_line("Epoch 4: loss=nan").values["loss"])


def test_metric_names_are_normalised() -> None:
    assert metric_name("Average loss") == "loss"
    assert metric_name("Val Acc") == "val_acc"
    assert metric_name("'learning_rate'") == "learning_rate"
    assert metric_name("loss", "test") == "test_loss"
    assert metric_name("val_loss", "val") == "val_loss"


# Lines that are not metrics: warnings, errors, tracebacks, log records of warnings, a file's `name.cpp:822`, prose.
NOT_METRICS = [
    (
        "torch's UserWarning, with a C++ file:line",
        "/opt/venv/lib/python3.11/site-packages/torch/_tensor.py:1128: UserWarning: The .grad attribute of a Tensor "
        "that is not a leaf Tensor is being accessed. (Triggered internally at "
        "/pytorch/torch/csrc/autograd/generated/python_variable_methods.cpp:822.)",
    ),
    ("a file:line alone", "(Triggered internally at /pytorch/torch/csrc/autograd/python_variable_methods.cpp:822.)"),
    ("an exception's message", "ValueError: x = 3"),
    ("a chained traceback's prose", "During handling of the above exception, another exception occurred:"),
    ("a frame of a traceback", '  File "<hvd-cell-2>", line 7, in <module>'),
    ("logging's warning", "WARNING:root:lr=0.1 is too high for batch_size=8"),
    ("c10's warning", "[W1128 12:00:00.123456 123 ProcessGroupNCCL.cpp:4561] Warning: loss = 0.5 may hang"),
    ("NCCL's warning", "vm:123:456 [0] NCCL WARN Call to connect returned Connection refused, retrying: 3"),
    ("prose with a value", "next cell works on rank 0 x = 3"),
    ("a debug print", "x = 3"),
    ("a sentence and a count", "Number of parameters: 1234567"),
    ("a note", "Note: 3 files were skipped"),
    ("a model summary", "Total params: 1,234 (4.82 KB)"),
]


@pytest.mark.parametrize(("source", "line"), NOT_METRICS, ids=[r[0] for r in NOT_METRICS])
def test_warnings_errors_tracebacks_files_and_prose_give_no_metrics(source: str, line: str) -> None:
    assert parse_line(line).values == {}, source


# What still is one: `name=value` anywhere but in the lines above; `name: value` in progress lines, tqdm's postfix,
# and lines of nothing but metrics.
STILL_METRICS = [
    ("name=value in prose", "resuming with lr=0.05", {"lr": 0.05}),
    ("name: value in a progress line", "Epoch 3 finished, val loss: 0.25", {"val_loss": 0.25}),
    ("name = value in a progress line", "step 7: loss = 0.5", {"loss": 0.5}),
    (
        "tqdm postfix after a colon",
        "train:  37%|███▋      | 37/100 [00:01<00:02, 30.10it/s, loss: 0.512]",
        {"loss": 0.512},
    ),
    ("several pairs", "acc: 0.91, f1: 0.88", {"acc": 0.91, "f1": 0.88}),
    ("a metric named after its class", "MeanSquaredError: 0.12", {"meansquarederror": 0.12}),
]


@pytest.mark.parametrize(("source", "line", "values"), STILL_METRICS, ids=[r[0] for r in STILL_METRICS])
def test_what_looks_like_a_metric_still_is_one(source: str, line: str, values: dict[str, float]) -> None:
    assert parse_line(line).values == pytest.approx(values), source


def test_the_source_lines_a_traceback_or_a_warning_quotes_are_not_metrics() -> None:
    from jupyter_hvd.digest import Digest

    stderr = (
        "<hvd-cell-2>:3: UserWarning: deprecated\n"
        "  lr = 0.1\n"  # the warning's source line
        "Traceback (most recent call last):\n"
        '  File "<hvd-cell-2>", line 7, in <module>\n'
        "    loss = 0.5\n"
        "    ^^^^^^^^^^\n"
        "ValueError: loss = 0.5\n"
        "  0%|          | 0/10 [00:00<?, ?it/s, loss=0.9]\n"  # a bar after it, indented as tqdm draws it
        "step 1 loss=0.4\n"
    )
    lines = Digest().feed(0, "stderr", stderr).lines
    assert [(line.text, line.parsed.values) for line in lines if line.parsed] == [
        ("  0%|          | 0/10 [00:00<?, ?it/s, loss=0.9]", {"loss": 0.9}),
        ("step 1 loss=0.4", {"loss": 0.4}),
    ]
