"""%hvd_export against hostile values: --env values full of shell syntax, --env names and SLURM options that cannot
be written safely, notebook names and IPython lines that would end a comment, and `!` commands with braces, dollars
and quotes. What is exported compiles (python) and parses (bash -n, sh -n), and runs exactly what was written: the
injected `touch` never runs (its marker file never appears), and `!` commands print what IPython printed.

Real processes throughout: bash and sh run the launch lines and the batch script (mpirun and torchrun there are a
program that records its arguments and environment), python runs the exported script, IPython runs the same cell as
the oracle; one real kernel and pool export end to end, and the batch script runs that export with a real mpirun.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
from conftest import VENV_BIN, Kernel, wait_until_gone
from IPython.core.inputtransformer2 import TransformerManager

from jupyter_hvd.kernel.errors import PoolError
from jupyter_hvd.kernel.keep import export
from jupyter_hvd.kernel.keep.journal import Cell, Keeper
from jupyter_hvd.kernel.launch.options import HvdPool

RECORDER = """import json, os, sys
with open(os.environ["JHVD_RECORD"], "a") as f:
    f.write(json.dumps({"program": os.path.basename(sys.argv[0]), "argv": sys.argv[1:], "env": dict(os.environ)}))
    f.write("\\n")
"""


def hostile(marker: Path) -> str:
    """A value that runs `touch marker` wherever a shell reads it unquoted: ; $(...) backticks, both quotes, a
    backslash, spaces, a newline and a #."""
    return f"a;touch {marker};b $(touch {marker}) `touch {marker}` \"dq\" 'sq' back\\slash\ntouch {marker} # 2nd line"


def recording_bin(tmp_path: Path) -> Path:
    """A folder whose mpirun and torchrun record their arguments and environment instead of starting ranks."""
    folder = tmp_path / "recording-bin"
    folder.mkdir(exist_ok=True)
    for name in ("mpirun", "torchrun"):
        program = folder / name
        program.write_text(f"#!{sys.executable}\n{RECORDER}")
        program.chmod(0o755)
    return folder


def run_recorded(tmp_path: Path, argv: list[str]) -> list[dict]:
    """Run `argv` (a shell and its arguments) with the recording mpirun and torchrun first on PATH; what they
    recorded."""
    record = tmp_path / "record.jsonl"
    record.unlink(missing_ok=True)
    path = f"{recording_bin(tmp_path)}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "JHVD_RECORD": str(record)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def code_tokens(text: str) -> list[str]:
    """The script's tokens other than comments: what Python runs."""
    kinds = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    return [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in kinds]


# ---- the launch lines and the batch script ------------------------------------------------------------------------


def test_the_launch_lines_pass_a_hostile_env_value_exactly_and_run_nothing(tmp_path):
    marker = tmp_path / "pwned"
    value = hostile(marker)
    script = tmp_path / "it's a dir" / "train $1.py"
    options = HvdPool(np=2, env={"JHVD_HOSTILE": value})
    for shell in ("bash", "sh"):
        (mpirun,) = run_recorded(tmp_path, [shell, "-c", export.launch_line(options, str(script))])
        assert mpirun["program"] == "mpirun" and mpirun["argv"][:2] == ["-np", "2"], mpirun["argv"]
        assert mpirun["argv"][-2:] == ["python", str(script)], mpirun["argv"]
        assert f"JHVD_HOSTILE={value}" in mpirun["argv"], mpirun["argv"]
        (torchrun,) = run_recorded(tmp_path, [shell, "-c", export.torchrun_line(options, str(script))])
        assert torchrun["program"] == "torchrun", torchrun
        assert torchrun["argv"] == ["--nproc-per-node", "2", str(script)], torchrun["argv"]
        assert torchrun["env"]["JHVD_HOSTILE"] == value
    assert not marker.exists(), "a launch line ran the injected command"


