"""%hvd_export writes user code as it ran: IPython lines as their plain Python, pushed values beside the script, the
pool's environment in the launch line, and what cannot be exported named. The script then runs under mpirun to the
same output as the notebook.

A real kernel with a real 2-rank CPU pool, and a real mpirun.
"""

from __future__ import annotations

import re

from conftest import new_kernel, run_under_mpirun, wait_until_gone


def test_the_export_is_the_notebook_as_it_ran_and_mpirun_prints_what_the_cells_printed(tmp_path):
    out_dir = tmp_path / "ckpt"
    k = new_kernel()
    try:
        r = k.run(
            "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2 --env JHVD_MARK=pool-env",
            timeout=120,
        )
        assert r.status == "ok", r.error_text
        assert k.run("cfg = {'width': 3, 'path': " + repr(str(out_dir)) + "}\n%hvd_push cfg").status == "ok"
        setup = "%%hvd --setup\nimport os\nmodel = torch.nn.Linear(cfg['width'], 1)\ndef train():\n    return 42\n"
        assert k.run(setup).status == "ok"
        cell = (
            "%%hvd\n"
            "%time r = train()\n"
            "path = cfg['path']\n"
            "%env JHVD_FROM_CELL=set-in-cell\n"
            "!mkdir -p {path}\n"
            "if rank == 0:\n"
            "    !echo shell-{r} > {path}/shell.txt\n"
            "%xmode Plain\n"
            'print(f\'r={r} ckpt={path}/ckpt.pt env={os.environ["JHVD_MARK"]} cell={os.environ["JHVD_FROM_CELL"]}\')\n'
        )
        r = k.run(cell)
        assert r.status == "ok", r.error_text
        printed = re.findall(r"r=.*", r.stdout)
        assert printed, r.stdout
        script = tmp_path / "train.py"
        r = k.run(f"%hvd_export {script} --sbatch")
        assert r.status == "ok", r.error_text
        said = r.stdout
    finally:
        k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []
    text = script.read_text()
    # Named, in the magic's output and in the script; the rest is plain Python.
    assert "%xmode Plain" in said and "not exported" in text and "%xmode Plain" in text, said
    assert "{path}" in text and "f'r={r} ckpt={path}/ckpt.pt" in text, "user code was changed"
    assert "get_ipython" not in text.replace("needs IPython", ""), text
    assert "-x JHVD_MARK=pool-env" in text and "-x JHVD_MARK=pool-env" in said, said
    assert "export JHVD_MARK=pool-env" in script.with_suffix(".sbatch").read_text()
    assert (tmp_path / "train.pushed.pkl").exists()
    (out_dir / "shell.txt").unlink()
    done = run_under_mpirun(script, mpirun_args=("-x", "JHVD_MARK=pool-env"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.findall(r"r=.*", done.stdout) == printed, (done.stdout, printed)
    assert (out_dir / "shell.txt").read_text().strip() == "shell-42"
