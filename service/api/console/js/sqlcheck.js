// A SQL script checked through POST /sql/compile as one types: the spec it compiles to,
// or the service's problems, each with its statement, line and column (docs/sql.md).
// The service is the only SQL compiler: the console has none of its own.

import { ApiError, send } from "./api.js";

// The problems of a refused script (a 422's `detail`): [{line, column, statement, type,
// message, field}]. `field` is "name" for a problem of the pipeline's name, else "sql".
// A problem without a place (a body the service could not read as SQL) is at line 1.
export function sqlProblems(error) {
  if (!(error instanceof ApiError) || error.status !== 422) return null;
  const detail = Array.isArray(error.body?.detail) ? error.body.detail : [];
  return detail.map((p) => {
    const loc = Array.isArray(p.loc) ? p.loc.filter((part) => part !== "body") : [];
    return {
      line: Number.isInteger(p.line) && p.line > 0 ? p.line : 1,
      column: Number.isInteger(p.column) && p.column > 0 ? p.column : 1,
      statement: p.statement ?? 0,
      type: p.type || "",
      message: p.msg || String(p),
      field: loc[0] === "name" ? "name" : "sql",
    };
  });
}

// Compiles the newest text `delayMs` after the last change; an answer to an older text
// is dropped, so what is shown is always about the text in the editor.
export class SqlChecker {
  // onResult({spec} | {problems} | {error}) with the answer for the newest text.
  constructor(onResult, delayMs = 300) {
    this.onResult = onResult;
    this.delayMs = delayMs;
    this.timer = null;
    this.sequence = 0;
  }

  schedule(body) {
    clearTimeout(this.timer);
    this.sequence += 1;
    this.timer = setTimeout(() => this.now(body), this.delayMs);
  }

  async now(body) {
    clearTimeout(this.timer);
    this.sequence += 1;
    const mine = this.sequence;
    let result;
    try {
      result = { spec: (await send("POST", "/sql/compile", body)).spec };
    } catch (error) {
      const problems = sqlProblems(error);
      result = problems ? { problems } : { error };
    }
    if (mine === this.sequence) this.onResult(result);
  }

  stop() {
    clearTimeout(this.timer);
    this.sequence += 1;
  }
}
