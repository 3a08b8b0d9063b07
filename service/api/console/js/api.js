// The REST API as the console uses it. With SERVICE_API_TOKEN set, changes need the token
// and so do the data reads (specs, history, the live tail) unless the service keeps them
// open (SERVICE_API_READ_OPEN). A request that gets 401 asks for the token once (one
// dialog however many requests were refused together), keeps it for this tab, sends it
// as the bearer token and tries again; nothing is shown before that.

const TOKEN_KEY = "clockwork.token";

export class ApiError extends Error {
  constructor(status, body) {
    super(typeof body?.detail === "string" ? body.detail : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

function authorized(headers) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.authorization = `Bearer ${token}`;
  return token;
}

let asking = null;

// Ask for the token after a 401 (`sent`: the token that request carried, if any); shared
// by every request refused while the dialog is open. Throws when the user cancels.
async function newToken(sent, why) {
  if (!asking) {
    const reason = sent
      ? "That token was refused. Enter the service's API token."
      : `This service needs its API token (SERVICE_API_TOKEN) ${why}.`;
    asking = askToken(reason).finally(() => {
      asking = null;
    });
  }
  const given = await asking;
  if (given === null) throw new ApiError(401, { detail: "no API token given" });
  sessionStorage.setItem(TOKEN_KEY, given);
  showForget();
}

// `body`: a string is sent as it is (the editor's text), anything else as JSON.
async function request(method, path, body) {
  for (;;) {
    const headers = { accept: "application/json" };
    const token = authorized(headers);
    let payload;
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      payload = typeof body === "string" ? body : JSON.stringify(body);
    }
    const response = await fetch(path, { method, headers, body: payload });
    if (response.status === 401) {
      // Another request may have stored a new token meanwhile: then just try again.
      if (sessionStorage.getItem(TOKEN_KEY) === token) {
        await newToken(token, method === "GET" ? "to show its data" : "for changes");
      }
      continue;
    }
    const data = response.status === 204 ? null : await response.json().catch(() => null);
    if (!response.ok) throw new ApiError(response.status, data);
    return data;
  }
}

export function get(path) {
  return request("GET", path);
}

export function send(method, path, body) {
  return request(method, path, body);
}

// Server-sent events from `path` with the bearer token (EventSource cannot send one):
// `handlers[event](data)` per event, `handlers.error()` when the stream breaks; it
// reconnects after `retryMs` until `close()`.
export function openStream(path, handlers, retryMs = 1000) {
  let closed = false;
  let controller = null;
  const run = async () => {
    while (!closed) {
      controller = new AbortController();
      try {
        const headers = { accept: "text/event-stream" };
        const token = authorized(headers);
        const response = await fetch(path, { headers, signal: controller.signal });
        if (response.status === 401) {
          if (sessionStorage.getItem(TOKEN_KEY) === token) await newToken(token, "to show its data");
          continue;
        }
        if (!response.ok || !response.body) throw new ApiError(response.status, null);
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        let event = "message";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.indexOf("\n")) >= 0) {
            const line = buffer.slice(0, end).replace(/\r$/, "");
            buffer = buffer.slice(end + 1);
            if (line.startsWith("event: ")) event = line.slice(7);
            else if (line.startsWith("data: ")) handlers[event]?.(JSON.parse(line.slice(6)));
            else if (line === "") event = "message";
          }
        }
      } catch (error) {
        if (closed) return;
        if (error instanceof ApiError && error.status === 401) {
          handlers.error?.(error);
          return; // no token given: stay disconnected
        }
      }
      if (closed) return;
      handlers.error?.();
      await new Promise((resolve) => setTimeout(resolve, retryMs));
    }
  };
  run();
  return {
    close() {
      closed = true;
      controller?.abort();
    },
  };
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
