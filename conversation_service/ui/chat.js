// The open conversation on screen: messages from the history and from live frames, the agent's
// tool steps, its questions as cards, and the status line. Text from the server or the user only
// ever reaches the page through textContent, so a message cannot inject markup.

const ARGS_PREVIEW_CHARS = 160;
const RESULT_PREVIEW_CHARS = 160;

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function clip(text, max) {
  return text.length <= max ? text : text.slice(0, max - 1) + "…";
}

function compactJson(value) {
  try { return JSON.stringify(value); } catch (err) { return String(value); }
}

export function formatDuration(ms) {
  if (typeof ms !== "number" || !isFinite(ms)) return "";
  if (ms < 1) return "<1 ms";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return `${(ms / 1000).toFixed(ms < 10000 ? 1 : 0)} s`;
}

function formatTime(iso) {
  const date = iso ? new Date(iso) : null;
  return date && !isNaN(date) ? date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) : "";
}

const ROLE_LABEL = { user: "You", assistant: "Assistant", system: "System" };

class MessageView {
  constructor(id, role) {
    this.id = id;
    this.role = ROLE_LABEL[role] ? role : "assistant";
    this.text = "";
    this.final = false;
    this.partial = false;  // opened mid-stream: the deltas before the page loaded are not shown
    this.tools = new Map();
    this.li = el("li", `msg ${this.role}`);
    this.li.dataset.messageId = id || "";
    this.li.dataset.role = this.role;
    this.meta = el("div", "meta");
    this.who = el("span", "who", ROLE_LABEL[this.role]);
    this.when = el("time", "when");
    this.meta.append(this.who, this.when);
    this.toolList = el("ol", "tools");
    this.toolList.hidden = true;
    this.body = el("div", "body");
    this.errorLine = el("div", "error-text");
    this.errorLine.hidden = true;
    this.li.append(this.meta, this.toolList, this.body, this.errorLine);
  }

  setTime(iso) {
    this.when.textContent = formatTime(iso);
    if (iso) this.when.dateTime = iso;
  }

  setStatus(status) {
    this.li.dataset.status = status;
    this.li.classList.toggle("streaming", status === "streaming");
    this.li.classList.toggle("error", status === "error");
  }

  render() {
    this.body.textContent = this.partial && !this.final ? "… " + this.text : this.text;
  }

  append(text) {
    if (this.final) return;  // the complete text is already shown
    this.text += text;
    this.render();
  }

  finish(content, status) {
    if (typeof content === "string") this.text = content;
    this.final = true;
    this.partial = false;
    this.setStatus(status || "complete");
    this.render();
  }

  fail(text, content) {
    this.errorLine.textContent = text || "The reply failed.";
    this.errorLine.hidden = false;
    this.finish(typeof content === "string" && content ? content : this.text, "error");
  }

  tool(callId, name) {
    let entry = this.tools.get(callId);
    if (!entry) {
      const li = el("li", "tool");
      li.dataset.callId = callId;
      const nameEl = el("span", "tool-name");
      const argsEl = el("span", "tool-args");
      const stateEl = el("span", "tool-state");
      const resultEl = el("span", "tool-result");
      li.append(nameEl, argsEl, stateEl, resultEl);
      entry = { li, nameEl, argsEl, stateEl, resultEl };
      this.tools.set(callId, entry);
      this.toolList.append(li);
      this.toolList.hidden = false;
    }
    if (name) {
      entry.nameEl.textContent = name;
      entry.li.dataset.tool = name;
    }
    return entry;
  }

  toolStarted(callId, name, args) {
    const entry = this.tool(callId, name);
    if (entry.li.dataset.state && entry.li.dataset.state !== "running") return;  // the end came first
    if (args && typeof args === "object" && Object.keys(args).length) {
      entry.argsEl.textContent = clip(compactJson(args), ARGS_PREVIEW_CHARS);
    }
    entry.li.dataset.state = "running";
    entry.stateEl.textContent = "running…";
  }

  toolEnded(callId, name, ok, durationMs, error, preview) {
    const entry = this.tool(callId, name);
    const took = formatDuration(durationMs);
    entry.li.dataset.state = ok ? "ok" : "error";
    entry.stateEl.textContent = ok ? (took ? `done in ${took}` : "done") : (took ? `failed after ${took}` : "failed");
    entry.resultEl.textContent = ok
      ? (preview ? "→ " + clip(String(preview), RESULT_PREVIEW_CHARS) : "")
      : (error ? clip(String(error), RESULT_PREVIEW_CHARS) : "");
  }
}

