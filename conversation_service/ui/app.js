// The chat page: sign-in (at the identity provider, or by a pasted development token), the
// conversation list, the open conversation and the composer.
// Plain ES modules, no build step.
import { ApiError, createApi, newId } from "./api.js";
import { ChatView } from "./chat.js";
import { el } from "./dom.js";
import { ConversationSocket } from "./socket.js";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "chat.token";
const SIGNED_OUT_KEY = "chat.signedOut";  // set before the page leaves to sign out at the provider
const DRAFT_KEY = "chat.draft:";          // + conversation id: what was being written survives a re-login
const HISTORY_PAGE = 200;
const HISTORY_MAX = 5000;  // a very long conversation shows its first 5000 messages, not a frozen tab

// ---- token ----------------------------------------------------------------------------------

// A token in the address bar (?token=...) is taken once and removed, so it does not stay in the
// history, in bookmarks or in a copied link.
function takeTokenFromUrl() {
  const url = new URL(location.href);
  const token = url.searchParams.get("token");
  if (token === null) return;
  url.searchParams.delete("token");
  history.replaceState(history.state, "", url.pathname + url.search + url.hash);
  if (token.trim()) sessionStorage.setItem(TOKEN_KEY, token.trim());
}

// How the page signs in, from GET /auth/session: "development" (a pasted token, kept in this
// tab's sessionStorage) or "oidc" (the identity provider: an HttpOnly session cookie the page
// cannot read, and a CSRF token for what changes something).
const auth = { mode: "development", login: false, signedIn: false, user: null, csrf: "" };

// The session cookie when the service signs the page in at the provider; else a pasted token
// (a development token, or an access token of the provider when the page has no sign-in of its own).
function cookieAuth() { return auth.mode === "oidc" && auth.login; }
function token() { return cookieAuth() ? "" : sessionStorage.getItem(TOKEN_KEY) || ""; }
function signedIn() { return cookieAuth() ? auth.signedIn : Boolean(token()); }

// Who the token says we are, for the header only; the server checks the token itself.
function tokenSubject(value) {
  try {
    const part = value.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const claims = JSON.parse(atob(part.padEnd(part.length + ((4 - (part.length % 4)) % 4), "=")));
    return typeof claims.sub === "string" ? claims.sub : "";
  } catch (err) {
    return "";
  }
}

const api = createApi(() => ({ token: token(), csrf: auth.csrf }));

async function readSession() {
  try {
    const res = await fetch("/auth/session", { credentials: "same-origin" });
    if (!res.ok) return;
    const info = await res.json();
    Object.assign(auth, { mode: info.mode, login: info.login, signedIn: Boolean(info.signed_in),
                          user: info.user, csrf: info.csrf_token || "" });
  } catch (err) {
    // Unreachable: the requests that follow say so.
  }
}

// To the provider's sign-in, coming back to this conversation (the draft waits in sessionStorage).
function signIn() {
  const here = location.pathname + location.search + location.hash;
  location.assign("/auth/login?return_to=" + encodeURIComponent(here));
}

const SIGN_IN_ERRORS = {
  denied: "The sign-in was cancelled.",
  unavailable: "The identity provider cannot be reached. Try again in a moment.",
  expired: "The sign-in took too long, or was started in another tab. Try again.",
  state: "The sign-in took too long, or was started in another tab. Try again.",
};

// A ?signin_error=... the server sent back: said once, and taken out of the address.
function takeSignInError() {
  const url = new URL(location.href);
  const code = url.searchParams.get("signin_error");
  if (code === null) return null;
  url.searchParams.delete("signin_error");
  history.replaceState(history.state, "", url.pathname + url.search + url.hash);
  return SIGN_IN_ERRORS[code] || "The sign-in failed. Try again.";
}

// Signed in with the provider no more (signed out elsewhere, or the provider ended the session):
// the page stays as it is, the draft too, and offers to sign in again.
function sessionEnded() {
  auth.signedIn = false;
  auth.csrf = "";
  if (state.socket) state.socket.stop();
  showIdentity();
  banner("Your session ended. Sign in again to carry on; what you were writing is kept.");
}

// ---- page state -----------------------------------------------------------------------------

