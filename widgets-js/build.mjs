// Bundles the live view (src/live_view.js, with uPlot and the CSS it imports) into the Python package, where
// anywidget serves it: jupyter_hvd/widgets/static/live_view.js and live_view.css. Minified in every build (anywidget
// sends the module with each cell's widget), so the browser tests load what the wheel ships.
import { build } from "esbuild";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = (path) => fileURLToPath(new URL(path, import.meta.url));
const uplot = JSON.parse(readFileSync(createRequire(import.meta.url).resolve("uplot/package.json"), "utf8"));
// uPlot's licence header is not a /*! comment, which minifiers drop: the bundle names it itself.
const notice = `/*! jupyter-hvd live view. Bundles uPlot ${uplot.version}, (c) Leon Sorokin, MIT License, https://github.com/leeoniya/uPlot */`;

await build({
  entryPoints: { live_view: here("src/live_view.js") },
  outdir: here("../jupyter_hvd/widgets/static"),
  bundle: true,
  format: "esm",
  target: "es2020",
  minify: true,
  banner: { js: notice, css: notice },
  logLevel: "warning",
});
