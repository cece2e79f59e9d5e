import { describe, expect, it } from 'vitest';

import {
  allowedActions,
  choosePool,
  confirmation,
  formatDuration,
  formatMemory
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
    expect(allowedActions(pool())).toEqual(['restart', 'stop']);
    expect(allowedActions(pool({ state: 'running' }))).toEqual(['interrupt', 'restart', 'stop']);
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
