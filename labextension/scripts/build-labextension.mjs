// Builds the labextension into ../jupyter_hvd/labextension against the JupyterLab that Python has installed
// (JupyterLab 4.6's `jupyter labextension build` needs the network; @jupyterlab/builder's own CLI does not).
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';

const python = process.env.PYTHON || 'python3';
const staging = execFileSync(python, ['-c', 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))'])
  .toString()
  .trim();
// The npm workspace hoists @jupyterlab/builder to the root's node_modules: resolve it as Node does.
const cli = createRequire(import.meta.url).resolve('@jupyterlab/builder/lib/build-labextension.js');
execFileSync(process.execPath, [cli, '--core-path', staging, ...process.argv.slice(2), '.'], { stdio: 'inherit' });
