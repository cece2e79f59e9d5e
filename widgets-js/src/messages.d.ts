// Written by `python -m jupyter_hvd.widgets.schema_ts` from jupyter_hvd/widgets/schema.py, where these
// records are defined: change them there and write this file again (tests/test_view_schema.py fails until then).

/** A log line: text, stream ("stdout" | "stderr"), rank (-1: jupyter-hvd's own). */
export type LogLine = [string, string, number];

/** New log lines (the whole log in a saved view), the unfinished last lines, and how many there were in all. */
export interface LogMessage {
  append: LogLine[];
  partials: LogLine[];
  total: number;
}

/** What the status line shows, as numbers: the front end formats them. */
export interface Status {
  state: string;
  ranks: number;
  step: number | null;
  epoch: number | null;
  steps: number | null;
  total: number | null;
  desc: string | null;
  samples_per_s: number | null;
  steps_per_s: number | null;
  elapsed: number;
  eta: number | null;
  latest: Record<string, number>;
  warning: string | null;
  straggler: string | null;
  activity: string | null;
}

export interface SavedStatus extends Status {
  text: string;
}

/** One curve's new points in a live update; its x and y follow as two float64 buffers, in the curves' order. */
export interface CurveUpdate {
  key: string;
  name: string;
  rank: number;
  x_kind: string;
  start: number;
  reset: boolean;
  n: number;
}

export interface LiveUpdate {
  type: 'update';
  seq: number;
  full: boolean;
  curves: CurveUpdate[];
  log: LogMessage | null;
  status: Status;
}

export interface SavedCurve {
  name: string;
  rank: number;
  x_kind: string;
  x: number[];
  y: (number | null)[];
  points: number;
}

export interface SavedView {
  version: number;
  plots: string[];
  ranks: number[];
  smoothing: number | null;
  log_y: boolean;
  status: SavedStatus;
  curves: SavedCurve[];
  log: LogMessage;
  view_id: string | null;
}
