import { describe, expect, it } from 'vitest';

import {
  actionTitle,
  allowedActions,
  asOfCell,
  CELL_FILE_DELAY_S,
  comesBack,
  hvdCellFirstLine,
  MAX_RANKS,
  parseSize,
  pending,
  pendingDone,
  pendingPool,
  pendingText,
  restartBody,
  sizeProblem,
  choosePool,
  confirmation,
  formatDuration,
  formatKept,
  formatLossShort,
  formatMemory,
  formatPace,
  formatRanks,
  formatStep,
  formatUsage,
  IPool,
  poolWarnings,
  whereIsCurrent
} from '../src/model';
import { pool, rank } from './fixtures';

describe('figures', () => {
  it('prints ages and uptimes at a glance', () => {
    expect(formatDuration(0.4)).toBe('0 s');
    expect(formatDuration(42)).toBe('42 s');
    expect(formatDuration(125)).toBe('2 min');
    expect(formatDuration(7500)).toBe('2 h 5 min');
    expect(formatDuration(null)).toBe('–');
  });

  it('shows GPU memory where NVML reported it, CPU and RSS otherwise', () => {
    expect(formatMemory(rank({ gpu_mem_mb: 2048, gpu_mem_total_mb: 81920, gpu_util: 87.2 }))).toBe(
      'GPU 2.0 GB/80.0 GB 87%'
    );
    expect(formatMemory(rank({ cpu_percent: 99.6, rss_mb: 812.3 }))).toBe('CPU 100% 812 MB');
    expect(formatMemory(rank())).toBe('–');
  });
});

describe('one-line rank figures', () => {
  it('keeps steps, losses, pace and load within their narrow columns', () => {
    expect([0, 1200, 99999, 123456, 2_500_000].map(formatStep)).toEqual(['0', '1200', '99999', '123k', '2.5M']);
    expect(formatStep(undefined)).toBe('–');
    expect([0.123456, 12.3456, 0.0000123, 2, 0, 3.4e6, 0.008333].map(formatLossShort)).toEqual([
      '0.123',
      '12.3',
      '1.2e-5',
      '2.00',
      '0.00',
      '3.4e+6',
      '0.0083'
    ]);
    expect(formatPace(rank({ compute_ms: 120.4, wait_ms: 30 }))).toBe('120/30');
    expect(formatPace(rank({ compute_ms: 2.04, wait_ms: 0.31 }))).toBe('2/0.3');
    expect(formatPace(rank({ compute_ms: 5, wait_ms: null }))).toBe('5/?');
    expect(formatPace(rank())).toBe('–');
    expect(formatUsage(rank({ cpu_percent: 98.4, rss_mb: 900 }))).toBe('98% 900M');
    expect(formatUsage(rank({ gpu_mem_mb: 2048, gpu_util: 87, cpu_percent: 100, rss_mb: 3000 }))).toBe('87% 2.0G');
    expect(formatUsage(rank({ gpu_mem_mb: 30500, gpu_util: 97 }))).toBe('97% 30G');
    expect(formatUsage(rank())).toBe('–');
  });

  it('names ranks as ranges', () => {
    expect(formatRanks([4])).toBe('rank 4');
    expect(formatRanks([5, 1, 2, 3, 7])).toBe('ranks 1-3, 5, 7');
  });
});

describe('pool warnings', () => {
  it('has none for a healthy pool', () => {
    expect(poolWarnings(pool())).toEqual([]);
    expect(poolWarnings(pool({ straggler: null, nonfinite: null, problems: [] }))).toEqual([]);
  });

  it('says a NaN first, then the straggler, stalled ranks by tensor, and failed threads', () => {
    const p = pool({
      ranks: [
        rank({ state: 'stalled', stalled_on: 'a' }),
        rank({ rank: 1, state: 'stalled', stalled_on: 'b' }),
        rank({ rank: 2, state: 'stalled', stalled_on: 'a' }),
        rank({ rank: 3, state: 'busy', stalled_on: 'old' })
      ],
      straggler: { rank: 1, ratio: 2, message: 'rank 1 is 2x slower' },
      nonfinite: { rank: 0, step: 3, metric: 'loss', message: 'loss became inf at step 3 on rank 0' },
      problems: ['reporter failed', 'watcher failed']
    });
    expect(poolWarnings(p)).toEqual([
      { kind: 'nonfinite', text: 'loss became inf at step 3 on rank 0' },
      { kind: 'straggler', text: 'rank 1 is 2x slower' },
      { kind: 'stalled', text: 'ranks 0, 2 wait in a' },
      { kind: 'stalled', text: 'rank 1 waits in b' },
      { kind: 'problem', text: 'reporter failed' },
      { kind: 'problem', text: 'watcher failed' }
    ]);
  });
});

