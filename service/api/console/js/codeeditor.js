// A code editor with each problem shown at its line, for the JSON spec and the SQL
// script alike.
//
// A plain <textarea> over a backdrop that repeats its lines: a line with a problem is
// tinted there, and the problem is written after the line's text, so it sits next to
// what it is about; the gutter's line number turns red. Both scroll together; neither
// wraps, so their lines stay aligned.

import { el } from "./util.js";

export class CodeEditor {
  // id, label: the textarea's id and accessible name; onInput: called on every edit.
  constructor(parent, { id, label, onInput }) {
    this.textarea = el("textarea", {
      class: "code",
      spellcheck: "false",
      wrap: "off",
      "aria-label": label,
      id,
    });
    this.backdrop = el("div", { class: "backdrop", "aria-hidden": "true" });
    this.gutter = el("div", { class: "gutter", "aria-hidden": "true" });
    this.root = el(
      "div",
      { class: "editor", dataset: { editor: id } },
      this.gutter,
      el("div", { class: "area" }, this.backdrop, this.textarea),
    );
    parent.append(this.root);
    this.problems = [];
    this.textarea.addEventListener("input", () => {
      this.render();
      onInput();
    });
    this.textarea.addEventListener("scroll", () => this.sync());
    this.textarea.addEventListener("keydown", (event) => {
      if (event.key === "Tab") {
        event.preventDefault();
        document.execCommand("insertText", false, "  ");
      }
    });
  }

  get text() {
    return this.textarea.value;
  }

  set text(value) {
    this.textarea.value = value;
    this.render();
  }

  set hidden(value) {
    this.root.hidden = value;
  }

  // problems: [{line, text, source, dataset}]: `text` is written after the line.
  show(problems) {
    this.problems = problems;
    this.render();
  }

  // Put the cursor at line:column (both from 1) and scroll it into view.
  goTo(line, column = 1) {
    const lines = this.textarea.value.split("\n");
    const row = Math.min(Math.max(line, 1), lines.length);
    let offset = 0;
    for (let i = 0; i < row - 1; i += 1) offset += lines[i].length + 1;
    offset += Math.min(Math.max(column - 1, 0), lines[row - 1].length);
    this.textarea.focus();
    this.textarea.setSelectionRange(offset, offset);
    const lineHeight = 20;
    const top = (row - 1) * lineHeight;
    const { scrollTop, clientHeight } = this.textarea;
    if (top < scrollTop || top + lineHeight > scrollTop + clientHeight) {
      this.textarea.scrollTop = Math.max(0, top - clientHeight / 2);
    }
    this.sync();
  }

  render() {
    const lines = this.textarea.value.split("\n");
    this.textarea.rows = Math.min(Math.max(lines.length + 1, 16), 44);
    const byLine = new Map();
    for (const problem of this.problems) {
      if (!byLine.has(problem.line)) byLine.set(problem.line, []);
      byLine.get(problem.line).push(problem);
    }
    this.backdrop.replaceChildren(
      ...lines.map((text, i) => {
        const here = byLine.get(i + 1) || [];
        return el(
          "div",
          { class: here.length ? "line bad" : "line" },
          el("span", { class: "ghost" }, text || " "),
          here.map((p) =>
            el(
              "span",
              {
                class: `problem from-${p.source}`,
                dataset: { ...p.dataset, line: String(p.line), source: p.source },
              },
              `◀ ${p.text}`,
            ),
          ),
        );
      }),
    );
    this.gutter.replaceChildren(
      ...lines.map((_, i) =>
        el(
          "div",
          { class: byLine.has(i + 1) ? "bad" : "", dataset: { line: String(i + 1) } },
          String(i + 1),
        ),
      ),
    );
    this.sync();
  }

  sync() {
    const { scrollTop, scrollLeft } = this.textarea;
    this.backdrop.style.transform = `translate(${-scrollLeft}px, ${-scrollTop}px)`;
    this.gutter.style.transform = `translateY(${-scrollTop}px)`;
  }
}
