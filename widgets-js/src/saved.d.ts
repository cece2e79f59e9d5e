// Types of saved.js for the labextension's TypeScript (labextension/src/mime.ts).
import type { SavedView } from './messages';

export declare const MIME: string;
export declare function renderSaved(el: HTMLElement, data: SavedView): () => void;
export declare class OutputView {
  constructor(el: HTMLElement, graceMs?: number);
  render(data: SavedView): void;
  destroy(): void;
}
