import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { MIME, renderSaved } from '../../widgets-js/src/saved.js';

/**
 * A finished %%hvd cell's view, drawn from the data saved in its output (no kernel, no widget model): the same
 * view as the live widget's (widgets-js/src/view.js), so a reopened notebook shows its plots, zoom, hover and log
 * as they were. Front ends without this renderer show the output's HTML twin (SVG images) instead.
 */
class SavedView extends Widget implements IRenderMime.IRenderer {
  private _takeDown: (() => void) | null = null;

  constructor() {
    super();
    this.addClass('jp-HvdSavedView');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this._takeDown?.();
    this.node.replaceChildren();
    this._takeDown = renderSaved(this.node, model.data[MIME]);
  }

  dispose(): void {
    this._takeDown?.();
    this._takeDown = null;
    super.dispose();
  }
}

/** Safe: the view writes text as text (log lines are escaped), so an untrusted notebook's output is drawn too. */
export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [MIME],
  createRenderer: () => new SavedView()
};

const extension: IRenderMime.IExtension = {
  id: 'jupyter-hvd:saved-view',
  rendererFactory,
  rank: 0, // before text/html: the HTML twin is for front ends without this renderer
  dataType: 'json'
};

export default extension;