def test_the_batch_script_parses_and_gives_mpirun_a_hostile_env_value_exactly(tmp_path):
    marker = tmp_path / "pwned"
    value = hostile(marker)
    script = tmp_path / "it's a dir" / "train.py"
    options = HvdPool(np=4, nodes=2, partition="gpu-a100", time="1:00:00", env={"JHVD_HOSTILE": value})
    batch = tmp_path / "train.sbatch"
    batch.write_text(export.sbatch(options, script))
    text = batch.read_text()
    assert "#SBATCH --partition=gpu-a100\n" in text and "#SBATCH --time=1:00:00\n" in text, text
    for shell in ("bash", "sh"):
        checked = subprocess.run([shell, "-n", str(batch)], capture_output=True, text=True)
        assert checked.returncode == 0, (shell, checked.stderr)
        (mpirun,) = run_recorded(tmp_path, [shell, str(batch)])
        assert mpirun["env"]["JHVD_HOSTILE"] == value, "the batch script's export changed the value"
        assert f"JHVD_HOSTILE={value}" in mpirun["argv"] and mpirun["argv"][-1] == str(script), mpirun["argv"]
    assert not marker.exists(), "the batch script ran the injected command"


def test_an_env_name_that_is_not_a_shell_name_is_refused_by_the_batch_script_before_anything_is_written(tmp_path):
    marker = tmp_path / "pwned"
    name = f"A;touch {marker};B"
    options = HvdPool(np=2, env={name: "1", "OK_NAME": "2"})
    # mpirun -x and env take any name, quoted: the launch lines carry it as it is.
    (mpirun,) = run_recorded(tmp_path, ["bash", "-c", export.launch_line(options, "train.py")])
    assert f"{name}=1" in mpirun["argv"]
    (torchrun,) = run_recorded(tmp_path, ["bash", "-c", export.torchrun_line(options, "train.py")])
    assert torchrun["env"][name] == "1" and torchrun["env"]["OK_NAME"] == "2", torchrun["env"]
    # `export NAME=...` cannot: refused, saying what to do.
    with pytest.raises(PoolError) as refused:
        export.sbatch(options, tmp_path / "train.py")
    said = str(refused.value)
    assert repr(name) in said and "--env" in said and "without --sbatch" in said and "%hvd_start" in said, said
    with pytest.raises(PoolError):
        export.write(str(tmp_path / "out" / "train.py"), Keeper(), options, True, tmp_path)
    assert not (tmp_path / "out").exists(), "a refused export still wrote files"
    assert not marker.exists()


@pytest.mark.parametrize(
    ("name", "value"),
    [("partition", "gpu\ntouch pwned"), ("time", "1:00:00\rtouch pwned"), ("partition", "a b"), ("time", "1\\:00")],
)
def test_slurm_options_sbatch_would_misread_are_refused(tmp_path, name, value):
    options = HvdPool(np=2, **{name: value})
    with pytest.raises(PoolError) as refused:
        export.sbatch(options, tmp_path / "train.py")
    said = str(refused.value)
    assert f"--{name.replace('_', '-')}" in said and repr(value) in said and "without --sbatch" in said, said


# ---- comments ---------------------------------------------------------------------------------------------------


def test_a_notebook_name_or_an_ipython_line_cannot_leave_its_comment(tmp_path):
    marker = tmp_path / "pwned-by-comment"
    escape = f"\nopen({str(marker)!r}, 'w').close()  #"
    notebook = f"evil{escape}\r{escape}\u2028{escape}\x00 #.ipynb"
    cell = (
        # Written as a call, so its line may hold what a %magic line cannot.
        f"get_ipython().run_line_magic('xmode', {'Plain' + escape!r})\nprint('ran to the end')\n"
    )
    keeper = Keeper(cells=[Cell(cell, 3, "")])
    script = tmp_path / f"train{escape}.py"
    exported = export.script(keeper, HvdPool(np=1, cpu=True), str(script), notebook)
    compile(exported.text, "train.py", "exec")
    assert not any(str(marker) in token for token in code_tokens(exported.text)), exported.text[:3000]
    assert "evil\\nopen(" in exported.text and "\\u2028" in exported.text, "the name is not shown, escaped"
    assert all("\n" not in what for what in exported.left_out), exported.left_out
    path = tmp_path / "train.py"
    path.write_text(exported.text)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0 and "ran to the end" in done.stdout, done.stderr[-3000:]
    assert not marker.exists(), "a comment's text ran"


# ---- ! commands -------------------------------------------------------------------------------------------------

SHELL_CELL = """\
word = 'hi'
!awk '{print $1}' words.txt
!echo "a b" 'c'
!echo {word} $word '$word' {{braces}} $$word {len(word) * 2}
!echo ${HOME} {undefined_name} done
!echo {}
lines = !printf '%s\\n' '{print $1}' "x  y"; echo to-stderr >&2
print(lines)
sep = "a\u2028b"
print(len(sep))
def show(n):
    !echo n={n} $n
show(3)
!echo '$(touch pwned)' '`touch pwned`'
"""


