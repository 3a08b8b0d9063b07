// The spec checked against the service's own /schema/pipeline with ajv (vendored), and
// ajv's errors turned into {path, message} problems a person can act on.

import { get } from "./api.js";

let compiled = null;

export async function loadValidator() {
  if (compiled) return compiled;
  const schema = await get("/schema/pipeline");
  // ajv's OpenAPI discriminator support (one branch checked, so one branch's errors)
  // takes no `mapping`; the branches' `type` consts say the same.
  const strip = (node) => {
    if (Array.isArray(node)) node.forEach(strip);
    else if (node && typeof node === "object") {
      if (node.discriminator) delete node.discriminator.mapping;
      Object.values(node).forEach(strip);
    }
  };
  strip(schema);
  delete schema.$schema;
  const Ajv = window.ajv2020.default || window.ajv2020;
  const ajv = new Ajv({ allErrors: true, strict: false, discriminator: true });
  compiled = ajv.compile(schema);
  return compiled;
}

function pathOf(instancePath, value) {
  const path = [];
  let node = value;
  for (const raw of instancePath.split("/").slice(1)) {
    const part = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    const key = Array.isArray(node) ? Number(part) : part;
    path.push(key);
    node = node?.[key];
  }
  return path;
}

const GENERIC = new Set(["if", "oneOf", "anyOf", "allOf"]);

function message(error) {
  const p = error.params || {};
  switch (error.keyword) {
    case "required":
      return "required";
    case "additionalProperties":
      return "unknown field";
    case "false schema":
      return "not allowed here";
    case "not":
      return "this value is not allowed here";
    case "const":
      return `must be ${JSON.stringify(p.allowedValue)}`;
    case "enum":
      return `must be one of ${p.allowedValues.map((v) => JSON.stringify(v)).join(", ")}`;
    case "type":
      return `must be ${p.type === "null" ? "left out" : `a${/^[aeiou]/.test(p.type) ? "n" : ""} ${p.type}`}`;
    case "oneOf":
      return "give exactly one of the allowed forms (aggregations or a function)";
    case "anyOf":
      return "matches none of the allowed forms";
    case "uniqueItems":
      return "listed twice";
    case "propertyNames":
      return "invalid name";
    default:
      return error.message;
  }
}

// -> [{path: [...], message}] for `value`, empty when the schema accepts it.
export function schemaProblems(validate, value) {
  if (validate(value)) return [];
  const problems = [];
  for (const error of validate.errors) {
    const path = pathOf(error.instancePath, value);
    if (error.keyword === "required") path.push(error.params.missingProperty);
    if (error.keyword === "additionalProperties") path.push(error.params.additionalProperty);
    if (error.keyword === "propertyNames") path.push(error.params.propertyName);
    // pydantic's optional fields are anyOf [the thing, null]: "must be null" only
    // matters when nothing else was said about the value.
    const orNull = error.keyword === "type" && error.params.type === "null";
    problems.push({ path, message: message(error), generic: GENERIC.has(error.keyword) || orNull });
  }
  const specific = problems.filter((p) => !p.generic);
  const kept = problems.filter(
    (p) =>
      !p.generic ||
      // a generic one only when nothing more precise was said at or under its path
      !specific.some((s) => p.path.every((part, i) => s.path[i] === part)),
  );
  const seen = new Set();
  return kept
    .filter((p) => p.message !== 'must match "then" schema' && p.message !== 'must match "else" schema')
    .filter((p) => {
      const key = JSON.stringify([p.path, p.message]);
      if (seen.has(key)) return false;
      seen.add(key);
      return true;
    })
    .map(({ path, message: text }) => ({ path, message: text }));
}