const state = {
  current: null,       // the open conversation's id
  conversation: null,  // and its row (title), once loaded
  query: "",           // the search over titles the list shows
  socket: null,
  generation: 0,       // bumps on every open(), so a slow load for an older choice is dropped
  sending: false,
  streaming: null,     // the id of the reply streaming now: the Stop button (in place of Send) stops it
  draft: null,         // {text, id}: a failed send retried with the same text keeps its client_message_id
};

function banner(text, kind) {
  const box = $("banner");
  $("banner-text").textContent = text || "";
  box.dataset.kind = kind || "error";
  box.hidden = !text;
}

const statusLine = {
  set(text, busy) {
    const node = $("status");
    node.textContent = text || "";
    node.classList.toggle("busy", Boolean(text && busy));
  },
};

function connection(stateName, info) {
  const node = $("connection");
  node.dataset.state = stateName;
  const labels = {
    connecting: "Connecting…",
    reconnecting: "Reconnecting…",
    live: "Live",
    refused: "Not allowed",
    offline: "",
  };
  node.textContent = stateName === "waiting"
    ? `Connection lost; retrying in ${Math.max(1, Math.round(info.delay / 1000))} s`
    : labels[stateName] ?? "";
  if (stateName === "refused") {
    if (cookieAuth()) {
      readSession().then(() => {
        if (!auth.signedIn) sessionEnded();
        else banner("The live connection was refused.");
      });
    } else {
      banner("The live connection was refused: your token may have expired. Enter a new token.");
    }
  }
}

// From the moment a message (or an answer to the agent) is sent until the first frame of its reply.
// The echo of the user's own message is not the reply; a notice (the agent is unavailable,
// answering directly) is shown as a banner at once while the reply is still to come.
const typing = {
  start() { $("typing").hidden = false; },
  stop() { $("typing").hidden = true; },
  frame(frame) {
    const own = frame.type === "message.created" && frame.data && frame.data.role === "user";
    // The old answer leaving the page (regenerate, retry) is not the new one beginning either.
    if (!own && frame.type !== "notice" && frame.type !== "message.replaced") this.stop();
  },
};

const chat = new ChatView({
  list: $("messages"),
  status: statusLine,
  answer: async (questionId, text, approved) => {
    const body = { question_id: questionId, answer: text };
    if (approved !== undefined) body.approved = approved;
    typing.start();
    try {
      return await api("POST", `/conversations/${encodeURIComponent(state.current)}/agent-answer`, body);
    } catch (err) {
      typing.stop();
      throw err;
    }
  },
  notice: (data) => banner(typeof data.text === "string" ? data.text : "", "notice"),
  regenerate: async (messageId) => {
    const conversationId = state.current;
    if (!conversationId) return;
    typing.start();
    try {
      await api("POST", `/conversations/${encodeURIComponent(conversationId)}/messages/${encodeURIComponent(messageId)}/regenerate`);
    } catch (err) {
      typing.stop();
      reportError(err);
    }
  },
  replyState: (messageId) => {
    state.streaming = messageId;
    updateComposer();
  },
});

// ---- sign-in --------------------------------------------------------------------------------

function showIdentity() {
  const cookie = cookieAuth();
  const ready = signedIn();
  $("token-form").hidden = ready || cookie;
  $("sign-in-panel").hidden = ready || !cookie;
  $("identity").hidden = !ready;
  $("sign-out").hidden = cookie;   // "Change token": a pasted token only
  $("log-out").hidden = !cookie;
  const name = cookie ? (auth.user && (auth.user.name || auth.user.id)) : tokenSubject(token());
  $("who").textContent = ready ? (name || "signed in") : "";
  $("new-conversation").disabled = !ready;
  $("search").disabled = !ready;
  updateComposer();
}

$("sign-in").addEventListener("click", signIn);

$("log-out").addEventListener("click", async () => {
  $("log-out").disabled = true;
  try {
    const out = await api("POST", "/auth/logout");
    sessionStorage.setItem(SIGNED_OUT_KEY, "1");
    location.assign(out && out.redirect ? out.redirect : "/");
  } catch (err) {
    $("log-out").disabled = false;
    reportError(err);
  }
});

$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const value = $("token").value.trim();
  if (!value) return;
  sessionStorage.setItem(TOKEN_KEY, value);
  $("token").value = "";
  banner("");
  showIdentity();
  start();
});