describe('actions', () => {
  it('asks nothing before Where and Interrupt: they change nothing the ranks hold', () => {
    for (const state of ['idle', 'running'] as const) {
      expect(confirmation(pool({ state }), 'where')).toBeNull();
      expect(confirmation(pool({ state }), 'interrupt')).toBeNull();
    }
  });

  it('asks nothing when there is no worker state left to lose', () => {
    expect(confirmation(pool({ stale: true, state: 'stale' }), 'stop')).toBeNull();
    expect(confirmation(pool({ state: 'failed' }), 'restart')).toBeNull();
  });

  it('offers only Stop (clean-up) for a pool whose kernel died, and no Interrupt when idle', () => {
    expect(allowedActions(pool({ stale: true, state: 'stale' }))).toEqual(['stop']);
    expect(allowedActions(pool())).toEqual(['where', 'restart', 'stop']);
    expect(allowedActions(pool({ state: 'running' }))).toEqual(['where', 'interrupt', 'restart', 'stop']);
    expect(allowedActions(pool({ state: 'restarting' }))).toEqual([]); // nothing while a restart runs
  });

  it('says what is kept, how many snapshots and the disk they take', () => {
    expect(formatKept(pool())).toBe('');
    expect(formatKept(pool({ kept: ['model', 'opt'], snapshots: 3, kept_bytes: 300 * 2 ** 20 }))).toBe(
      'Kept: model, opt · 3\u00a0snapshots · 300\u00a0MB\u00a0on\u00a0disk'
    );
    expect(formatKept(pool({ kept: ['model'], snapshots: 1, kept_bytes: 730 }))).toBe(
      'Kept: model · 1\u00a0snapshot · <\u00a01\u00a0MB\u00a0on\u00a0disk' // not "0 MB": something is on disk
    );
  });

  it('a command acts on the current notebook pool, else the selected one, else the only one', () => {
    const a = pool({ id: 'hvd-1-1', kernel_id: 'ka' });
    const b = pool({ id: 'hvd-2-2', kernel_id: 'kb' });
    expect(choosePool([a, b], 'kb', null)?.id).toBe('hvd-2-2');
    expect(choosePool([a, b], 'kz', 'hvd-1-1')?.id).toBe('hvd-1-1');
    expect(choosePool([a, b], null, null)).toBeNull();
    expect(choosePool([a, pool({ id: 'hvd-3-3', stale: true })], null, null)?.id).toBe('hvd-1-1');
  });
});

describe('actions asked for from the sidebar', () => {
  const at = (s: number) => s * 1000;

  it('a restart is done when new engines run, an interrupt when the cell stopped, a stop when the pool is gone', () => {
    const p = pool({ state: 'running' });
    const restart = pending(p, 'restart', at(0));
    expect(pendingDone(restart, pool({ state: 'restarting' }), at(2))).toBe(false);
    expect(pendingDone(restart, pool({ state: 'idle' }), at(3))).toBe(false); // the same engines still
    const fresh = pool({ state: 'idle', ranks: [rank({ pid: 5000 }), rank({ rank: 1, pid: 5001 })] });
    expect(pendingDone(restart, fresh, at(4))).toBe(true);
    // New engines that still replay the setup journal or restore the kept names: not done yet.
    expect(pendingDone(restart, { ...fresh, state: 'running', cell: 'import torch' }, at(4))).toBe(false);
    const interrupt = pending(p, 'interrupt', at(0));
    expect(pendingDone(interrupt, p, at(1))).toBe(false);
    expect(pendingDone(interrupt, pool({ state: 'idle' }), at(1))).toBe(true);
    expect(pendingDone(pending(p, 'stop', at(0)), null, at(1))).toBe(true);
    const where = pending(p, 'where', at(0));
    expect(pendingDone(where, p, at(1))).toBe(false);
    const answer = { asked: 1795000000, why: 'the sidebar asked', full: false, text: 'rank 0: idle', places: ['idle'] };
    expect(pendingDone(where, pool({ where: answer }), at(1))).toBe(true);
  });

  it('gives up waiting after a while, so the buttons come back', () => {
    const p = pool({ state: 'running' });
    expect(pendingDone(pending(p, 'interrupt', at(0)), p, at(21))).toBe(true);
    expect(pendingDone(pending(p, 'restart', at(0)), pool({ state: 'restarting' }), at(181))).toBe(true);
  });
});

