import { Widget } from '@lumino/widgets';
import { afterEach, describe, expect, it } from 'vitest';

import { confirmation, IPool } from '../src/model';
import { ActionQuestion } from '../src/question';
import { pool } from './fixtures';

/** The question of `action` on `p` in a stand-in for JupyterLab's dialog: a .jp-Dialog with its footer's buttons. */
function asked(p: IPool, action: 'restart' | 'stop' = 'restart') {
  const question = confirmation(p, action)!;
  const body = new ActionQuestion(question, np => confirmation(p, action, np)!.lines);
  const dialog = document.createElement('div');
  dialog.className = 'jp-Dialog';
  const footer = document.createElement('div');
  footer.className = 'jp-Dialog-footer';
  const accept = document.createElement('button');
  accept.className = 'jp-mod-accept';
  footer.appendChild(accept);
  document.body.appendChild(dialog);
  Widget.attach(body, dialog);
  dialog.appendChild(footer);
  const type = (text: string) => {
    body.input!.value = text;
    body.input!.dispatchEvent(new Event('input', { bubbles: true }));
  };
  const lines = () => Array.from(body.node.querySelectorAll('p')).map(n => n.textContent);
  const problem = () => body.node.querySelector('.jp-HvdConfirm-sizeProblem')!.textContent;
  return { body, accept, type, lines, problem };
}

afterEach(() => {
  document.body.replaceChildren();
});

describe("Restart's question", () => {
  const kept = { kept: ['model', 'opt'], snapshots: 1, kept_bytes: 2 ** 20, journal_entries: 1 };

  it('has a number field labelled Ranks, prefilled with the pool\'s size, at least 1', () => {
    const { body, lines, problem, accept } = asked(pool(kept));
    const input = body.input!;
    expect(input.type).toBe('number');
    expect([input.value, input.min, input.step, input.required]).toEqual(['2', '1', '1', true]);
    expect(body.node.querySelector('label')!.textContent).toBe('Ranks ');
    expect(body.node.querySelector('label')!.contains(input)).toBe(true);
    expect(body.node.querySelector('.jp-HvdConfirm-sizeHint')!.textContent).toBe(
      'now 2; another number restarts the pool at that size'
    );
    expect(lines()[0]).toBe('Its 2 ranks start again as new processes, with the same options.');
    expect([problem(), accept.disabled, body.getValue()]).toEqual(['', false, 2]);
  });

  it('says what a restart at the number typed does, and back at the pool\'s own size, a plain restart', () => {
    const { body, type, lines } = asked(pool(kept));
    type('3');
    expect(body.getValue()).toBe(3);
    expect(lines()[0]).toBe('Its 2 ranks end and 3 new ranks start in their place, with the same options otherwise.');
    expect(lines()[1]).toMatch(/replayed at 3 ranks \(hvd\.size\(\) is 3 in it\); then model, opt .* on every new rank/);
    type('2');
    expect(lines()).toEqual(confirmation(pool(kept), 'restart')!.lines);
  });

  it('disables Restart with a short reason for what is not a number of ranks, and loses nothing', () => {
    const { body, type, lines, problem, accept } = asked(pool(kept));
    type('3');
    const atThree = lines();
    for (const [text, why] of [
      ['', 'Say how many ranks: a whole number, 1 or more.'],
      ['0', 'At least 1 rank.'],
      ['1.5', 'A number of ranks is a whole number (1, 2, 3, ...).']
    ]) {
      type(text);
      expect([problem(), accept.disabled, accept.title, body.getValue()]).toEqual([why, true, why, null]);
      expect(body.input!.getAttribute('aria-invalid')).toBe('true');
      expect(lines()).toEqual(atThree); // what was said stays, and so does what was typed
      expect(body.input!.value).toBe(text);
    }
    type('4');
    expect([problem(), accept.disabled, body.getValue()]).toEqual(['', false, 4]);
    expect(lines()[0]).toMatch(/^Its 2 ranks end and 4 new ranks start/);
  });

  it('asks Stop without a size', () => {
    const { body } = asked(pool(kept), 'stop');
    expect(body.input).toBeNull();
    expect(body.getValue()).toBeNull();
    expect(body.node.querySelectorAll('p').length).toBe(3);
  });
});
