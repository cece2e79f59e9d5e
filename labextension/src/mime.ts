import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import type { SavedView as SavedViewData } from 'jupyter-hvd-live-view/messages';
import { MIME, OutputView } from 'jupyter-hvd-live-view/saved';

/**
 * A %%hvd cell's view, drawn from the data in its output: the same view as the live widget's
 * (widgets-js/src/view.js), so a reopened notebook shows its plots, zoom, hover and log as they were, with no
 * kernel. While the cell runs, the output is a copy the kernel refreshes, with the live widget beside it in the same
 * output: this renderer is preferred to the widget's, and draws the live widget's data while its model is on the
 * page (widgets-js/src/live.js), so a notebook saved mid-run (autosave) reopens with the run up to then and never
 * with "model not found". Front ends without this renderer show the widget, or the output's HTML twin (SVG images).
 */
class SavedView extends Widget implements IRenderMime.IRenderer {
  private _view: OutputView;

  constructor() {
    super();
    this.addClass('jp-HvdSavedView');
    this._view = new OutputView(this.node);
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    // Its shape is jupyter_hvd/widgets/schema.py's SavedView (widgets-js/src/messages.d.ts).
    this._view.render(model.data[MIME] as unknown as SavedViewData);
  }

  dispose(): void {
    this._view.destroy();
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
  // Before the widget's renderer (-10, @jupyter-widgets/jupyterlab-manager), whose output this view shares while the
  // cell runs, and before text/html (the HTML twin is for front ends without this renderer).
  rank: -20,
  dataType: 'json'
};

export default extension;