describe('the questions before Restart and Stop', () => {
  const kept = { kept: ['model', 'opt'], snapshots: 3, kept_bytes: 300 * 2 ** 20, journal_entries: 2 };

  it("Restart names what comes back (the setup journal's entries, the kept names from their newest snapshot)", () => {
    const q = confirmation(pool(kept), 'restart')!;
    expect(q.title).toBe('Restart the pool of train.ipynb?');
    expect(q.accept).toBe('Restart');
    expect(q.lines).toEqual([
      'Its 2 ranks start again as new processes, with the same options.',
      "Comes back: the setup journal's 2 entries, replayed in order; then model, opt from their newest snapshot.",
      "Lost: everything else in the ranks' namespaces (variables, models, data)."
    ]);
    expect(q.lines.join(' ')).not.toMatch(/Models and variables on the ranks are lost/);
  });

  it('Restart says when nothing comes back, and a kept name without a snapshot yet', () => {
    expect(confirmation(pool({ journal_entries: 0 }), 'restart')!.lines).toEqual([
      'Its 2 ranks start again as new processes, with the same options.',
      'Nothing comes back: no %%hvd --setup cell has run and no name is kept (%hvd_keep).',
      "Lost: everything in the ranks' namespaces (variables, models, data)."
    ]);
    const unsaved = confirmation(pool({ journal_entries: 1, kept: ['model'], snapshots: 0 }), 'restart')!;
    expect(unsaved.lines[1]).toBe("Comes back: the setup journal's entry, replayed.");
    expect(unsaved.lines[2]).toMatch(/^model: kept, but no snapshot is written yet .* so it does not come back\.$/);
  });

  it('Restart and Stop of a running pool say the running cell is interrupted first', () => {
    expect(confirmation(pool({ state: 'running' }), 'restart')!.lines[0]).toMatch(/The running cell is interrupted/);
    expect(confirmation(pool({ state: 'running' }), 'stop')!.lines[0]).toMatch(/The running cell is interrupted/);
  });

  it('Stop says everything goes: namespaces, the setup journal, the snapshots with the pool directory', () => {
    const q = confirmation(pool(kept), 'stop')!;
    expect(q.title).toBe('Stop the pool of train.ipynb?');
    expect(q.accept).toBe('Stop');
    expect(q.lines).toEqual([
      'Its 2 ranks end, and the pool with them.',
      "Lost: everything in the ranks' namespaces, the setup journal's 2 entries and the 3 snapshots of model, " +
        "opt (300 MB): a stopped pool's directory is removed.",
      '%hvd_start -np 2 starts a new, empty pool.'
    ]);
    expect(confirmation(pool({ journal_entries: 0 }), 'stop')!.lines[1]).toBe(
      "Lost: everything in the ranks' namespaces."
    );
    const one = pool({ journal_entries: 1, kept: ['model'], snapshots: 1, kept_bytes: 10 });
    expect(confirmation(one, 'stop')!.lines[1]).toBe(
      "Lost: everything in the ranks' namespaces, the setup journal's entry and the snapshot of model (< 1 MB): a " +
        "stopped pool's directory is removed."
    );
  });

  it('says what comes back in one phrase, empty where nothing does', () => {
    expect(comesBack(pool({ journal_entries: 0 }))).toBe('');
    expect(comesBack(pool({ journal_entries: 0, kept: ['model'], snapshots: 2 }))).toBe(
      'model from its newest snapshot'
    );
    // A server that does not send the count: the journal is named, not counted.
    expect(comesBack(pool())).toBe('the setup journal (%%hvd --setup cells, %hvd_push), if any, replayed in order');
  });

  it('each button says what it does, and which ones ask first', () => {
    const p = pool({ state: 'running' });
    expect(actionTitle(p, 'where')).toMatch(/Changes nothing/);
    expect(actionTitle(p, 'interrupt')).toMatch(/^Interrupt the running cell on every rank/);
    expect(actionTitle(p, 'restart')).toMatch(/asks first, and says what comes back/);
    expect(actionTitle(p, 'stop')).toMatch(/asks first/);
    expect(actionTitle(pool({ stale: true, state: 'stale' }), 'stop')).toMatch(/kill what is left/);
  });
});