$("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  state.generation += 1;  // a load still on its way must not render after sign-out
  closeConversation();
  $("conversations").replaceChildren();
  showIdentity();
  $("token").focus();
});

// ---- conversation list ----------------------------------------------------------------------

// On a narrow screen the list is a drawer over the conversation, opened by the header's button.
function navigation(open) {
  document.body.classList.toggle("nav-open", open);
  $("nav-toggle").setAttribute("aria-expanded", String(open));
  $("scrim").hidden = !open;
}

$("nav-toggle").addEventListener("click", () => {
  const open = !document.body.classList.contains("nav-open");
  navigation(open);
  const current = $("conversations").querySelector("[aria-current]");
  if (open) (current || $("sidebar").querySelector("button:not(:disabled)"))?.focus();
});
$("scrim").addEventListener("click", () => navigation(false));
document.addEventListener("keydown", (ev) => {
  if (ev.key === "Escape" && document.body.classList.contains("nav-open")) {
    navigation(false);
    $("nav-toggle").focus();
  }
});

// A conversation is titled after its first message; until then it is a new one.
function conversationLabel(c) {
  return c.title || "New conversation";
}

function renderConversations(items) {
  const ul = $("conversations");
  ul.replaceChildren();
  for (const c of items) {
    const li = el("li");
    const button = el("button", "conversation");
    button.append(el("span", "conversation-title", conversationLabel(c)));
    button.title = conversationLabel(c);
    button.type = "button";
    button.dataset.id = c.id;
    if (c.agent_status === "AWAITING_USER") button.append(el("span", "badge", "question"));
    button.addEventListener("click", async () => {
      const fromDrawer = document.body.classList.contains("nav-open");
      navigation(false);
      await openConversation(c.id);
      if (fromDrawer) $("content").focus();  // the drawer and the button in it are gone
    });
    li.append(button);
    ul.append(li);
  }
  markActive();
  $("empty-list").textContent = state.query ? "No conversation title matches your search." : "No conversations yet.";
  $("empty-list").hidden = items.length > 0;
}

function markActive() {
  for (const b of document.querySelectorAll("#conversations button")) {
    const active = b.dataset.id === state.current;
    b.classList.toggle("active", active);
    if (active) b.setAttribute("aria-current", "true"); else b.removeAttribute("aria-current");
  }
}

async function loadConversations() {
  const query = state.query;
  const list = await api("GET", "/conversations?limit=100" + (query ? `&q=${encodeURIComponent(query)}` : ""));
  if (query !== state.query) return list.items;  // typed on meanwhile: a newer search will render
  renderConversations(list.items);
  return list.items;
}

// The list follows the search box as the user types, one request per pause in the typing.
let searchTimer = 0;
$("search").addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => {
    state.query = $("search").value.trim();
    loadConversations().catch(reportError);
  }, 200);
});

$("new-conversation").addEventListener("click", async () => {
  const button = $("new-conversation");
  button.disabled = true;
  try {
    const created = await api("POST", "/conversations", {});  // titled by its first message
    navigation(false);
    $("search").value = state.query = "";
    await loadConversations();
    await openConversation(created.id);
    $("content").focus();
  } catch (err) {
    reportError(err);
  } finally {
    button.disabled = !signedIn();
  }
});

// ---- the open conversation ------------------------------------------------------------------

function closeConversation() {
  typing.stop();
  if (state.socket) state.socket.stop();
  state.socket = null;
  state.current = null;
  state.conversation = null;
  state.draft = null;
  chat.clear();
  connection("offline", {});
  renaming(false);
  $("chat-title").textContent = "No conversation open";
  $("conversation-actions").hidden = true;
  updateComposer();
}

function showTitle(conversation) {
  state.conversation = conversation;
  $("chat-title").textContent = conversationLabel(conversation);
  $("chat-title").title = conversationLabel(conversation);
  $("conversation-actions").hidden = false;
}

async function loadHistory(id) {
  const messages = [];
  for (let offset = 0; offset < HISTORY_MAX; offset += HISTORY_PAGE) {
    const page = await api("GET", `/conversations/${encodeURIComponent(id)}/messages?limit=${HISTORY_PAGE}&offset=${offset}`);
    messages.push(...page.items);
    if (page.items.length < HISTORY_PAGE) break;
  }
  return messages;
}

