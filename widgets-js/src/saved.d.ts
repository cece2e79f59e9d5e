// Types of saved.js for the labextension's TypeScript (labextension/src/mime.ts).
export declare const MIME: string;
export declare function renderSaved(el: HTMLElement, data: unknown): () => void;
export declare class OutputView {
  constructor(el: HTMLElement, graceMs?: number);
  render(data: unknown): void;
  destroy(): void;
}
