// The live view's log: the shown ranks' lines with their ANSI colours, capped at --log-lines, progress bars in place;
// with several ranks one coloured lane per rank (a tab per rank, or all together), and a search over the lines.

const PALETTE = [
  "#3e424d", "#e75c58", "#00a250", "#ddb62b", "#208ffb", "#d160c4", "#60c6c8", "#c5c1b4",
  "#282c36", "#b22b31", "#007427", "#b27d12", "#0065ca", "#a03196", "#258f8f", "#a1a6b2",
];

export function escapeHtml(text) {
  return text.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

function colour256(n) {
  if (n < 16) return PALETTE[n];
  if (n >= 232) {
    const v = 8 + (n - 232) * 10;
    return `rgb(${v},${v},${v})`;
  }
  const i = n - 16;
  const level = (k) => (k === 0 ? 0 : 55 + k * 40);
  return `rgb(${level(Math.floor(i / 36))},${level(Math.floor(i / 6) % 6)},${level(i % 6)})`;
}

function applySgr(style, params) {
  const codes = params === "" ? [0] : params.split(";").map((p) => Number(p || 0));
  for (let i = 0; i < codes.length; i++) {
    const c = codes[i];
    if (c === 0) Object.assign(style, { fg: null, bg: null, bold: false, italic: false, underline: false });
    else if (c === 1) style.bold = true;
    else if (c === 3) style.italic = true;
    else if (c === 4) style.underline = true;
    else if (c === 22) style.bold = false;
    else if (c === 23) style.italic = false;
    else if (c === 24) style.underline = false;
    else if (c >= 30 && c <= 37) style.fg = PALETTE[c - 30];
    else if (c >= 90 && c <= 97) style.fg = PALETTE[c - 90 + 8];
    else if (c === 39) style.fg = null;
    else if (c >= 40 && c <= 47) style.bg = PALETTE[c - 40];
    else if (c >= 100 && c <= 107) style.bg = PALETTE[c - 100 + 8];
    else if (c === 49) style.bg = null;
    else if ((c === 38 || c === 48) && codes[i + 1] === 5) {
      style[c === 38 ? "fg" : "bg"] = colour256(codes[i + 2] ?? 0);
      i += 2;
    } else if ((c === 38 || c === 48) && codes[i + 1] === 2) {
      style[c === 38 ? "fg" : "bg"] = `rgb(${codes[i + 2] ?? 0},${codes[i + 3] ?? 0},${codes[i + 4] ?? 0})`;
      i += 4;
    }
  }
}

/** Text with ANSI colour codes as HTML spans; other escape sequences (cursor moves) are dropped. */
export function ansiToHtml(text) {
  const style = { fg: null, bg: null, bold: false, italic: false, underline: false };
  const re = /\x1b\[([0-9;?]*)([A-Za-z])|\x1b[()][A-Za-z0-9]|\x1b[=>]/g;
  let out = "";
  let last = 0;
  const emit = (chunk) => {
    if (!chunk) return;
    const css = [];
    if (style.fg) css.push(`color:${style.fg}`);
    if (style.bg) css.push(`background-color:${style.bg}`);
    if (style.bold) css.push("font-weight:bold");
    if (style.italic) css.push("font-style:italic");
    if (style.underline) css.push("text-decoration:underline");
    out += css.length ? `<span style="${css.join(";")}">${escapeHtml(chunk)}</span>` : escapeHtml(chunk);
  };
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    emit(text.slice(last, m.index));
    if (m[2] === "m") applySgr(style, m[1]);
    last = re.lastIndex;
  }
  emit(text.slice(last));
  return out;
}

/** The last `maxLines` finished lines [text, stream, rank], the lines still being written, and the total count. */
export class LogModel {
  constructor(maxLines) {
    this.maxLines = maxLines;
    this.lines = []; // [text, stream, rank]
    this.partials = [];
    this.total = 0;
  }

  /** Apply a delta from the kernel; returns what a view must change: {reset, appended, removed}. */
  apply(delta, reset = false) {
    let removed = 0;
    if (reset) this.lines = [];
    for (const line of delta.append) this.lines.push(line);
    if (this.lines.length > this.maxLines) {
      removed = this.lines.length - this.maxLines;
      this.lines.splice(0, removed);
    }
    this.partials = delta.partials;
    this.total = delta.total;
    return { reset, appended: Math.min(delta.append.length, this.lines.length), removed };
  }

  get dropped() {
    return Math.max(0, this.total - this.lines.length);
  }

  /** The ranks that wrote lines, in order (-1, jupyter-hvd's own notes, left out). */
  ranks() {
    const seen = new Set();
    for (const [, , rank] of this.lines) if (rank >= 0) seen.add(rank);
    for (const [, , rank] of this.partials) if (rank >= 0) seen.add(rank);
    return [...seen].sort((a, b) => a - b);
  }
}

export const RANK_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const BAR = /\d+%\|.*\|\s*\d+\/\d+|\|\s*\d+\/\d+ \[/; // a tqdm bar: progress, not an error, though on stderr

function lineElement(doc, [text, stream, rank], lanes, query) {
  const div = doc.createElement("div");
  div.className = "jhvd-line";
  if (stream === "stderr" && !BAR.test(text)) div.classList.add("jhvd-stderr");
  if (rank !== undefined) div.dataset.rank = String(rank);
  if (lanes && rank >= 0) {
    div.classList.add("jhvd-lane");
    div.style.setProperty("--jhvd-lane", RANK_COLOURS[rank % RANK_COLOURS.length]);
    const badge = doc.createElement("span");
    badge.className = "jhvd-rank-badge";
    badge.textContent = String(rank);
    badge.title = `rank ${rank}`;
    div.appendChild(badge);
  }
  const body = doc.createElement("span");
  body.className = "jhvd-line-text";
  let markup = ansiToHtml(text) || "&#8203;";
  if (query) markup = highlight(markup, query);
  body.innerHTML = markup;
  div.appendChild(body);
  return div;
}

/** `html` with each match of `query` (case-insensitive, in the text, never in a tag) inside <mark>. */
export function highlight(html, query) {
  const needle = escapeHtml(query).toLowerCase();
  if (!needle) return html;
  return html.replace(/(^|>)([^<]+)/g, (m, open, text) => {
    let out = "";
    let i = 0;
    const lower = text.toLowerCase();
    for (let j = lower.indexOf(needle); j >= 0; j = lower.indexOf(needle, i)) {
      out += text.slice(i, j) + `<mark>${text.slice(j, j + needle.length)}</mark>`;
      i = j + needle.length;
    }
    return open + out + text.slice(i);
  });
}

/** Whether a line's visible text contains `query` (case-insensitive). */
function matches(text, query) {
  return text.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "").toLowerCase().includes(query.toLowerCase());
}

/**
 * The log's DOM. With one rank, its lines; with several, a lane per rank (a coloured edge and the rank's number) and
 * tabs: every rank together, or one rank. A search box keeps the lines that contain its text. Appends and removes
 * line elements as lines come (no re-render of the whole log) unless a tab or a search filters them.
 */
export class LogView {
  constructor(el, model, shownRanks = [0]) {
    const doc = el.ownerDocument;
    this.model = model;
    this.shownRanks = shownRanks;
    /** @type {"all" | number} */
    this.tab = "all"; // "all" or a rank
    this.query = "";
    this.root = doc.createElement("div");
    this.root.className = "jhvd-log-box";
    this.bar = doc.createElement("div");
    this.bar.className = "jhvd-log-bar";
    this.tabs = doc.createElement("div");
    this.tabs.className = "jhvd-tabs";
    this.tabs.setAttribute("role", "tablist");
    this.search = doc.createElement("input");
    this.search.type = "search";
    this.search.className = "jhvd-search";
    this.search.placeholder = "search the log";
    this.search.setAttribute("aria-label", "search the log");
    this.found = doc.createElement("span");
    this.found.className = "jhvd-found";
    this.bar.append(this.tabs, this.search, this.found);
    this.scroller = doc.createElement("div");
    this.scroller.className = "jhvd-log";
    this.droppedEl = doc.createElement("div");
    this.droppedEl.className = "jhvd-log-dropped";
    this.linesEl = doc.createElement("div");
    this.linesEl.className = "jhvd-log-lines";
    this.partialsEl = doc.createElement("div");
    this.partialsEl.className = "jhvd-log-partials";
    this.scroller.append(this.droppedEl, this.linesEl, this.partialsEl);
    this.root.append(this.bar, this.scroller);
    el.appendChild(this.root);
    // The log follows its end (where the run is) until the user scrolls up, and shows its end again once scrolled
    // back down; a log drawn before it is on the page (a saved view) shows its end when it gets its size there.
    this.following = true;
    this.scroller.addEventListener("scroll", () => {
      this.following = this.atEnd();
    });
    const Observer = doc.defaultView?.ResizeObserver;
    this.resizeObserver = Observer ? new Observer(() => this.follow()) : null;
    this.resizeObserver?.observe(this.scroller);
    this.tabs.addEventListener("click", (e) => {
      const tab = e.target.closest?.("[data-tab]")?.dataset.tab;
      if (tab === undefined) return;
      this.tab = tab === "all" ? "all" : Number(tab);
      this.update({ reset: true });
    });
    this.search.addEventListener("input", () => {
      this.query = this.search.value;
      this.update({ reset: true });
    });
    this.update({ reset: true });
  }

  /** Whether lines carry their rank's lane: several ranks shown, or one that is not rank 0. */
  get lanes() {
    return this.shownRanks.length > 1 || this.model.ranks().some((r) => r !== (this.shownRanks[0] ?? 0));
  }

  visible(line) {
    if (this.tab !== "all" && line[2] !== this.tab) return false;
    return !this.query || matches(line[0], this.query);
  }

  showTabs() {
    const doc = this.root.ownerDocument;
    const ranks = [...new Set([...this.shownRanks, ...this.model.ranks()])].sort((a, b) => a - b);
    const many = this.lanes && ranks.length > 1;
    this.tabs.style.display = many ? "" : "none";
    if (!many) return;
    const key = ranks.join(",") + "|" + this.tab;
    if (this.tabs.dataset.key === key) return;
    this.tabs.dataset.key = key;
    const tab = (value, label, colour) => {
      const b = doc.createElement("button");
      b.type = "button";
      b.className = "jhvd-tab";
      b.dataset.tab = String(value);
      b.setAttribute("role", "tab");
      b.setAttribute("aria-selected", String(this.tab === value));
      if (colour) b.style.setProperty("--jhvd-lane", colour);
      b.textContent = label;
      return b;
    };
    this.tabs.replaceChildren(
      tab("all", "all ranks"),
      ...ranks.map((r) => tab(r, `rank ${r}`, RANK_COLOURS[r % RANK_COLOURS.length])),
    );
  }

  /** Whether the log is scrolled to (near) its end. */
  atEnd() {
    const el = this.scroller;
    return el.scrollHeight - el.scrollTop - el.clientHeight < 24;
  }

  /** Scroll to the end while the log follows it. */
  follow() {
    if (this.following) this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  destroy() {
    this.resizeObserver?.disconnect();
  }

  update(change) {
    const doc = this.root.ownerDocument;
    const lines = this.model.lines;
    const lanes = this.lanes && this.tab === "all";
    const filtered = this.tab !== "all" || this.query;
    const make = (l) => lineElement(doc, l, lanes, this.query);
    if (filtered || change.reset || change.removed >= this.linesEl.childElementCount) {
      const shown = filtered ? lines.filter((l) => this.visible(l)) : lines;
      this.linesEl.replaceChildren(...shown.map(make));
      this.found.textContent = this.query ? `${shown.length.toLocaleString("en-US")} line${shown.length === 1 ? "" : "s"}` : "";
    } else {
      for (let i = 0; i < change.removed; i++) this.linesEl.firstElementChild?.remove();
      const frag = doc.createDocumentFragment();
      for (const line of lines.slice(lines.length - change.appended)) frag.appendChild(make(line));
      this.linesEl.appendChild(frag);
      while (this.linesEl.childElementCount > lines.length) this.linesEl.firstElementChild.remove();
    }
    // Progress bars: one element per bar, rewritten in place.
    const partials = this.model.partials.filter((l) => this.visible(l));
    while (this.partialsEl.childElementCount > partials.length) this.partialsEl.lastElementChild.remove();
    partials.forEach((p, i) => {
      const old = this.partialsEl.children[i];
      const fresh = make(p);
      fresh.classList.add("jhvd-partial");
      if (old) old.replaceWith(fresh);
      else this.partialsEl.appendChild(fresh);
    });
    const dropped = this.model.dropped;
    this.droppedEl.textContent = dropped
      ? `… ${dropped.toLocaleString("en-US")} earlier line${dropped === 1 ? "" : "s"} not shown (--log-lines)`
      : "";
    this.droppedEl.style.display = dropped ? "" : "none";
    this.showTabs();
    const any = lines.length || this.model.partials.length;
    this.root.style.display = any ? "" : "none";
    // The search is worth its room once the log is longer than a glance, or has several ranks' lanes.
    this.bar.style.display = any && (this.lanes || lines.length > 12 || this.query) ? "" : "none";
    this.follow();
  }
}
