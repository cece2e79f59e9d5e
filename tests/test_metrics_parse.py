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
