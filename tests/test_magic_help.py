"""Every magic answers --help and ?, a syntax error in a %%hvd cell looks like a plain cell's, and the README's
option tables are the parsers' own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import new_kernel

from jupyter_hvd.kernel.launch.options import config_table
from jupyter_hvd.kernel.magics import HvdMagics, options_table

MAGICS = [
    "hvd_start",
    "hvd_push",
    "hvd_pull",
    "hvd_status",
    "hvd_restart",
    "hvd_stop",
    "hvd_keep",
    "hvd_setup",
    "hvd_export",
]


@pytest.fixture(scope="module")
def k():
    kernel = new_kernel()
    assert kernel.run("%load_ext jupyter_hvd").status == "ok"
    try:
        yield kernel
    finally:
        kernel.shutdown()


@pytest.mark.parametrize("magic", MAGICS)
def test_every_line_magic_answers_help(k, magic):
    r = k.run(f"%{magic} --help")
    assert r.status == "ok", r.error_text
    summary = getattr(HvdMagics, magic).__doc__.strip().splitlines()[0]
    assert summary in r.stdout and f"%{magic}" in r.stdout, r.stdout
    assert "unrecognized" not in r.stdout + r.error_text
    r = k.run(f"%{magic}?")
    assert r.status == "ok", r.error_text


def test_the_cell_magic_answers_help(k):
    r = k.run("%%hvd --help\nprint(1)")
    assert r.status == "ok", r.error_text
    assert "%hvd [--ranks" in r.stdout and "--ranks" in r.stdout, r.stdout


def test_a_syntax_error_looks_like_a_plain_cells(k):
    r = k.run("%%hvd\nx = 1\ny = (2,\nprint(x)")
    assert r.status == "error"
    text = re.sub(r"\x1b\[[0-9;]*m", "", r.error_text)
    lines = text.strip().splitlines()
    assert len(lines) <= 5, text
    assert "magics.py" not in text and "jupyter_hvd" not in text, text
    assert re.search(r"Cell In\[\d+\], line 2", text), text  # the body's line, as tracebacks and pdb count it
    assert lines[-1].startswith("SyntaxError:"), text
    assert any(ln.strip() == "^" for ln in lines), text
    assert k.run("print(1)").status == "ok"


@pytest.mark.parametrize("magic", ["hvd_start", "hvd", "config"])
def test_readme_option_tables_come_from_the_parser(magic):
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(rf"<!-- options:{magic} -->\n(.*?)\n<!-- /options -->", readme, re.S)
    assert block, f"README has no option table for {magic}"
    expected = config_table() if magic == "config" else options_table(getattr(HvdMagics, magic))
    assert block.group(1) == expected, f"regenerate it: {'config_table()' if magic == 'config' else 'options_table'}"
