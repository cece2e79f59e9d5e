// Types of saved.js for the sidebar's TypeScript (labextension/src/mime.ts).
export declare const MIME: string;
export declare function renderSaved(el: HTMLElement, data: unknown): () => void;
