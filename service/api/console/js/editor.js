// Create / edit, in JSON or SQL (a toggle):
// - JSON: the spec, checked against /schema/pipeline as one types (ajv), and the
//   service's 422 problems shown next to the fields they name.
// - SQL: a script (docs/sql.md), compiled through POST /sql/compile as one types: each
//   problem at its line (and in a list whose line:column moves the cursor there), the
//   compiled spec one click away; submitted as {"name", "sql"}.
// A SQL pipeline opens in SQL, a JSON one in JSON.

import { ApiError, get, send } from "./api.js";
import { CodeEditor } from "./codeeditor.js";
import { lineOf, parseWithLines } from "./jsonpos.js";
import { loadValidator, schemaProblems } from "./schema.js";
import { SqlChecker, sqlProblems } from "./sqlcheck.js";
import { el } from "./util.js";

// What the SQL editor starts from on a new pipeline: docs/sql.md's first script.
const STARTER_NAME = "revenue-per-user";
const STARTER_SQL = `CREATE SOURCE orders (
  "user" VARCHAR, amount DOUBLE, status VARCHAR, ts BIGINT,
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (topic = 'orders', partitioned_by = 'user');

INSERT INTO "revenue-per-user"
SELECT "user", window_start, window_end, COUNT(*) AS orders, SUM(amount * 1.1) AS revenue
FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE)
WHERE status = 'paid'
GROUP BY "user", window_start, window_end;
`;

