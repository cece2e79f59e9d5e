// The live view's log component: ANSI colours, capped lines with a dropped count, progress bars in place.
import { describe, expect, it } from "vitest";
import { LogModel, LogView, ansiToHtml } from "../src/log.js";

describe("ansiToHtml", () => {
  it("keeps colours as spans and escapes HTML", () => {
    const html = ansiToHtml("\x1b[31mred <b>\x1b[0m plain \x1b[1;32mbold green\x1b[0m");
    expect(html).toContain('<span style="color:#e75c58">red &lt;b&gt;</span>');
    expect(html).toContain(" plain ");
    expect(html).toContain('<span style="color:#00a250;font-weight:bold">bold green</span>');
  });

  it("handles 256-colour and truecolour codes and drops cursor movement", () => {
    expect(ansiToHtml("\x1b[38;5;196mx")).toContain("color:rgb(255,0,0)");
    expect(ansiToHtml("\x1b[38;2;1;2;3mx")).toContain("color:rgb(1,2,3)");
    expect(ansiToHtml("\x1b[Aup\x1b[2K")).toBe("up");
  });
});

function delta(lines, partials = [], total = null, rank = 0) {
  return { append: lines.map((t) => [t, "stdout", rank]), partials: partials.map((t) => [t, "stderr", rank]), total };
}

describe("LogModel", () => {
  it("keeps the last N lines and counts the dropped ones", () => {
    const log = new LogModel(3);
    const change = log.apply(delta(["a", "b", "c", "d", "e"], [], 5));
    expect(log.lines.map((l) => l[0])).toEqual(["c", "d", "e"]);
    expect(log.dropped).toBe(2);
    expect(change).toEqual({ reset: false, appended: 3, removed: 2 });
  });

  it("counts lines the engine dropped before they reached the view", () => {
    const log = new LogModel(10);
    log.apply(delta(["x"], [], 51));
    expect(log.dropped).toBe(50);
  });
});

describe("LogView", () => {
  it("appends line elements without re-rendering the old ones", () => {
    const el = document.createElement("div");
    const log = new LogModel(100);
    const view = new LogView(el, log);
    view.update(log.apply(delta(["one", "two"], [], 2)));
    const first = el.querySelector(".jhvd-line");
    view.update(log.apply(delta(["three"], [], 3)));
    expect([...el.querySelectorAll(".jhvd-log-lines .jhvd-line")].map((d) => d.textContent)).toEqual([
      "one",
      "two",
      "three",
    ]);
    expect(el.querySelector(".jhvd-line")).toBe(first);
  });

  it("shows a progress bar as one line that is rewritten in place", () => {
    const el = document.createElement("div");
    const log = new LogModel(100);
    const view = new LogView(el, log);
    for (let i = 0; i <= 100; i += 10) view.update(log.apply(delta([], [`${i}%|####| ${i}/100`], 0)));
    const bars = el.querySelectorAll(".jhvd-partial");
    expect(bars.length).toBe(1);
    expect(bars[0].textContent).toBe("100%|####| 100/100");
    expect(bars[0].classList.contains("jhvd-stderr")).toBe(false); // a bar on stderr is progress, not an error
  });

  it("caps the lines and says how many were dropped", () => {
    const el = document.createElement("div");
    const log = new LogModel(5);
    const view = new LogView(el, log);
    let total = 0;
    for (let batch = 0; batch < 4; batch++) {
      const lines = Array.from({ length: 4 }, (_, i) => `line ${batch * 4 + i}`);
      total += lines.length;
      view.update(log.apply(delta(lines, [], total)));
    }
    const shown = [...el.querySelectorAll(".jhvd-log-lines .jhvd-line")].map((d) => d.textContent);
    expect(shown).toEqual(["line 11", "line 12", "line 13", "line 14", "line 15"]);
    expect(el.querySelector(".jhvd-log-dropped").textContent).toContain("11 earlier lines not shown");
  });

  it("renders colours of a line", () => {
    const el = document.createElement("div");
    const log = new LogModel(5);
    const view = new LogView(el, log);
    view.update(log.apply(delta(["\x1b[32mok\x1b[0m"], [], 1)));
    expect(el.querySelector(".jhvd-line-text span").style.color).toBeTruthy();
  });
});

