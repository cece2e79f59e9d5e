import { describe, expect, it } from 'vitest';

import {
  allowedActions,
  pending,
  pendingDone,
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
  poolWarnings
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
  it('interrupts without asking, confirms restart and stop of a live pool', () => {
    expect(confirmation(pool({ state: 'running' }), 'interrupt')).toBeNull();
    expect(confirmation(pool(), 'restart')).toMatch(/Restart the 2 ranks of train.ipynb\? Models and variables/);
    expect(confirmation(pool(), 'stop')).toMatch(/Stop the 2 ranks/);
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