describe('what belongs to the running cell', () => {
  const where = (asked: number) => ({ asked, why: 'the sidebar asked', full: false, text: 'rank 0: idle', places: [] });

  it('shows a Where picture taken since the running (or last) cell began and since the engines started', () => {
    const p = pool({ started: 100, engines_started: 100, cell_started: 200 });
    expect(whereIsCurrent(pool())).toBe(false); // none taken
    expect(whereIsCurrent({ ...p, where: where(250) })).toBe(true); // during the cell, or after it
    expect(whereIsCurrent({ ...p, where: where(150) })).toBe(false); // a cell ago
    expect(whereIsCurrent({ ...p, engines_started: 300, where: where(250) })).toBe(false); // before a restart
    expect(whereIsCurrent({ ...p, cell_started: 0, where: where(150) })).toBe(true); // no cell has run yet
  });

  it('reads the first line of a %%hvd cell as the kernel shows it, and nothing from other code', () => {
    expect(hvdCellFirstLine('%%hvd\nimport time\nfor i in range(3):')).toBe('import time');
    expect(hvdCellFirstLine('\n%%hvd --ranks all\n\n   \nmodel.train()')).toBe('model.train()');
    expect(hvdCellFirstLine('%hvd_where')).toBeNull();
    expect(hvdCellFirstLine('%%hvdx\n1')).toBeNull();
    expect(hvdCellFirstLine('x = 1\n%%hvd')).toBeNull();
  });

  it("does not show the previous cell's figures as those of a cell the pool file does not know yet", () => {
    const now = 1000;
    const previous: IPool = pool({
      state: 'idle',
      updated_age: 0.4, // written at 999.6, before the cell began at 999.8
      cell_started: 990,
      where: where(995),
      straggler: { rank: 1, ratio: 2, message: 'rank 1 is 2x slower' },
      ranks: [
        rank({ step: 192, loss: 0.005, last_line: 'epoch 8 loss=0.005', compute_ms: 22, wait_ms: 12, rss_mb: 355 }),
        rank({ rank: 1, pid: 4243, step: 192 })
      ]
    });
    const shown = asOfCell(previous, { at: 999.8, firstLine: 'import time' }, now);
    expect(shown.state).toBe('running');
    expect(shown.cell).toBe('import time');
    expect(shown.ranks.map(r => [r.state, r.step, r.loss, r.last_line, r.compute_ms])).toEqual([
      ['busy', null, null, null, null],
      ['busy', null, null, null, null]
    ]);
    expect(shown.ranks[0].rss_mb).toBe(355); // the load is the process's, not the cell's
    expect(shown.straggler).toBeNull();
    expect(whereIsCurrent(shown)).toBe(false);
    expect(previous.ranks[0].step).toBe(192); // the file's pool is left as it was
  });

  it('shows a cell this page saw end as ended, before the pool file says it ran', () => {
    const previous: IPool = pool({
      state: 'idle',
      updated_age: 0.4,
      cell_started: 990,
      ranks: [rank({ step: 192, last_line: 'epoch 8' }), rank({ rank: 1, pid: 4243, state: 'dead' })]
    });
    const shown = asOfCell(previous, { at: 999.8, firstLine: 'f(6)', request: 'r1', ended: 999.9 }, 1000);
    expect(shown.state).toBe('idle');
    expect(shown.cell).toBeNull();
    expect(shown.ranks.map(r => [r.state, r.step, r.last_line])).toEqual([
      ['idle', null, null],
      ['dead', null, null]
    ]);
  });

  it('shows the pool file as it is once it was written by the new cell (or no cell was seen)', () => {
    const file = pool({ state: 'idle', updated_age: 0, ranks: [rank({ step: 3 })] });
    expect(asOfCell(file, undefined, 1000)).toBe(file);
    // Written well after the cell began: the cell's own figures (it may have ended already).
    expect(asOfCell(file, { at: 1000 - CELL_FILE_DELAY_S - 0.1, firstLine: 'x' }, 1000)).toBe(file);
    // The file says the cell began (its own start time, at or after the one this page saw).
    const running = pool({ state: 'running', updated_age: 0.2, cell_started: 999.9, ranks: [rank({ step: 1 })] });
    expect(asOfCell(running, { at: 999.85, firstLine: 'x' }, 1000)).toBe(running);
    // A pool restarting, stopping or dead is shown as it is.
    const restarting = pool({ state: 'restarting', updated_age: 5 });
    expect(asOfCell(restarting, { at: 999, firstLine: 'x' }, 1000)).toBe(restarting);
  });
});

