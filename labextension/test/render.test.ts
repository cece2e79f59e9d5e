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

  it('shows each pool with its notebook, state, figures and, per rank, its figures and its last line under them', () => {
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
    expect(box.querySelector('.jp-HvdPool-meta')!.textContent).toBe('up 2 min · 2 ranks · MPI · node1');
    expect(box.querySelector('.jp-HvdPool-cell')!.textContent).toContain('for epoch in range(100):');
    expect((box.querySelector('.jp-HvdPool-cell') as HTMLElement).dataset.own).toBeUndefined();
    const rows = Array.from(box.querySelectorAll('tr.jp-HvdRank')) as HTMLElement[];
    expect(rows.map(r => r.dataset.state)).toEqual(['busy', 'stalled']);
    expect(rows.map(r => r.dataset.pid)).toEqual(['4242', '4243']);
    expect(Array.from(rows[0].children).map(c => c.textContent)).toEqual(['0', '1200', '0.123', '–', '–', '98% 900M']);
    expect(Array.from(rows[1].children).map(c => c.textContent)).toEqual(['1', '–', '–', '–', '–', '1% 880M']);
    const under = Array.from(box.querySelectorAll('tr.jp-HvdRank-under')) as HTMLElement[];
    expect(under.map(u => u.querySelector('.jp-HvdRank-line')?.textContent ?? null)).toEqual(['epoch 3 loss 0.12', null]);
    expect((under[0].firstElementChild as HTMLTableCellElement).colSpan).toBe(6); // the whole width, wrapped
    expect((rows[0].querySelector('.jp-HvdState-dot') as HTMLElement).dataset.state).toBe('busy');
    expect(rows[0].title).toContain('host node1, pid 4242, device cpu');
    expect(rows[0].title).toContain('CPU 98% 900 MB · heartbeat 0 s ago');
    expect(rows[0].title).toContain('1200 steps · loss 0.1235'); // a count with its unit, not a bare number
    expect(rows[0].title).toContain('last line: epoch 3 loss 0.12');
    // Headers in words, with their units under them.
    expect(texts(box, 'th')).toEqual(['rank', 'steps', 'loss', 'computems', 'waitms', 'load%, memory']);
    expect(texts(box, 'th .jp-HvdRanks-unit')).toEqual(['ms', 'ms', '%, memory']);
    expect(box.querySelectorAll('.jp-HvdPool-warning').length).toBe(0);
  });

  it("says jupyter-hvd's own work on the ranks (a restart's restore) in words, apart from the user's code", () => {
    const root = document.createElement('div');
    renderPools(root, [pool({ state: 'running', cell: 'restoring model, opt from the snapshot', cell_own: true })]);
    const cell = root.querySelector('.jp-HvdPool-cell') as HTMLElement;
    expect(cell.textContent).toBe('▶ restoring model, opt from the snapshot');
    expect(cell.dataset.own).toBe('true');
  });

  it('shows compute and wait per step with a title that says what the numbers are', () => {
    const root = document.createElement('div');
    renderPools(root, [pool({ ranks: [rank({ compute_ms: 12.34, wait_ms: 3.06 }), rank({ rank: 1 })] })]);
    const pace = Array.from(root.querySelectorAll('td.jp-HvdRank-compute')) as HTMLElement[];
    expect(pace.map(p => p.textContent)).toEqual(['12', '–']);
    expect(texts(root, 'td.jp-HvdRank-wait')).toEqual(['3.1', '–']);
    expect(pace[0].title).toBe(
      'per step (recent mean): 12.3 ms computing, 3.1 ms waiting for the other ranks in collectives'
    );
    expect(pace[1].title).toMatch(/not measured yet/);
  });

  it('shows the tensors a stalled rank waits in, on its row and as a pool warning', () => {
    const root = document.createElement('div');
    renderPools(root, [
      pool({
        state: 'running',
        ranks: [
          rank({ state: 'busy', last_line: 'epoch 9' }),
          rank({ rank: 1, state: 'stalled', stalled_on: 'allreduce.grad.fc1.weight', last_line: 'epoch 8' }),
          rank({ rank: 2, state: 'stalled', stalled_on: 'allreduce.grad.fc1.weight' })
        ]
      })
    ]);
    expect(texts(root, '.jp-HvdRank-line')).toEqual([
      'epoch 9',
      'waits in allreduce.grad.fc1.weight',
      'waits in allreduce.grad.fc1.weight'
    ]);
    expect((root.querySelector('tr[data-rank="1"]') as HTMLElement).title).toContain(
      'stalled in allreduce.grad.fc1.weight'
    );
    expect(texts(root, '.jp-HvdPool-warning[data-kind="stalled"]')).toEqual([
      '⚠ ranks 1-2 wait in allreduce.grad.fc1.weight'
    ]);
  });

  it('highlights a straggler and says the NaN, the straggler and failed threads as warning lines', () => {
    const root = document.createElement('div');
    renderPools(root, [
      pool({
        ranks: [rank(), rank({ rank: 1, compute_ms: 40, wait_ms: 1 })],
        straggler: { rank: 1, ratio: 1.8, message: 'rank 1 is 1.8x slower than the others (40 ms per step)' },
        nonfinite: { rank: 0, step: 12, metric: 'loss', message: 'loss became nan at step 12 on rank 0' },
        problems: ['the pool watcher failed: OSError: disk full']
      })
    ]);
    const rows = Array.from(root.querySelectorAll('tr.jp-HvdRank')) as HTMLElement[];
    expect(rows.map(r => r.dataset.straggler)).toEqual([undefined, 'true']);
    const warnings = Array.from(root.querySelectorAll('.jp-HvdPool-warning')) as HTMLElement[];
    expect(warnings.map(w => [w.dataset.kind, w.textContent])).toEqual([
      ['nonfinite', '⚠ loss became nan at step 12 on rank 0'],
      ['straggler', '⚠ rank 1 is 1.8x slower than the others (40 ms per step)'],
      ['problem', '⚠ the pool watcher failed: OSError: disk full']
    ]);
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
      ['where', false],
      ['interrupt', true],
      ['restart', false],
      ['stop', false]
    ]);
    expect(buttons('hvd-2-2')).toEqual([
      ['where', true],
      ['interrupt', true],
      ['restart', true],
      ['stop', false]
    ]);
  });

  it('shows where the ranks were, one line per place, and what is kept', () => {
    const root = document.createElement('div');
    const where = {
      asked: new Date(2026, 10, 27, 10, 42, 7).getTime() / 1000,
      why: 'the sidebar asked',
      full: false,
      text: "rank 0: waiting in allreduce 'grad' (cell line 7)\nrank 1: in f()",
      places: ["waiting in allreduce 'grad' (cell line 7)", 'in f()']
    };
    renderPools(root, [pool({ where, kept: ['model'], snapshots: 1, kept_bytes: 2 ** 20 })]);
    expect(root.querySelector('.jp-HvdPool-whereTitle')!.textContent).toBe(
      'Where the ranks were at 10:42:07 (the sidebar asked)'
    );
    expect(root.querySelector('.jp-HvdPool-wherePlaces')!.textContent).toContain("rank 1: in f()");
    expect(root.querySelector('.jp-HvdPool-kept')!.textContent).toBe('Kept: model · 1\u00a0snapshot · 1\u00a0MB\u00a0on\u00a0disk');
  });

  it("disables a pool's buttons while an action asked for from here runs, and says what it waits for", () => {
    const root = document.createElement('div');
    const p = pool({ id: 'hvd-1-1', state: 'running' });
    const job = { action: 'restart' as const, since: 1000, pids: [4242, 4243], where: '' };
    renderPools(root, [p, pool({ id: 'hvd-2-2' })], undefined, new Map([['hvd-1-1', job]]));
    const disabled = (id: string) =>
      Array.from(root.querySelectorAll(`button[data-pool-id="${id}"]`)).map(b => (b as HTMLButtonElement).disabled);
    expect(disabled('hvd-1-1')).toEqual([true, true, true, true]);
    expect(disabled('hvd-2-2')).toEqual([false, true, false, false]); // another pool's buttons are its own
    expect(root.querySelector('[data-pool-id="hvd-1-1"] .jp-HvdPool-pending')!.textContent).toMatch(
      /^Restarting the pool \(asked .* ago\)…$/
    );
  });

  it('keeps showing the pools with an error line when the server stops answering', () => {
    const root = document.createElement('div');
    renderPools(root, [pool()], 'Could not reach the jupyter-hvd server extension');
    expect(root.querySelector('.jp-HvdSidebar-error')!.textContent).toContain('Could not reach');
    expect(root.querySelectorAll('.jp-HvdPool').length).toBe(1);
  });
});
