// JSON.parse that also says on which line each value sits, so a problem reported for a
// JSON path (the service's 422 `loc`, a schema error's instancePath) can be shown next
// to the field it names. Strict JSON, as the service reads it.

export class JsonSyntaxError extends Error {
  constructor(message, line, column) {
    super(message);
    this.line = line;
    this.column = column;
  }
}

export const pathKey = (path) => JSON.stringify(path);

// -> {value, lines: Map(pathKey(path) -> line number, from 1)}; throws JsonSyntaxError.
export function parseWithLines(text) {
  let i = 0;
  let line = 1;
  let lineStart = 0;
  const lines = new Map();

  const fail = (message) => {
    throw new JsonSyntaxError(message, line, i - lineStart + 1);
  };
  const space = () => {
    for (;;) {
      const c = text[i];
      if (c === "\n") {
        line += 1;
        lineStart = i + 1;
        i += 1;
      } else if (c === " " || c === "\t" || c === "\r") i += 1;
      else return;
    }
  };
  const expect = (c) => {
    if (text[i] !== c) fail(i >= text.length ? `expected '${c}' before the end` : `expected '${c}'`);
    i += 1;
  };

  function string() {
    const start = i;
    expect('"');
    for (;;) {
      const c = text[i];
      if (c === undefined) fail("unterminated string");
      if (c === "\n") fail("line break inside a string");
      if (c === "\\") i += 2;
      else {
        i += 1;
        if (c === '"') break;
      }
    }
    try {
      return JSON.parse(text.slice(start, i));
    } catch {
      return fail("invalid escape in a string");
    }
  }

  function value(path) {
    space();
    lines.set(pathKey(path), line);
    const c = text[i];
    if (c === "{") return object(path);
    if (c === "[") return array(path);
    if (c === '"') return string();
    const match = /^(?:-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)/.exec(
      text.slice(i, i + 400),
    );
    if (!match) fail(c === undefined ? "unexpected end of the text" : `unexpected '${c}'`);
    i += match[0].length;
    return JSON.parse(match[0]);
  }

  function object(path) {
    expect("{");
    const result = {};
    space();
    if (text[i] === "}") {
      i += 1;
      return result;
    }
    for (;;) {
      space();
      const keyLine = line;
      if (text[i] !== '"') fail("expected a field name in double quotes");
      const key = string();
      space();
      expect(":");
      result[key] = value([...path, key]);
      lines.set(pathKey([...path, key]), keyLine);
      space();
      if (text[i] === ",") {
        i += 1;
        continue;
      }
      expect("}");
      return result;
    }
  }

  function array(path) {
    expect("[");
    const result = [];
    space();
    if (text[i] === "]") {
      i += 1;
      return result;
    }
    for (;;) {
      result.push(value([...path, result.length]));
      space();
      if (text[i] === ",") {
        i += 1;
        continue;
      }
      expect("]");
      return result;
    }
  }

  const result = value([]);
  space();
  if (i < text.length) fail("unexpected text after the value");
  lines.set(pathKey([]), 1);
  return { value: result, lines };
}

// The line of `path`, or of its deepest part that exists in the text.
export function lineOf(lines, path) {
  for (let n = path.length; n >= 0; n -= 1) {
    const found = lines.get(pathKey(path.slice(0, n)));
    if (found !== undefined) return found;
  }
  return 1;
}