export async function renderEditor(root, { name }) {
  const editing = name !== undefined;
  const examples = editing ? [] : await get("examples.json");
  const current = editing ? await get(`/pipelines/${encodeURIComponent(name)}`) : null;
  let mode = current?.sql ? "sql" : "json";
  let validate = null;
  let serverProblems = [];
  let sqlServerProblems = null; // the problems of the last refused submit, until an edit
  let timer = null;

  const picker = editing
    ? null
    : el(
        "select",
        { id: "example", "aria-label": "start from an example", onchange: () => useExample() },
        examples.map((example, i) => el("option", { value: String(i) }, example.title)),
      );
  const modeButtons = ["json", "sql"].map((m) =>
    el(
      "button",
      { type: "button", id: `mode-${m}`, dataset: { mode: m }, onclick: () => setMode(m) },
      m.toUpperCase(),
    ),
  );
  const pickerLabel = picker && el("label", {}, "Start from ", picker);
  const formatButton = el("button", { type: "button", onclick: () => format() }, "Format");
  const nameInput = el("input", {
    id: "pipeline-name",
    "aria-label": "pipeline name",
    placeholder: "pipeline name",
    value: editing ? name : STARTER_NAME,
    disabled: editing,
    oninput: () => onSqlInput(),
  });
  const nameLabel = el("label", { class: "name" }, "Name ", nameInput);
  const reset = editing ? el("input", { type: "checkbox", id: "reset-state" }) : null;
  const submit = el(
    "button",
    { type: "button", class: "primary", id: "submit-spec", onclick: () => onSubmit() },
    editing ? "Replace spec" : "Create pipeline",
  );
  const status = el("p", { class: "status", id: "editor-status", role: "status" });
  const list = el("ul", { class: "problems", id: "problems" });
  const compiled = el("pre", { class: "spec", id: "compiled-spec" });
  const compiledBox = el(
    "details",
    { id: "compiled" },
    el("summary", {}, "Compiled spec (what the service stores and runs)"),
    compiled,
  );
  root.replaceChildren(
    el("h1", {}, editing ? `Edit ${name}` : "New pipeline"),
    el(
      "div",
      { class: "toolbar" },
      el("span", { class: "modes", role: "group", "aria-label": "language" }, modeButtons),
      pickerLabel,
      formatButton,
      nameLabel,
      reset && el("label", { title: "needed when the change alters what the state is" }, reset, " reset state"),
      submit,
    ),
  );
  const jsonEditor = new CodeEditor(root, {
    id: "spec-text",
    label: "pipeline spec (JSON)",
    onInput: () => {
      serverProblems = [];
      clearTimeout(timer);
      timer = setTimeout(check, 200);
    },
  });
  const sqlEditor = new CodeEditor(root, {
    id: "sql-text",
    label: "pipeline script (SQL)",
    onInput: () => onSqlInput(),
  });
  const checker = new SqlChecker((result) => showSql(result));
  root.append(status, list, compiledBox);

  function setMode(next) {
    mode = next;
    for (const button of modeButtons) {
      const on = button.dataset.mode === mode;
      button.classList.toggle("on", on);
      button.setAttribute("aria-pressed", String(on));
    }
    const sql = mode === "sql";
    jsonEditor.hidden = sql;
    sqlEditor.hidden = !sql;
    if (pickerLabel) pickerLabel.hidden = sql;
    formatButton.hidden = sql;
    nameLabel.hidden = !sql;
    compiledBox.hidden = !sql;
    if (sql) {
      showSqlProblems([]);
      checker.now(sqlBody());
      sqlEditor.textarea.focus();
    } else {
      checker.stop();
      check();
      jsonEditor.textarea.focus();
    }
  }

  // ---- JSON ----

  function useExample() {
    jsonEditor.text = JSON.stringify(examples[Number(picker.value)].spec, null, 2);
    serverProblems = [];
    check();
  }

  function format() {
    try {
      jsonEditor.text = JSON.stringify(JSON.parse(jsonEditor.text), null, 2);
    } catch {
      // left as it is: check() shows where it does not parse
    }
    check();
  }

  // Every problem, each at the line of the field it names.
  function check() {
    if (mode !== "json") return;
    let parsed;
    try {
      parsed = parseWithLines(jsonEditor.text);
    } catch (error) {
      showJson([{ line: error.line || 1, path: [], message: `JSON: ${error.message}`, source: "json" }]);
      return;
    }
    const local = validate
      ? schemaProblems(validate, parsed.value).map((p) => ({ ...p, source: "schema" }))
      : [];
    const remote = serverProblems.map((p) => ({ ...p, source: "server" }));
    showJson([...remote, ...local].map((p) => ({ ...p, line: lineOf(parsed.lines, p.path) })));
  }

  function showJson(problems) {
    jsonEditor.show(
      problems.map((p) => ({
        line: p.line,
        source: p.source,
        text: `${p.path.length ? `${p.path.join(".")}: ` : ""}${p.message}`,
        dataset: { path: p.path.join(".") },
      })),
    );
    list.replaceChildren(
      ...problems.map((p) =>
        el(
          "li",
          { class: `from-${p.source}`, dataset: { path: p.path.join("."), source: p.source } },
          goToButton(jsonEditor, p.line, 1, `line ${p.line}`),
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

  // ---- SQL ----

  function sqlBody() {
    const body = { sql: sqlEditor.text };
    if (nameInput.value.trim()) body.name = nameInput.value.trim();
    return body;
  }

  function onSqlInput() {
    sqlServerProblems = null;
    status.textContent = "Compiling…";
    checker.schedule(sqlBody());
  }

  function showSql(result) {
    if (mode !== "sql" || sqlServerProblems) return;
    if (result.spec) {
      showSqlProblems([]);
      compiled.textContent = JSON.stringify(result.spec, null, 2);
      status.textContent = "Compiles (POST /sql/compile)";
    } else if (result.problems) {
      showSqlProblems(result.problems);
      compiled.textContent = "The script does not compile.";
      status.textContent = `${result.problems.length} problem(s) found as you type`;
    } else {
      status.textContent = `The script could not be checked: ${result.error.message}`;
    }
  }

  function showSqlProblems(problems, source = "compile") {
    sqlEditor.show(
      problems.map((p) => ({
        line: p.line,
        source,
        text: `${p.line}:${p.column} ${p.field === "name" ? "name: " : ""}${p.message}`,
        dataset: { column: String(p.column), type: p.type, field: p.field },
      })),
    );
    nameInput.classList.toggle("bad", problems.some((p) => p.field === "name"));
    list.replaceChildren(
      ...problems.map((p) =>
        el(
          "li",
          {
            class: `from-${source}`,
            dataset: { line: String(p.line), column: String(p.column), source, type: p.type },
          },
          goToButton(sqlEditor, p.line, p.column, `${p.line}:${p.column}`),
          ` ${p.statement ? `statement ${p.statement}: ` : ""}${p.field === "name" ? "name: " : ""}${p.message}`,
          el("span", { class: "who" }, p.type),
        ),
      ),
    );
  }

  // ---- both ----

  function goToButton(editor, line, column, label) {
    return el(
      "button",
      {
        type: "button",
        class: "where",
        title: "move the cursor there",
        onclick: () => editor.goTo(line, column),
      },
      label,
    );
  }

  async function onSubmit() {
    submit.disabled = true;
    status.textContent = editing ? "Replacing…" : "Creating…";
    const sql = mode === "sql";
    try {
      const path = editing
        ? `/pipelines/${encodeURIComponent(name)}${reset.checked ? "?reset_state=true" : ""}`
        : "/pipelines";
      const body = sql ? sqlBody() : jsonEditor.text;
      const saved = await send(editing ? "PUT" : "POST", path, body);
      location.hash = `#/pipelines/${encodeURIComponent(saved.name)}`;
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      const problems = sql ? sqlProblems(error) : null;
      if (problems) {
        checker.stop();
        sqlServerProblems = problems;
        showSqlProblems(problems, "server");
        status.textContent = `The service refused the script: ${problems.length} problem(s), each shown at its line`;
      } else if (!sql && error.status === 422 && Array.isArray(error.body?.detail)) {
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

  if (editing) jsonEditor.text = JSON.stringify(current.spec, null, 2);
  else useExample();
  sqlEditor.text = current?.sql ?? STARTER_SQL;
  setMode(mode);
  loadValidator()
    .then((compiledSchema) => {
      validate = compiledSchema;
      check();
    })
    .catch((error) => {
      status.textContent = `The schema did not load: ${error.message}`;
    });
  return () => {
    clearTimeout(timer);
    checker.stop();
  };
}
