// What happy-dom lacks and uPlot draws with: a 2D canvas context and Path2D. Both record what is drawn, so a
// test can count the segments of each stroke (`strokes`: one entry per stroke() call, with its style).
export const strokes = [];

class RecordingPath {
  constructor() {
    this.segments = 0;
  }
  lineTo() {
    this.segments += 1;
  }
}
for (const name of ["moveTo", "rect", "arc", "closePath", "bezierCurveTo", "quadraticCurveTo", "addPath"]) {
  RecordingPath.prototype[name] = function () {};
}

function recordingContext(canvas) {
  const state = { canvas, font: "10px sans-serif" };
  return new Proxy(state, {
    get(target, prop) {
      if (prop in target) return target[prop];
      if (prop === "measureText") return (text) => ({ width: String(text).length * 6, actualBoundingBoxAscent: 8 });
      if (prop === "stroke")
        return (path) => strokes.push({ style: target.strokeStyle, alpha: target.globalAlpha, segments: path?.segments ?? 0 });
      return () => {};
    },
    set(target, prop, value) {
      target[prop] = value;
      return true;
    },
  });
}

globalThis.Path2D ??= RecordingPath;
HTMLCanvasElement.prototype.getContext = function () {
  this._context ??= recordingContext(this);
  return this._context;
};
