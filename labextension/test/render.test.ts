import { describe, expect, it } from 'vitest';

import { renderPools } from '../src/render';
import { pool, rank } from './fixtures';

function texts(root: HTMLElement, selector: string): string[] {
  return Array.from(root.querySelectorAll(selector)).map(n => n.textContent || '');
}

describe('sidebar rendering', () => {
  it('explains how to start a pool when there is none', () => {
    const root = document.createElement('div');
    renderPools(root, []);
    expect(root.textContent).toContain('%hvd_start -np 2');
  });

  it('shows each pool with its notebook, state, figures and one row per rank', () => {
    const root = document.createElement('div');
    renderPools(root, [
      pool({
        state: 'running',
        cell: 'for epoch in range(100):',
        ranks: [
          rank({ state: 'busy', step: 1200, loss: 0.123456, cpu_percent: 98, rss_mb: 900, last_line: 'epoch 3 loss 0.12' }),
          rank({ rank: 1, pid: 4243, state: 'stalled', cpu_percent: 0.5, rss_mb: 880 })
        ]
      })
    ]);
    const box = root.querySelector('[data-pool-id="hvd-1-1"]') as HTMLElement;
    expect(box.dataset.state).toBe('running');
    expect(texts(box, '.jp-HvdPool-notebook')).toEqual(['train.ipynb']);
    expect(box.querySelector('.jp-HvdPool-meta')!.textContent).toBe('-np 2 · MPI · node1 · up 2 min');
    expect(box.querySelector('.jp-HvdPool-cell')!.textContent).toContain('for epoch in range(100):');
    const rows = Array.from(box.querySelectorAll('tr.jp-HvdRank')) as HTMLElement[];
    expect(rows.map(r => r.dataset.state)).toEqual(['busy', 'stalled']);
    expect(rows.map(r => r.dataset.pid)).toEqual(['4242', '4243']);
    expect(Array.from(rows[0].children).map(c => c.textContent)).toEqual(['0', 'busy', 'node1:4242 · cpu']);
    expect(texts(box, '.jp-HvdRank-figures')).toEqual([
      'CPU 98% 900 MB · step 1200 · loss 0.1235 · beat 0 s',
      'CPU 1% 880 MB · beat 0 s'
    ]);
    expect(texts(box, '.jp-HvdRank-line')).toEqual(['epoch 3 loss 0.12']);
  });

  it('enables only the buttons that make sense, each naming its pool and action', () => {
    const root = document.createElement('div');
    renderPools(root, [pool({ id: 'hvd-1-1' }), pool({ id: 'hvd-2-2', stale: true, state: 'stale' })]);
    const buttons = (id: string) =>
      Array.from(root.querySelectorAll(`button[data-pool-id="${id}"]`)).map(b => [
        (b as HTMLButtonElement).dataset.action,
        (b as HTMLButtonElement).disabled
      ]);
    expect(buttons('hvd-1-1')).toEqual([
      ['interrupt', true],
      ['restart', false],
      ['stop', false]
    ]);
    expect(buttons('hvd-2-2')).toEqual([
      ['interrupt', true],
      ['restart', true],
      ['stop', false]
    ]);
  });

  it('keeps showing the pools with an error line when the server stops answering', () => {
    const root = document.createElement('div');
    renderPools(root, [pool()], 'Could not reach the jupyter-hvd server extension');
    expect(root.querySelector('.jp-HvdSidebar-error')!.textContent).toContain('Could not reach');
    expect(root.querySelectorAll('.jp-HvdPool').length).toBe(1);
  });
});
