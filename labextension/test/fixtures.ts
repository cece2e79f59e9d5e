import { IPool, IRank } from '../src/model';

/** A rank and a pool as the server reports them; each test changes what it is about. */
export function rank(over: Partial<IRank> = {}): IRank {
  return { rank: 0, host: 'node1', pid: 4242, device: 'cpu', state: 'idle', heartbeat_age: 0.4, ...over };
}

export function pool(over: Partial<IPool> = {}): IPool {
  return {
    id: 'hvd-1-1',
    state: 'idle',
    stale: false,
    notebook: 'work/train.ipynb',
    kernel_id: 'k-1',
    np: 2,
    backend: 'MPI',
    hosts: ['node1'],
    uptime: 125,
    updated_age: 0.5,
    cell: null,
    ranks: [rank(), rank({ rank: 1, pid: 4243 })],
    ...over
  };
}
