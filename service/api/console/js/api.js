// The REST API as the console uses it. Reads are open (the API's rule); a change that
// gets 401 asks for the token once, keeps it for this tab, sends it as the bearer token
// and tries again.

const TOKEN_KEY = "clockwork.token";

export class ApiError extends Error {
  constructor(status, body) {
    super(typeof body?.detail === "string" ? body.detail : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

export async function get(path) {
  const response = await fetch(path, { headers: { accept: "application/json" } });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

// `body`: a string is sent as it is (the editor's text), anything else as JSON.
export async function send(method, path, body) {
  let refused = false;
  for (;;) {
    const headers = { accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.authorization = `Bearer ${token}`;
    let payload;
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      payload = typeof body === "string" ? body : JSON.stringify(body);
    }
    const response = await fetch(path, { method, headers, body: payload });
    if (response.status === 401) {
      const reason = refused || token
        ? "That token was refused. Enter the service's API token."
        : "This service needs its API token (SERVICE_API_TOKEN) for changes.";
      const given = await askToken(reason);
      if (given === null) throw new ApiError(401, { detail: "no API token given" });
      sessionStorage.setItem(TOKEN_KEY, given);
      showForget();
      refused = true;
      continue;
    }
    const data = response.status === 204 ? null : await response.json().catch(() => null);
    if (!response.ok) throw new ApiError(response.status, data);
    return data;
  }
}

function askToken(reason) {
  const dialog = document.getElementById("token-dialog");
  const input = document.getElementById("token-input");
  document.getElementById("token-reason").textContent = reason;
  input.value = "";
  return new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => resolve(dialog.returnValue === "ok" && input.value ? input.value : null),
      { once: true },
    );
    dialog.showModal();
    input.focus();
  });
}

function showForget() {
  document.getElementById("forget-token").hidden = !sessionStorage.getItem(TOKEN_KEY);
}

export function setUpToken() {
  const button = document.getElementById("forget-token");
  button.addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showForget();
  });
  showForget();
}

export function confirmDialog(text, action = "Delete") {
  const dialog = document.getElementById("confirm-dialog");
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = action;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}
