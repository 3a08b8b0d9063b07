// Create / edit: a JSON editor for the spec, checked against /schema/pipeline as one
// types, and the service's 422 problems shown next to the fields they name.
//
// The editor is a plain <textarea> over a backdrop that repeats its lines: a line with a
// problem is tinted there, and the problem is written after the line's text, so it sits
// next to the field. Both scroll together; neither wraps, so their lines stay aligned.

import { ApiError, get, send } from "./api.js";
import { lineOf, parseWithLines } from "./jsonpos.js";
import { loadValidator, schemaProblems } from "./schema.js";
import { el } from "./util.js";

class JsonEditor {
  constructor(parent, onInput) {
    this.textarea = el("textarea", {
      class: "code",
      spellcheck: "false",
      wrap: "off",
      "aria-label": "pipeline spec (JSON)",
      id: "spec-text",
    });
    this.backdrop = el("div", { class: "backdrop", "aria-hidden": "true" });
    this.gutter = el("div", { class: "gutter", "aria-hidden": "true" });
    this.root = el(
      "div",
      { class: "editor" },
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

  // problems: [{line, path, message, source}]
  show(problems) {
    this.problems = problems;
    this.render();
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
                dataset: { path: p.path.join("."), line: String(p.line), source: p.source },
              },
              `◀ ${p.path.length ? `${p.path.join(".")}: ` : ""}${p.message}`,
            ),
          ),
        );
      }),
    );
    this.gutter.replaceChildren(
      ...lines.map((_, i) =>
        el("div", { class: byLine.has(i + 1) ? "bad" : "" }, String(i + 1)),
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

export async function renderEditor(root, { name }) {
  const editing = name !== undefined;
  const examples = editing ? [] : await get("examples.json");
  const current = editing ? (await get(`/pipelines/${encodeURIComponent(name)}`)).spec : null;
  let validate = null;
  let serverProblems = [];
  let timer = null;

  const picker = editing
    ? null
    : el(
        "select",
        { id: "example", "aria-label": "start from an example", onchange: () => useExample() },
        examples.map((example, i) => el("option", { value: String(i) }, example.title)),
      );
  const reset = editing ? el("input", { type: "checkbox", id: "reset-state" }) : null;
  const submit = el(
    "button",
    { type: "button", class: "primary", id: "submit-spec", onclick: () => onSubmit() },
    editing ? "Replace spec" : "Create pipeline",
  );
  const status = el("p", { class: "status", id: "editor-status", role: "status" });
  const list = el("ul", { class: "problems", id: "problems" });
  root.replaceChildren(
    el("h1", {}, editing ? `Edit ${name}` : "New pipeline"),
    el(
      "div",
      { class: "toolbar" },
      picker && el("label", {}, "Start from ", picker),
      el("button", { type: "button", onclick: () => format() }, "Format"),
      reset && el("label", { title: "needed when the change alters what the state is" }, reset, " reset state"),
      submit,
    ),
  );
  const editor = new JsonEditor(root, () => {
    serverProblems = [];
    clearTimeout(timer);
    timer = setTimeout(check, 200);
  });
  root.append(status, list);

  function useExample() {
    editor.text = JSON.stringify(examples[Number(picker.value)].spec, null, 2);
    serverProblems = [];
    check();
  }

  function format() {
    try {
      editor.text = JSON.stringify(JSON.parse(editor.text), null, 2);
      check();
    } catch {
      check();
    }
  }

  // Every problem, each at the line of the field it names.
  function check() {
    let parsed;
    try {
      parsed = parseWithLines(editor.text);
    } catch (error) {
      show([{ line: error.line || 1, path: [], message: `JSON: ${error.message}`, source: "json" }]);
      return;
    }
    const local = validate
      ? schemaProblems(validate, parsed.value).map((p) => ({ ...p, source: "schema" }))
      : [];
    const remote = serverProblems.map((p) => ({ ...p, source: "server" }));
    show([...remote, ...local].map((p) => ({ ...p, line: lineOf(parsed.lines, p.path) })));
  }

  function show(problems) {
    editor.show(problems);
    list.replaceChildren(
      ...problems.map((p) =>
        el(
          "li",
          { class: `from-${p.source}`, dataset: { path: p.path.join("."), source: p.source } },
          el("span", { class: "where" }, `line ${p.line}`),
          ` ${p.path.join(".") || "(spec)"}: ${p.message}`,
          el("span", { class: "who" }, p.source === "server" ? "service" : p.source),
        ),
      ),
    );
    if (!serverProblems.length) {
      status.textContent = problems.length
        ? `${problems.length} problem(s) found as you type`
        : validate
          ? "Valid against /schema/pipeline"
          : "";
    }
  }

  async function onSubmit() {
    submit.disabled = true;
    status.textContent = editing ? "Replacing…" : "Creating…";
    try {
      const path = editing
        ? `/pipelines/${encodeURIComponent(name)}${reset.checked ? "?reset_state=true" : ""}`
        : "/pipelines";
      const saved = await send(editing ? "PUT" : "POST", path, editor.text);
      location.hash = `#/pipelines/${encodeURIComponent(saved.name)}`;
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      if (error.status === 422 && Array.isArray(error.body?.detail)) {
        serverProblems = error.body.detail.map((p) => ({
          path: p.loc[0] === "body" ? p.loc.slice(1) : p.loc,
          message: p.msg,
        }));
        check();
        status.textContent = `The service refused the spec: ${serverProblems.length} problem(s), each shown at its field`;
      } else {
        status.textContent = `${error.status}: ${error.message}`;
      }
    } finally {
      submit.disabled = false;
    }
  }

  if (editing) editor.text = JSON.stringify(current, null, 2);
  else useExample();
  check();
  loadValidator()
    .then((compiled) => {
      validate = compiled;
      check();
    })
    .catch((error) => {
      status.textContent = `The schema did not load: ${error.message}`;
    });
  editor.textarea.focus();
  return () => clearTimeout(timer);
}