class QuestionCard {
  // data: {question_id, question, kind, tool, args, expires_at}
  constructor(data, submit) {
    this.id = data.question_id;
    this.kind = data.kind === "approval" ? "approval" : "question";
    this.submit = submit;
    const li = el("li", `card question-card ${this.kind}`);
    li.dataset.questionId = this.id;
    li.dataset.kind = this.kind;
    this.li = li;
    li.append(el("div", "card-title", this.kind === "approval" ? "The agent asks for your approval" : "The agent asks"));
    // Under the message that asks it, the question is not repeated.
    if (!data.shownAbove) li.append(el("p", "question-text", data.question || ""));
    this.controls = [];
    if (this.kind === "approval") {
      const detail = el("div", "approval-detail");
      const toolLine = el("div", "approval-tool");
      toolLine.append(el("span", "label", "Tool "), el("code", "tool-name", data.tool || "unknown tool"));
      detail.append(toolLine);
      const args = el("pre", "approval-args", JSON.stringify(data.args || {}, null, 2));
      detail.append(args);
      li.append(detail);
      const actions = el("div", "actions");
      const approve = el("button", "approve", "Approve");
      const deny = el("button", "deny", "Deny");
      approve.type = deny.type = "button";
      approve.addEventListener("click", () => this.send("", true));
      deny.addEventListener("click", () => this.send("", false));
      actions.append(approve, deny);
      li.append(actions);
      this.controls.push(approve, deny);
    } else {
      const form = el("form", "answer-form");
      const input = el("input", "answer-input");
      input.name = "answer";
      input.autocomplete = "off";
      input.placeholder = "Your answer";
      input.maxLength = 32000;
      input.setAttribute("aria-label", "Answer to the agent's question");
      const button = el("button", "answer-send", "Answer");
      button.type = "submit";
      form.append(input, button);
      form.addEventListener("submit", (ev) => {
        ev.preventDefault();
        const text = input.value.trim();
        if (!text) { input.focus(); return; }
        this.send(text, undefined);
      });
      li.append(form);
      this.input = input;
      this.controls.push(input, button);
    }
    this.note = el("p", "card-note", data.expires_at ? `Waiting for your answer until ${formatTime(data.expires_at)}.` : "");
    this.error = el("p", "card-error");
    this.error.setAttribute("role", "alert");
    this.error.hidden = true;
    li.append(this.note, this.error);
    this.setState("open");
  }

  get open() { return this.li.dataset.state === "open"; }

  setState(state) {
    this.li.dataset.state = state;
    for (const c of this.controls) c.disabled = state !== "open";
  }

  close(state, note) {
    if (!this.open && this.li.dataset.state !== "sending") return;
    this.setState(state);
    this.note.textContent = note;
  }

  async send(text, approved) {
    if (!this.open) return;  // a second click while the first answer is on its way
    this.setState("sending");
    this.error.hidden = true;
    try {
      await this.submit(this.id, text, approved);
      const what = this.kind === "approval" ? (approved ? "Approved." : "Denied.") : `Answered: ${text}`;
      this.setState("answered");
      this.note.textContent = what;
    } catch (err) {
      this.error.textContent = err.message;
      this.error.hidden = false;
      if (err.status === 409 || err.status === 410) {
        // The question cannot be answered any more: keep the card closed, say why.
        this.setState(err.status === 410 ? "expired" : "closed");
        this.note.textContent = "";
      } else {
        this.setState("open");  // a network or server failure: the user may try again
      }
    }
  }
}

export class ChatView {
  // list: <ol> of messages; status: {set(text, busy)}; answer(questionId, text, approved): Promise;
  // notice(data): shows a banner.
  constructor({ list, status, answer, notice }) {
    this.list = list;
    this.status = status;
    this.answer = answer;
    this.notice = notice;
    this.messages = new Map();
    this.cards = new Map();
    this.askedIn = new Map();  // question_id -> the message that asked it
  }

  clear() {
    this.messages.clear();
    this.cards.clear();
    this.askedIn.clear();
    this.list.replaceChildren();
    this.status.set("");
  }

  nearBottom() {
    const scroller = this.list;
    return scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 80;
  }

  // Keeps the newest message in view, unless the user scrolled up to read.
  follow(wasNear) {
    if (wasNear) this.list.scrollTop = this.list.scrollHeight;
  }

  message(id, role) {
    let view = this.messages.get(id);
    if (!view) {
      view = new MessageView(id, role);
      this.messages.set(id, view);
      this.list.append(view.li);
    }
    return view;
  }

