"""How a failed `%%hvd` cell reads in a real kernel on a real 2-rank pool: IPython's own forms (`Cell In[4], line 3`
with the prompt's number, the failing line among its neighbours), one line numbering for syntax and runtime errors,
pdb and where (the cell's body: its first line after `%%hvd` is line 1), each explanation said once, no hard line
breaks in a sentence.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from conftest import Kernel, new_kernel

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def k() -> Iterator[Kernel]:
    """A real kernel with a 2-rank pool; the cells show text (what a test reads), as nbclient's would."""
    kernel = new_kernel()
    try:
        r = kernel.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2", timeout=120)
        assert r.status == "ok", r.error_text
        yield kernel
    finally:
        kernel.run("%hvd_stop", timeout=60)
        kernel.shutdown()


def said(r: object) -> str:
    """Everything a cell showed, as plain text: its streams and its error."""
    return ANSI.sub("", r.stdout + r.stderr + r.error_text)  # type: ignore[attr-defined]


def prompt(k: Kernel) -> int:
    """The execution count the next cell gets."""
    return int(k.run("get_ipython().execution_count").outputs[-1]["execution_count"]) + 1


def test_a_runtime_error_names_the_prompt_and_the_bodys_line_in_context(k: Kernel) -> None:
    n = prompt(k)
    r = k.run("%%hvd\nx = 1\ny = 2\nundefined_name\nz = 3\n")
    text = said(r)
    assert r.status == "error"
    assert f"Cell In[{n}], line 3" in text, text  # the body's third line
    # IPython's own form: the failing line with its neighbours, numbered alike.
    assert "      2 y = 2\n----> 3 undefined_name\n      4 z = 3" in text, text
    assert "<hvd-cell-" not in text, text
    assert text.count("NameError: name 'undefined_name' is not defined") == 2, text  # headline, traceback's end


def test_syntax_and_runtime_errors_count_lines_alike(k: Kernel) -> None:
    n = prompt(k)
    syntax = said(k.run("%%hvd\nx = 1\ny = (2,\n"))
    assert f"Cell In[{n}], line 2" in syntax, syntax
    runtime = said(k.run("%%hvd\nx = 1\ny = 1 / 0\n"))
    assert f"Cell In[{n + 1}], line 2" in runtime and "----> 2 y = 1 / 0" in runtime, runtime


def test_a_function_of_an_earlier_cell_is_named_by_its_cell(k: Kernel) -> None:
    defined = prompt(k)
    assert k.run("%%hvd\ndef explode(x):\n    return x / 0\n").status == "ok"
    n = prompt(k)
    text = said(k.run("%%hvd\nexplode(rank)\n"))
    assert f"Cell In[{n}], line 1" in text and f"Cell In[{defined}], line 2, in explode(x)" in text, text
    assert "----> 2     return x / 0" in text, text


def test_pdb_and_where_name_a_place_as_the_traceback_does(k: Kernel) -> None:
    n = prompt(k)
    text = said(k.run("%%hvd\nx = 1\nif rank == 1:\n    raise ValueError('boom')\n"))
    assert f"Cell In[{n}], line 3" in text, text
    # %hvd_debug: pdb's place and its listing count the same lines.
    r = k.run("%hvd_debug", inputs=["where", "list", "q"], timeout=60)
    shown = said(r)
    assert r.status == "ok", shown
    assert f"> Cell In[{n}], line 3\n-> raise ValueError('boom')" in shown, shown
    assert "  3  ->\t    raise ValueError('boom')" in shown, shown
    assert "<hvd-cell-" not in shown and "engine/main.py" not in shown, shown
    # breakpoint(): pdb stops at the line after it; `where` shows the cell's frames, not the engine's.
    m = prompt(k)
    r = k.run("%%hvd\na = 1\nif rank == 1:\n    breakpoint()\n    b = 2\nprint('done')", inputs=["where", "c"])
    shown = said(r)
    assert r.status == "ok", shown
    assert f"> Cell In[{m}], line 4\n-> b = 2" in shown, shown
    assert "<hvd-cell-" not in shown and "engine/main.py" not in shown, shown
    # A rank stopped after another one's error: where it was stopped, in the same words.
    p = prompt(k)
    cell = "%%hvd\nimport time\nif rank == 0:\n    time.sleep(30)\nraise ValueError('late')\n"
    text = said(k.run(cell, timeout=60))
    assert f"rank 0 at Cell In[{p}], line 3: time.sleep(30)" in text, text


def test_mismatched_collectives_are_explained_once(k: Kernel) -> None:
    r = k.run("%%hvd\nhvd.allreduce(torch.ones(2), name=f'different_{rank}')\n", timeout=180)
    text = said(r)
    assert "Collectives did not match" in text and "The pool was restarted in" in text, text
    assert text.count("Every rank must run the same collectives in the same order") == 1, text
    assert text.count("rank 0 waits in 'different_0'") == 1, text
    # Sentences are the front end's to wrap: a line ends only where a message or a paragraph does.
    assert not re.search(r"[a-z,]\n[a-z]", text), text
    assert k.run("%%hvd\nprint(rank)").status == "ok"
