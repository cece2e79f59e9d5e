// What jsdom lacks and JupyterLab's packages use: DragEvent (@lumino/dragdrop, imported by @lumino/widgets),
// matchMedia (the design tokens of @jupyter/web-components), and requestIdleCallback (with which a dialog draws its
// title). Run before each test file (vitest.config.mjs setupFiles), so before any of them imports these packages.
(globalThis as any).DragEvent ??= class extends MouseEvent {};
(globalThis as any).requestIdleCallback ??= (callback: () => void) => setTimeout(callback, 0);
window.matchMedia ??= (query: string) =>
  ({ matches: false, media: query, addListener: () => {}, removeListener: () => {} }) as any;