  // A message row from the history or a message.created frame; idempotent by id.
  upsert(msg) {
    if (!msg || typeof msg.id !== "string") return null;
    const known = this.messages.has(msg.id);
    const view = this.message(msg.id, msg.role);
    view.setTime(msg.created_at);
    const meta = msg.agent_metadata && typeof msg.agent_metadata === "object" ? msg.agent_metadata : {};
    if (meta.tools && typeof meta.tools === "object") {
      for (const [callId, t] of Object.entries(meta.tools)) {
        if (!t || typeof t !== "object") continue;
        view.toolStarted(callId, t.tool, t.args);
        if (t.status === "ok" || t.status === "error") {
          view.toolEnded(callId, t.tool, t.status === "ok", t.duration_ms, t.error, t.result_preview);
        }
      }
    }
    if (!view.final) {
      const status = msg.status || "complete";
      if (status === "streaming") {
        view.setStatus("streaming");
        // Opened while the reply streams: its row has no text yet, earlier deltas are gone.
        if (!known && msg.content === "") view.partial = msg.role === "assistant" && this.loadingHistory === true;
        if (msg.content) { view.text = msg.content; view.render(); }
      } else if (status === "error") {
        view.fail("The reply failed.", msg.content);
      } else {
        view.finish(msg.content || "", "complete");
      }
    }
    if (meta.ask_user && typeof meta.ask_user.question_id === "string") this.askedIn.set(meta.ask_user.question_id, msg.id);
    if (meta.answer_to) {
      const card = this.cards.get(meta.answer_to);
      if (card) card.close("answered", `Answered: ${msg.content}`);
    }
    if (msg.role === "assistant" && meta.path === "agent" && !known) {
      // A new agent turn began: whatever the agent asked before is settled (answered or expired).
      for (const card of this.cards.values()) card.close("closed", "The agent is no longer waiting for this answer.");
    }
    return view;
  }

  loadHistory(messages, pendingQuestion) {
    this.loadingHistory = true;
    try {
      for (const msg of messages) this.upsert(msg);
    } finally {
      this.loadingHistory = false;
    }
    if (pendingQuestion) this.askUser(pendingQuestion, this.askedIn.get(pendingQuestion.question_id));
    this.list.scrollTop = this.list.scrollHeight;
  }

  askUser(data, messageId) {
    if (!data || typeof data.question_id !== "string") return;
    if (this.cards.has(data.question_id)) return;
    const anchor = messageId && this.messages.get(messageId);
    const shownAbove = Boolean(anchor && data.question && anchor.text.trim().endsWith(data.question.trim()));
    const card = new QuestionCard({ ...data, shownAbove }, this.answer);
    this.cards.set(card.id, card);
    if (anchor) anchor.li.after(card.li); else this.list.append(card.li);
  }

  onFrame(frame) {
    const d = frame.data && typeof frame.data === "object" ? frame.data : {};
    const wasNear = this.nearBottom();
    switch (frame.type) {
      case "message.created":
        this.upsert(d);
        if (d.role === "user") this.status.set("");
        break;
      case "message.delta":
        if (typeof d.message_id === "string" && typeof d.text === "string") {
          this.message(d.message_id, "assistant").append(d.text);
          this.status.set("");
        }
        break;
      case "message.completed":
        if (typeof d.message_id === "string") this.message(d.message_id, "assistant").finish(d.content, "complete");
        this.status.set("");
        break;
      case "message.error":
        if (typeof d.message_id === "string") this.message(d.message_id, "assistant").fail(d.text, d.content);
        this.status.set("");
        break;
      case "agent.thinking":
        this.status.set("Agent is thinking…", true);
        break;
      case "agent.tool_start":
        if (typeof d.message_id === "string" && typeof d.call_id === "string") {
          this.message(d.message_id, "assistant").toolStarted(d.call_id, d.tool, d.args);
        }
        this.status.set(`Running ${d.tool || "a tool"}…`, true);
        break;
      case "agent.tool_end": {
        if (typeof d.message_id === "string" && typeof d.call_id === "string") {
          this.message(d.message_id, "assistant").toolEnded(d.call_id, d.tool, d.ok === true, d.duration_ms,
                                                           d.error, d.result_preview);
        }
        const took = formatDuration(d.duration_ms);
        this.status.set(d.ok ? `${d.tool || "Tool"} done${took ? " in " + took : ""}; agent is thinking…`
                             : `${d.tool || "Tool"} failed; agent is thinking…`, true);
        break;
      }
      case "agent.ask_user":
        this.askUser(d, d.message_id);
        this.status.set("The agent is waiting for your answer.");
        break;
      case "agent.complete":
        this.status.set("");
        break;
      case "agent.error": {
        this.status.set("");
        const view = typeof d.message_id === "string" ? this.messages.get(d.message_id) : null;
        // message.error came first and already shows the reason on the message.
        if (!view || view.li.dataset.status !== "error") {
          this.message(d.message_id || `agent-error-${frame.seq}`, "assistant").fail(d.message || "The agent failed.");
        }
        break;
      }
      case "notice":
        if (d.code === "agent_question_expired" && typeof d.question_id === "string") {
          const card = this.cards.get(d.question_id);
          if (card) card.close("expired", "This question expired. Send a new message to start again.");
        }
        this.notice(d);
        break;
      default:
        break;  // frame types this page does not know yet are ignored
    }
    this.follow(wasNear);
  }
}