describe('Restart at another number of ranks', () => {
  const kept = { kept: ['model', 'opt'], snapshots: 3, kept_bytes: 300 * 2 ** 20, journal_entries: 2 };

  it("asks at how many ranks, in the user's word, prefilled with the pool's own", () => {
    const q = confirmation(pool({ np: 2 }), 'restart')!;
    expect(q.size).toEqual({
      label: 'Ranks',
      value: 2,
      min: 1,
      max: MAX_RANKS,
      hint: 'now 2; another number restarts the pool at that size'
    });
    expect(confirmation(pool(), 'stop')!.size).toBeUndefined(); // Stop has no size
  });

  it('says nothing new at the same size: a plain restart', () => {
    expect(confirmation(pool(kept), 'restart', 2)).toEqual(confirmation(pool(kept), 'restart'));
    expect(confirmation(pool(kept), 'restart')!.lines[0]).toBe(
      'Its 2 ranks start again as new processes, with the same options.'
    );
  });

  it('says what another size does: the setup cells at the new size, kept models to every rank, per-rank values', () => {
    const q = confirmation(pool(kept), 'restart', 3)!;
    expect(q.accept).toBe('Restart');
    expect(q.lines).toEqual([
      'Its 2 ranks end and 3 new ranks start in their place, with the same options otherwise.',
      "Comes back: the setup journal's 2 entries, replayed in order at 3 ranks (hvd.size() is 3 in it); then " +
        "model, opt from their newest snapshot, on every new rank from rank 0's copy.",
      'Kept values that differ from rank to rank (other than models and optimizers) do not come back at another ' +
        'size: they stay as the setup cells build them for 3 ranks. A learning rate the setup scales by ' +
        'hvd.size() is scaled to the new size.',
      "Lost: everything else in the ranks' namespaces (variables, models, data)."
    ]);
    const one = confirmation(pool({ state: 'running', journal_entries: 1 }), 'restart', 1)!;
    expect(one.lines).toEqual([
      'Its 2 ranks end and 1 new rank starts in their place, with the same options otherwise. The running cell is ' +
        'interrupted first.',
      "Comes back: the setup journal's entry, replayed at 1 rank (hvd.size() is 1 in it).",
      "Lost: everything else in the ranks' namespaces (variables, models, data)."
    ]);
    expect(confirmation(pool({ journal_entries: 0 }), 'restart', 4)!.lines[1]).toBe(
      'Nothing comes back: no %%hvd --setup cell has run and no name is kept (%hvd_keep).'
    );
  });

  it('takes a whole number of ranks from 1 up, and says in a few words why anything else is not one', () => {
    expect(['2', ' 3 ', '1', '4096', '1e1'].map(parseSize)).toEqual([2, 3, 1, 4096, 10]);
    expect(sizeProblem('3')).toBe('');
    expect(sizeProblem('')).toBe('Say how many ranks: a whole number, 1 or more.');
    expect(sizeProblem('  ')).toBe('Say how many ranks: a whole number, 1 or more.');
    expect(sizeProblem('0')).toBe('At least 1 rank.');
    expect(sizeProblem('-2')).toBe('At least 1 rank.');
    expect(sizeProblem('1.5')).toBe('A number of ranks is a whole number (1, 2, 3, ...).');
    expect(sizeProblem('two')).toBe('A number of ranks is a whole number (1, 2, 3, ...).');
    expect(sizeProblem('4097')).toBe(`At most ${MAX_RANKS} ranks.`);
    for (const bad of ['', '0', '1.5', 'two', '4097']) {
      expect(parseSize(bad)).toBeNull();
    }
  });

  it('sends {"np": N} only for another size than the pool\'s; a plain restart sends no body', () => {
    const p = pool({ np: 2 });
    expect(restartBody(p, 3)).toBe('{"np":3}');
    expect(restartBody(p, 1)).toBe('{"np":1}');
    expect(restartBody(p, 2)).toBeUndefined();
    expect(restartBody(p, null)).toBeUndefined();
    expect(restartBody(p, undefined)).toBeUndefined();
  });

  it('says the size it waits for, and only where one was asked', () => {
    const p = pool({ np: 2 });
    expect(pendingText(pending(p, 'restart', 0, 3), 3000)).toBe('Restarting the pool at 3 ranks (asked 3 s ago)…');
    expect(pendingText(pending(p, 'restart', 0, 1), 0)).toBe('Restarting the pool at 1 rank (asked 0 s ago)…');
    expect(pendingText(pending(p, 'restart', 0, 2), 3000)).toBe('Restarting the pool (asked 3 s ago)…');
    expect(pendingText(pending(p, 'restart', 0), 3000)).toBe('Restarting the pool (asked 3 s ago)…');
  });

  it('waits for the new pool its kernel starts in the old one\'s place, until its new ranks are idle', () => {
    const old = pool({ id: 'hvd-1-1', kernel_id: 'k-1', np: 2 });
    const job = pending(old, 'restart', 0, 3);
    const other = pool({ id: 'hvd-9-9', kernel_id: 'k-9' });
    const stopping = { ...old, state: 'stopping' as const };
    expect(pendingPool(job, [other, stopping])).toBe(stopping);
    expect(pendingDone(job, stopping, 1000)).toBe(false);
    // The old pool's file is gone and the new one's not written yet: not done (a plain restart's would be).
    expect(pendingPool(job, [other])).toBeNull();
    expect(pendingDone(job, null, 2000)).toBe(false);
    expect(pendingDone(pending(old, 'restart', 0), null, 2000)).toBe(true);
    const ranks = [0, 1, 2].map(r => rank({ rank: r, pid: 5000 + r }));
    const starting = pool({ id: 'hvd-1-2', kernel_id: 'k-1', np: 3, state: 'starting', ranks: [] });
    expect(pendingPool(job, [other, starting])).toBe(starting);
    expect(pendingDone(job, starting, 3000)).toBe(false);
    const replaying = { ...starting, state: 'running' as const, ranks, cell: 'replaying setup entry 1 of 2' };
    expect(pendingDone(job, replaying, 4000)).toBe(false);
    expect(pendingDone(job, { ...starting, state: 'idle', ranks }, 5000)).toBe(true);
    // A plain restart keeps its pool: another pool of its kernel is not its own.
    expect(pendingPool(pending(old, 'restart', 0), [starting])).toBeNull();
  });

  it('is done when the kernel refused the size (the old ranks run on and the pool says why)', () => {
    const p = pool({ np: 3, problems: ['the pool watcher failed: OSError'] });
    const job = pending(p, 'restart', 0, 999);
    expect(pendingDone(job, p, 1000)).toBe(false);
    const why = 'the restart asked for from the sidebar failed: -np 999 asks for more ranks than this host runs';
    expect(pendingDone(job, { ...p, problems: [why, ...p.problems!] }, 2000)).toBe(true);
  });
});