async function openConversation(id) {
  const generation = ++state.generation;
  closeConversation();
  state.current = id;
  history.replaceState(history.state, "", `${location.pathname}${location.search}#c=${encodeURIComponent(id)}`);
  markActive();
  $("chat").setAttribute("aria-busy", "true");
  try {
    // The frame seq first, then the rows: a frame after that seq may repeat what the rows show
    // (handled by id), but nothing can fall between the two.
    const conversation = await api("GET", `/conversations/${encodeURIComponent(id)}`);
    const messages = await loadHistory(id);
    const agent = await api("GET", `/conversations/${encodeURIComponent(id)}/agent-session`);
    const questions = await api("GET", `/conversations/${encodeURIComponent(id)}/agent-questions`);
    if (generation !== state.generation) return;
    showTitle(conversation);
    chat.loadHistory(messages, agent && agent.pending_question, questions.items);
    restoreDraft(id);
    state.socket = new ConversationSocket({
      conversationId: id,
      token: token() || null,
      afterSeq: conversation.last_seq || 0,
      onFrame: (frame) => {
        if (frame.type === "conversation.deleted") { deleted(id); return; }
        typing.frame(frame);
        chat.onFrame(frame);
      },
      onControl: (frame) => { if (frame.type === "error" && frame.data) banner(String(frame.data.detail || frame.data.error || "")); },
      onState: connection,
    });
    state.socket.start();
    updateComposer();
  } catch (err) {
    if (generation !== state.generation) return;
    closeConversation();
    history.replaceState(history.state, "", location.pathname + location.search);
    reportError(err);
  } finally {
    if (generation === state.generation) $("chat").removeAttribute("aria-busy");
  }
}

// ---- composer -------------------------------------------------------------------------------

function updateComposer() {
  const ready = Boolean(state.current && signedIn());
  $("content").disabled = !ready;
  $("send").disabled = !ready || state.sending || !$("content").value.trim();
  const stoppable = Boolean(ready && state.streaming);
  const moveFocus = document.activeElement === (stoppable ? $("send") : $("stop"));
  $("send").hidden = stoppable;
  $("stop").hidden = !stoppable;
  if (moveFocus) (stoppable ? $("stop") : $("send")).focus();
}

$("stop").addEventListener("click", async () => {
  const conversationId = state.current;
  const messageId = state.streaming;
  if (!conversationId || !messageId) return;
  $("stop").disabled = true;
  try {
    await api("POST", `/conversations/${encodeURIComponent(conversationId)}/messages/${encodeURIComponent(messageId)}/stop`);
  } catch (err) {
    if (err.status !== 409) reportError(err);  // 409: the reply ended meanwhile, nothing to stop
  } finally {
    $("stop").disabled = false;
  }
});

function fitComposer() {
  // The box grows with its text up to the CSS max-height, then scrolls.
  const box = $("content");
  box.style.height = "auto";
  box.style.height = box.scrollHeight + 2 + "px";
}

// The text being written is kept per conversation in this tab, so a reload or a sign-in again
// (the provider's page in between) does not lose it.
function saveDraft() {
  if (!state.current) return;
  const text = $("content").value;
  if (text) sessionStorage.setItem(DRAFT_KEY + state.current, text);
  else sessionStorage.removeItem(DRAFT_KEY + state.current);
}

function restoreDraft(id) {
  const text = sessionStorage.getItem(DRAFT_KEY + id);
  if (text && !$("content").value) {
    $("content").value = text;
    fitComposer();
  }
}

$("content").addEventListener("input", () => { fitComposer(); updateComposer(); saveDraft(); });
$("content").addEventListener("keydown", (ev) => {
  // Enter sends, Shift+Enter starts a new line (IME composition keeps its own Enter).
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    $("composer").requestSubmit();
  }
});

$("composer").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const input = $("content");
  const content = input.value.trim();
  // The flag is set before any await: a double click submits twice, the second finds it set.
  if (state.sending || !content || !state.current) return;
  state.sending = true;
  updateComposer();
  if (!state.draft || state.draft.text !== content) state.draft = { text: content, id: newId() };
  const conversationId = state.current;
  typing.start();
  try {
    await api("POST", `/conversations/${encodeURIComponent(conversationId)}/messages`,
              { content, client_message_id: state.draft.id });
    if (input.value.trim() === content) { input.value = ""; fitComposer(); saveDraft(); }
    state.draft = null;
    banner("");
    if (state.conversation && !state.conversation.title) refreshTitle(conversationId);
  } catch (err) {
    typing.stop();
    reportError(err);  // the text stays in the box; sending again reuses its client_message_id
  } finally {
    state.sending = false;
    updateComposer();
    input.focus();
  }
});

