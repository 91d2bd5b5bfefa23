// REST calls of the chat page and their errors, in words a user can read.

export class ApiError extends Error {
  constructor(status, code, detail, message) {
    super(message);
    this.status = status;   // HTTP status, 0 when the server could not be reached
    this.code = code;       // the service's error name ("conflict", "gone", ...)
    this.detail = detail;
  }
}

// What users read for a status when the server gave no message of its own.
const STATUS_TEXT = {
  0: "The server cannot be reached. Check your connection and try again.",
  401: "You are not signed in, or your token expired. Enter a new token.",
  404: "This conversation does not exist or is not yours.",
  409: "This question was answered already.",
  410: "This question expired before it was answered. Send a new message to start again.",
  413: "That is too long for the server.",
  422: "The server did not accept that input.",
  429: "Too many requests. Wait a moment and try again.",
};

function detailText(detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail.map((d) => (typeof d === "string" ? d : d && d.msg)).filter(Boolean).join("; ");
  }
  if (detail && typeof detail.message === "string") return detail.message;
  return "";
}

export function describe(status, body) {
  const own = body ? detailText(body.detail) : "";
  const base = STATUS_TEXT[status] || (status >= 500 ? "The server had a problem. Try again in a moment." : "");
  // "invalid token" alone does not tell the user what to do; "conversation not found" leaves out
  // that it may be someone else's (the API does not tell them apart, on purpose).
  if (status === 401 || status === 404) return base;
  if (status === 422 && own) return `${base} ${own}`;
  if (own) return own.charAt(0).toUpperCase() + own.slice(1) + (/[.!?]$/.test(own) ? "" : ".");
  return base || `Request failed (${status}).`;
}

// credentials(): {token} for a pasted token (development sign-in), or {csrf} when the page is
// signed in with the identity provider: the session cookie goes along by itself (the page never
// sees a token), and what changes something carries the session's CSRF token.
export function createApi(credentials) {
  return async function api(method, path, body) {
    const { token, csrf } = credentials();
    const headers = { "Content-Type": "application/json" };
    if (token) headers.Authorization = "Bearer " + token;
    if (csrf && method !== "GET") headers["X-CSRF-Token"] = csrf;
    let res;
    try {
      res = await fetch(path, {
        method,
        headers,
        credentials: "same-origin",
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (err) {
      throw new ApiError(0, "network_error", null, describe(0, null));
    }
    let data = null;
    if (res.status !== 204) {
      try { data = await res.json(); } catch (err) { data = null; }
    }
    if (!res.ok) {
      throw new ApiError(res.status, (data && data.error) || "http_error", data && data.detail, describe(res.status, data));
    }
    return data;
  };
}

// client_message_id: crypto.randomUUID only exists in secure contexts; a page served over plain
// HTTP on a LAN address still needs unique ids, and getRandomValues works everywhere.
export function newId() {
  if (window.crypto && typeof crypto.randomUUID === "function") return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
