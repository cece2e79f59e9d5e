// What the live view receives and what a saved view holds, as jupyter_hvd/widgets/schema.py defines them (held to
// the same names by tests/test_view_schema.py). One `name: type;` per line.

/** A log line: text, stream ("stdout" | "stderr"), rank (-1: jupyter-hvd's own). */
export type LogLine = [string, string, number];

export interface LogMessage {
  append: LogLine[];
  partials: LogLine[];
  total: number;
}

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

/** One curve's new points; its x and y come as two float64 buffers beside the message, in the curves' order. */
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