// ---- rename and delete ----------------------------------------------------------------------

// The first message has just named the conversation: its header and its entry in the list.
async function refreshTitle(id) {
  try {
    const conversation = await api("GET", `/conversations/${encodeURIComponent(id)}`);
    if (state.current === id) showTitle(conversation);
    await loadConversations();
  } catch (err) {
    reportError(err);
  }
}

function renaming(on) {
  $("rename-form").hidden = !on;
  $("chat-title").hidden = on;
  $("conversation-actions").hidden = on || !state.current;
  if (on) {
    $("rename-input").value = state.conversation ? state.conversation.title : "";
    $("rename-input").focus();
    $("rename-input").select();
  }
}

$("rename").addEventListener("click", () => renaming(true));
$("rename-cancel").addEventListener("click", () => { renaming(false); $("rename").focus(); });
$("rename-form").addEventListener("keydown", (ev) => {
  if (ev.key === "Escape") { ev.preventDefault(); renaming(false); $("rename").focus(); }
});
$("rename-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const id = state.current;
  const title = $("rename-input").value.trim();
  if (!id || !title) { $("rename-input").focus(); return; }
  try {
    const conversation = await api("PATCH", `/conversations/${encodeURIComponent(id)}`, { title });
    if (state.current !== id) return;
    showTitle(conversation);
    renaming(false);
    $("rename").focus();
    await loadConversations();
  } catch (err) {
    reportError(err);
  }
});

// The open conversation is gone (deleted on this page or another): nothing of it stays on screen.
// The deleting page hears the conversation.deleted frame too, maybe before its DELETE answers.
async function deleted(id) {
  if (state.current !== id) return;
  state.generation += 1;
  closeConversation();
  history.replaceState(history.state, "", location.pathname + location.search);
  banner("The conversation was deleted.", "notice");
  try { await loadConversations(); } catch (err) { reportError(err); }
  $("new-conversation").focus();
}

$("delete").addEventListener("click", async () => {
  const id = state.current;
  if (!id || !state.conversation) return;
  if (!confirm(`Delete "${conversationLabel(state.conversation)}" and all its messages? This cannot be undone.`)) return;
  try {
    await api("DELETE", `/conversations/${encodeURIComponent(id)}`);
    await deleted(id);
  } catch (err) {
    reportError(err);
  }
});

// ---- errors and start-up --------------------------------------------------------------------

function reportError(err) {
  if (err instanceof ApiError && err.status === 401) {
    if (cookieAuth()) {
      sessionEnded();
      return;
    }
    sessionStorage.removeItem(TOKEN_KEY);
    showIdentity();
  }
  banner(err && err.message ? err.message : String(err));
}

$("banner-close").addEventListener("click", () => banner(""));
window.addEventListener("online", () => { if (state.socket) state.socket.retryNow(); });

async function start() {
  if (!signedIn()) return;
  try {
    const items = await loadConversations();
    const wanted = new URLSearchParams(location.hash.slice(1)).get("c");
    // The conversation in the address (#c=...) survives a reload; otherwise the most recent one.
    const pick = wanted || (items[0] && items[0].id);
    if (pick) await openConversation(pick);
  } catch (err) {
    reportError(err);
  }
}

// Signed in with the provider: the page goes there when nobody is signed in, unless the user just
// signed out or a sign-in just failed (then the Sign in button waits for them).
async function boot() {
  await readSession();
  const failed = takeSignInError();
  const signedOut = sessionStorage.getItem(SIGNED_OUT_KEY);
  sessionStorage.removeItem(SIGNED_OUT_KEY);
  if (!cookieAuth()) takeTokenFromUrl();
  showIdentity();
  if (cookieAuth() && !auth.signedIn) {
    if (failed) banner(failed);
    else if (signedOut) banner("You signed out.", "notice");
    else { signIn(); return; }
  }
  start();
}

boot();