describe("LogView with several ranks", () => {
  function twoRanks() {
    const el = document.createElement("div");
    document.body.appendChild(el);
    const log = new LogModel(100);
    const view = new LogView(el, log, [0, 1]);
    view.update(log.apply({ append: [["epoch 0 loss=1.0", "stdout", 0], ["rank 1 ready", "stdout", 1], ["epoch 1 loss=0.5", "stdout", 0], ["Warning: slow", "stderr", 1]], partials: [], total: 4 }));
    return { el, view };
  }
  const shown = (el) => [...el.querySelectorAll(".jhvd-log-lines .jhvd-line")].map((d) => [d.dataset.rank, d.querySelector(".jhvd-line-text").textContent]);

  it("draws each rank's lines in its own lane, with its number", () => {
    const { el } = twoRanks();
    const lines = [...el.querySelectorAll(".jhvd-log-lines .jhvd-line")];
    expect(lines.map((d) => d.querySelector(".jhvd-rank-badge").textContent)).toEqual(["0", "1", "0", "1"]);
    expect(lines[1].style.getPropertyValue("--jhvd-lane")).not.toBe(lines[0].style.getPropertyValue("--jhvd-lane"));
    expect([...el.querySelectorAll(".jhvd-tab")].map((t) => t.textContent)).toEqual(["all ranks", "rank 0", "rank 1"]);
  });

  it("shows one rank's lines in its tab, and the lines that contain the search", () => {
    const { el, view } = twoRanks();
    el.querySelector('.jhvd-tab[data-tab="1"]').click();
    expect(shown(el)).toEqual([["1", "rank 1 ready"], ["1", "Warning: slow"]]);
    el.querySelector('.jhvd-tab[data-tab="all"]').click();
    view.search.value = "LOSS";
    view.search.dispatchEvent(new Event("input"));
    expect(shown(el)).toEqual([["0", "epoch 0 loss=1.0"], ["0", "epoch 1 loss=0.5"]]);
    expect(el.querySelectorAll(".jhvd-line mark").length).toBe(2);
    expect(el.querySelector(".jhvd-found").textContent).toBe("2 lines");
  });
});

describe("LogView's end", () => {
  // happy-dom lays nothing out: the log's box gets sizes from the test, and its ResizeObserver is called by it.
  function sized(el) {
    const observers = [];
    el.ownerDocument.defaultView.ResizeObserver = class {
      constructor(callback) {
        observers.push(callback);
      }
      observe() {}
      disconnect() {}
    };
    const log = new LogModel(1000);
    const view = new LogView(el, log);
    const box = { attached: false, lineHeight: 18, height: 320 };
    const scroller = el.querySelector(".jhvd-log");
    let top = 0;
    Object.defineProperties(scroller, {
      scrollHeight: { get: () => (box.attached ? log.lines.length * box.lineHeight : 0) },
      clientHeight: { get: () => (box.attached ? box.height : 0) },
      scrollTop: {
        get: () => top,
        set: (v) => {
          top = Math.max(0, Math.min(v, scroller.scrollHeight - scroller.clientHeight));
        },
      },
    });
    const lines = (n, from = 0) => view.update(log.apply(delta(Array.from({ length: n }, (_, i) => `line ${from + i}`))));
    const atEnd = () => scroller.scrollTop + scroller.clientHeight >= scroller.scrollHeight - 1;
    const resized = () => observers.forEach((callback) => callback([]));
    return { box, scroller, lines, atEnd, resized, userScrolls: (v) => {
      scroller.scrollTop = v;
      scroller.dispatchEvent(new Event("scroll"));
    } };
  }

  it("follows the last line as lines come, until the user scrolls up, and again once back at the end", () => {
    const el = document.createElement("div");
    document.body.appendChild(el);
    const { box, lines, atEnd, userScrolls } = sized(el);
    box.attached = true;
    lines(100);
    expect(atEnd()).toBe(true);
    userScrolls(200); // reading earlier lines: new ones do not move the log
    lines(10, 100);
    expect(atEnd()).toBe(false);
    userScrolls(10000); // back at the end: it follows again
    lines(10, 110);
    expect(atEnd()).toBe(true);
  });

  it("shows its last line when drawn before it is on the page (a saved view, a finished cell)", () => {
    const el = document.createElement("div"); // not in the document yet: no size
    const { box, lines, atEnd, resized } = sized(el);
    lines(200);
    box.attached = true; // JupyterLab puts the output on the page, the box gets its size
    resized();
    expect(atEnd()).toBe(true);
  });
});