def test_shell_commands_run_exactly_as_ipython_runs_them(tmp_path):
    (tmp_path / "words.txt").write_text("alpha beta\ngamma delta\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # print's lines and the shell's in the order they were made
    (tmp_path / "cell.ipy").write_text(SHELL_CELL)
    ipython = [sys.executable, "-m", "IPython", "--quick", "--no-banner", "--colors=NoColor", "cell.ipy"]
    oracle = subprocess.run(ipython, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert oracle.returncode == 0 and "alpha" in oracle.stdout, oracle.stderr
    keeper = Keeper(cells=[Cell(TransformerManager().transform_cell(SHELL_CELL), 1, "")])
    path = tmp_path / "train.py"
    exported = export.script(keeper, HvdPool(np=1, cpu=True), str(path))
    assert not exported.left_out, exported.left_out
    compile(exported.text, str(path), "exec")
    path.write_text(exported.text)
    run = [sys.executable, str(path)]
    done = subprocess.run(run, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == oracle.stdout.splitlines(), (done.stdout, oracle.stdout)
    assert "$(touch pwned) `touch pwned`" in done.stdout
    assert not (tmp_path / "pwned").exists()


# ---- end to end -------------------------------------------------------------------------------------------------


def between(text: str, first: str, last: str) -> list[str]:
    """The lines printed between the lines `first` and `last` (carriage returns of a terminal dropped)."""
    lines = [line.rstrip("\r") for line in text.splitlines()]
    return lines[lines.index(first) + 1 : lines.index(last)]


def test_an_export_with_a_hostile_env_value_and_notebook_name_runs_as_written_from_its_batch_script(tmp_path):
    marker = tmp_path / "pwned"
    value = hostile(marker)
    name_marker = tmp_path / "pwned-by-name"
    notebook = f"evil\nopen({str(name_marker)!r}, 'w').close()  # \r\u2028x.ipynb"
    words = tmp_path / "words.txt"
    words.write_text("alpha beta\ngamma delta\n")
    script = tmp_path / "train.py"  # %hvd_export's argument parser keeps quotes: a plain path
    k = Kernel(extra_env={"JPY_SESSION_NAME": notebook})
    try:
        r = k.run(
            f"hostile = {value!r}\n"
            "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n"
            "%config HvdPool.env = {'JHVD_HOSTILE': hostile}\n%hvd_start -np 2",
            timeout=120,
        )
        assert r.status == "ok", r.error_text
        cell = (
            "%%hvd\n"
            "import os\n"
            "word = 'hi'\n"
            "if rank == 0:\n"
            "    print('BEGIN')\n"
            "    print(repr(os.environ.get('JHVD_HOSTILE')))\n"
            f"    !awk '{{print $1}}' {words}\n"
            "    !echo \"a b\" 'c'\n"
            "    !echo {word} $word '$word' {{braces}}\n"
            "    lines = !printf '%s\\n' '{print $1}' \"x  y\"\n"
            "    print(lines)\n"
            f"    !echo '$(touch {marker})'\n"
            "    print('END')\n"
        )
        r = k.run(cell)
        assert r.status == "ok", r.error_text
        shown = between(r.stdout, "BEGIN", "END")
        assert shown[0] == repr(value) and "alpha" in shown and "a b c" in shown, shown
        r = k.run(f"%hvd_export {script} --sbatch")
        assert r.status == "ok", r.error_text
    finally:
        k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []
    text = script.read_text()
    compile(text, str(script), "exec")
    assert not any(str(name_marker) in token for token in code_tokens(text)), text[:3000]
    batch = script.with_suffix(".sbatch")
    for shell in ("bash", "sh"):
        checked = subprocess.run([shell, "-n", str(batch)], capture_output=True, text=True)
        assert checked.returncode == 0, (shell, checked.stderr)
    # The batch script as SLURM would run it, with a real mpirun: its exports and its launch line.
    env = {**os.environ, "PATH": VENV_BIN + os.pathsep + os.environ["PATH"], "PYTHONUNBUFFERED": "1"}
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run(["bash", str(batch)], capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert between(done.stdout, "BEGIN", "END") == shown, (done.stdout, shown)
    assert not marker.exists() and not name_marker.exists(), "the export ran an injected command"
