/**
 * What the sidebar asks before Restart or Stop, as the body of JupyterLab's dialog: one paragraph per line and, for
 * Restart, the number of ranks to restart at. Only Lumino here (no JupyterLab imports), so it is unit-tested on its
 * own; sidebar.ts shows it in a dialog.
 */

import { Widget } from '@lumino/widgets';

import { IConfirmation, parseSize, sizeProblem } from './model';

/**
 * A question's body. With a size field its paragraphs follow the number typed (`linesAt` says what a restart at that
 * size does); a number that is not one says why under the field and disables the dialog's accept button (the input's
 * own constraints make it `:invalid`, which JupyterLab's dialog reads too, so Enter cannot accept it either).
 * `getValue()`: the number of ranks asked for, or null without a size field.
 */
export class ActionQuestion extends Widget {
  readonly input: HTMLInputElement | null = null;
  private _lines: HTMLElement;
  private _problem: HTMLElement | null = null;

  constructor(
    question: IConfirmation,
    private _linesAt: (np: number) => string[] = () => question.lines
  ) {
    super();
    this.addClass('jp-HvdConfirm');
    const size = question.size;
    if (size) {
      const row = document.createElement('div');
      row.className = 'jp-HvdConfirm-size';
      const label = document.createElement('label');
      label.className = 'jp-HvdConfirm-sizeLabel';
      const input = document.createElement('input');
      input.className = 'jp-mod-styled jp-HvdConfirm-sizeInput';
      Object.assign(input, { type: 'number', min: String(size.min), max: String(size.max), step: '1' });
      input.required = true;
      input.value = String(size.value);
      input.setAttribute('inputmode', 'numeric');
      input.setAttribute('aria-describedby', 'jp-HvdConfirm-sizeHint jp-HvdConfirm-sizeProblem');
      label.append(`${size.label} `, input);
      const hint = document.createElement('span');
      hint.className = 'jp-HvdConfirm-sizeHint';
      hint.id = 'jp-HvdConfirm-sizeHint';
      hint.textContent = size.hint;
      row.append(label, hint);
      const problem = document.createElement('div');
      problem.className = 'jp-HvdConfirm-sizeProblem';
      problem.id = 'jp-HvdConfirm-sizeProblem';
      problem.setAttribute('role', 'alert');
      this.node.append(row, problem);
      input.addEventListener('input', this._onInput);
      input.addEventListener('focus', () => input.select()); // typing a number replaces the pool's
      this.input = input;
      this._problem = problem;
    }
    this._lines = document.createElement('div');
    this._lines.className = 'jp-HvdConfirm-lines';
    this.node.appendChild(this._lines);
    this._showLines(question.lines);
  }

  /** The number of ranks asked for (null without a size field, or where the field holds no number of ranks). */
  getValue(): number | null {
    return this.input ? parseSize(this._text()) : null;
  }

  /** Why the size field holds no number of ranks; '' when it holds one (or there is no field). */
  get problem(): string {
    return this.input ? sizeProblem(this._text()) : '';
  }

  /** What the field says: a number input holds '' for what is not a number ("3.", "-"), which it flags itself. */
  private _text(): string {
    const input = this.input!;
    return input.value === '' && input.validity?.badInput ? 'not a number' : input.value;
  }

  private _showLines(lines: string[]): void {
    this._lines.replaceChildren(
      ...lines.map(line => {
        const paragraph = document.createElement('p');
        paragraph.textContent = line;
        return paragraph;
      })
    );
  }

  private _onInput = (): void => {
    const problem = this.problem;
    this._problem!.textContent = problem;
    this.input!.setAttribute('aria-invalid', String(!!problem));
    if (!problem) {
      this._showLines(this._linesAt(this.getValue()!)); // what the dialog says follows the number; a bad one keeps it
    }
    const accept = this.node.closest('.jp-Dialog')?.querySelector('.jp-Dialog-footer button.jp-mod-accept');
    if (accept instanceof HTMLButtonElement) {
      accept.disabled = !!problem;
      accept.title = problem;
    }
  };
}
