// One message on screen: who wrote it, the agent's thinking and tool steps, the text (Markdown for
// answers, plain text for what the user typed), what the agent made for the user (files, links,
// data) and, once an answer is finished, its copy button.
import { artifactItem } from "./artifacts.js";
import { button, el, formatDuration, formatTime } from "./dom.js";
import { copyButton, renderMarkdown } from "./markdown.js";

const LABEL = { user: "You", assistant: "Assistant", system: "System" };
// A tool result longer than this is folded behind "Show more".
const FOLD_LINES = 12;
const FOLD_CHARS = 600;

function unescapePython(text) {
  return text.replace(/\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[\s\S])/g, (_, e) =>
    e.length > 1 ? String.fromCodePoint(parseInt(e.slice(1), 16)) : ({ n: "\n", t: "\t", r: "\r" }[e] ?? e));
}

// Tool results arrive as previews of Python values ({'ok': True, 'value': None}); read as JSON when
// they are JSON, else as a Python literal; null when they are neither (a preview cut short).
function parseLiteral(text) {
  try { return JSON.parse(text); } catch (err) { /* not JSON */ }
  const json = text.replace(/'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"|\b(True|False|None)\b/g,
    (_, single, double, word) => (word ? { True: "true", False: "false", None: "null" }[word]
                                        : JSON.stringify(unescapePython(single ?? double))));
  try { return JSON.parse(json); } catch (err) { return null; }
}

// Objects and lists as indented JSON; anything else as the text it is.
export function readable(value) {
  const parsed = typeof value === "string" ? parseLiteral(value) : value;
  return parsed !== null && typeof parsed === "object" ? JSON.stringify(parsed, null, 2) : String(value);
}

class ToolStep {
  constructor(callId) {
    this.li = el("li", "tool");
    this.li.dataset.callId = callId;
    this.nameEl = el("span", "tool-name");
    this.stateEl = el("span", "tool-state");
    const head = el("div", "tool-head");
    head.append(this.nameEl, this.stateEl);
    this.argsEl = el("pre", "tool-args");
    this.resultEl = el("pre", "tool-result");
    this.more = button("show-more link", "Show more", () => this.fold(!this.resultEl.classList.contains("folded")));
    this.argsEl.hidden = this.resultEl.hidden = this.more.hidden = true;
    this.li.append(head, this.argsEl, this.resultEl, this.more);
  }

  get state() { return this.li.dataset.state; }

  name(name) {
    if (!name) return;
    this.nameEl.textContent = name;
    this.li.dataset.tool = name;
  }

  started(args) {
    if (this.state && this.state !== "running") return;  // the end came first
    if (args && typeof args === "object" && Object.keys(args).length) {
      this.argsEl.textContent = readable(args);
      this.argsEl.hidden = false;
    }
    this.li.dataset.state = "running";
    this.stateEl.textContent = "running…";
  }

  ended(ok, durationMs, error, preview) {
    const took = formatDuration(durationMs);
    this.li.dataset.state = ok ? "ok" : "error";
    this.stateEl.textContent = ok ? (took ? `done in ${took}` : "done") : (took ? `failed after ${took}` : "failed");
    const text = ok ? (preview ? readable(preview) : "") : String(error || "");
    this.resultEl.textContent = text;
    this.resultEl.hidden = !text;
    const long = text.length > FOLD_CHARS || text.split("\n").length > FOLD_LINES;
    this.more.hidden = !long;
    this.fold(long);
  }

  fold(folded) {
    this.resultEl.classList.toggle("folded", folded);
    this.more.textContent = folded ? "Show more" : "Show less";
    this.more.setAttribute("aria-expanded", String(!folded));
  }
}

export class MessageView {
  constructor(id, role) {
    this.id = id;
    this.role = LABEL[role] ? role : "assistant";
    this.text = "";
    this.final = false;
    this.textSeq = 0;      // the seq of the last delta in text: a replayed delta up to it is in it already
    this.frame = 0;        // the animation frame that will render the streamed text
    this.tools = new Map();
    this.li = el("li", `msg ${this.role}`);
    this.li.dataset.messageId = id || "";
    this.li.dataset.role = this.role;
    const meta = el("div", "meta");
    this.who = el("span", "who", LABEL[this.role]);
    this.when = el("time", "when");
    meta.append(this.who, this.when);
    this.thinking = el("details", "thinking");
    this.thinking.append(el("summary", null, "Thinking"));
    this.thinking.hidden = true;
    this.toolList = el("ol", "tools");
    this.toolList.hidden = true;
    this.body = el("div", this.role === "user" ? "body plain" : "body");
    this.artifacts = new Map();
    this.artifactList = el("ul", "artifacts");
    this.artifactList.setAttribute("aria-label", "Files and data from the agent");
    this.artifactList.hidden = true;
    this.errorLine = el("div", "error-text");
    this.errorLine.hidden = true;
    this.stoppedLine = el("div", "stopped-text", "Stopped");
    this.stoppedLine.hidden = true;
    // The agent's service restarted while it wrote this reply: a step was done again (its text replaced).
    this.restartedLine = el("div", "restarted-text");
    this.restartedLine.setAttribute("role", "note");
    this.restartedLine.hidden = true;
    this.actions = el("div", "msg-actions");
    this.actions.append(copyButton("copy-answer", "Copy answer", () => this.text));
    this.actions.hidden = true;
    // Regenerate (the last answer) or Retry (the last answer, failed): one button, set by the chat.
    this.control = null;
    this.onControl = null;   // (kind, messageId) => void
    this.retryable = true;   // a failed reply may be retried unless its error said otherwise
    this.controls = el("div", "msg-controls");
    this.controls.hidden = true;
    this.li.append(meta, this.thinking, this.toolList, this.body, this.artifactList, this.errorLine, this.stoppedLine,
                   this.restartedLine, this.actions, this.controls);
  }

  // kind: "regenerate", "retry" or null (none).
  setControl(kind) {
    if (kind === this.control) return;
    this.control = kind;
    this.controls.replaceChildren();
    this.controls.hidden = !kind;
    if (!kind) return;
    const label = kind === "retry" ? "Retry" : "Regenerate";
    const aria = kind === "retry" ? "Retry this reply" : "Regenerate this answer";
    const node = button(`${kind} link`, label, () => { if (this.onControl) this.onControl(kind, this.id); });
    node.setAttribute("aria-label", aria);
    this.controls.append(node);
  }

  // Answers of the agent are labelled as its own, with the name of the A2A agent that gave them
  // (``agent``, from its configuration); direct answers of the model as the assistant's.
  setPath(path, agent) {
    if (typeof path !== "string" || this.role !== "assistant") return;
    this.li.dataset.path = path;
    const named = path === "agent" && typeof agent === "string" && agent !== "";
    if (named) this.li.dataset.agent = agent;
    this.who.textContent = path !== "agent" ? LABEL.assistant : named ? `Agent · ${agent}` : "Agent";
  }

  setTime(iso) {
    this.when.textContent = formatTime(iso);
    if (iso) this.when.dateTime = iso;
  }

  // Only the message being written is a live region: a screen reader reads the answer as it
  // arrives, not the whole list again.
  setStatus(status) {
    this.li.dataset.status = status;
    this.li.classList.toggle("streaming", status === "streaming");
    this.li.classList.toggle("error", status === "error");
    this.li.classList.toggle("stopped", status === "stopped");
    this.stoppedLine.hidden = status !== "stopped";
    if (status === "streaming") this.li.setAttribute("aria-live", "polite");
    else this.li.removeAttribute("aria-live");
  }

  render() {
    cancelAnimationFrame(this.frame);
    this.frame = 0;
    if (this.role === "user") this.body.textContent = this.text;
    else renderMarkdown(this.body, this.text);
    this.actions.hidden = !(this.final && this.role !== "user" && this.text.trim());
  }

  // The text so far of a message opened mid-reply; seq: the frame of its last delta.
  resume(text, seq) {
    if (this.final) return;
    this.text = text;
    this.textSeq = seq;
    this.render();
  }

  // Deltas arriving within one frame are rendered together, from the whole text so far.
  // offset (agent replies): where the delta's text starts in the message; a chunk sent again after
  // a server takeover lands where it belongs instead of repeating.
  append(text, seq, offset) {
    if (this.final) return;  // the complete text is already shown
    if (typeof seq === "number" && seq <= this.textSeq) return;
    this.text = typeof offset === "number" && offset <= this.text.length
      ? this.text.slice(0, offset) + text
      : this.text + text;
    if (!this.frame) this.frame = requestAnimationFrame(() => this.render());
  }

  restarted(text) {
    this.restartedLine.textContent = typeof text === "string" && text ? text : "The agent restarted a step.";
    this.restartedLine.hidden = false;
  }

  finish(content, status) {
    if (typeof content === "string") this.text = content;
    this.final = true;
    this.setStatus(status || "complete");
    this.render();
  }

  fail(text, content, retryable) {
    if (retryable === false) this.retryable = false;
    this.errorLine.textContent = text || "The reply failed.";
    this.errorLine.hidden = false;
    this.finish(typeof content === "string" && content ? content : this.text, "error");
  }

  thought(text) {
    if (typeof text !== "string" || !text.trim()) return;
    this.thinking.append(el("p", "thought", text));
    this.thinking.hidden = false;
  }

  // Something the agent made (an agent.artifact frame, or the message's stored artifacts): once per id.
  artifact(data) {
    if (!data || typeof data.artifact_id !== "string" || this.artifacts.has(data.artifact_id)) return;
    const item = artifactItem(data);
    if (!item) return;
    this.artifacts.set(data.artifact_id, item);
    this.artifactList.append(item);
    this.artifactList.hidden = false;
  }

  // The message leaves the page: the files it held for download are let go.
  dispose() {
    for (const item of this.artifacts.values()) {
      const file = item.querySelector("a.artifact-file");
      if (file) URL.revokeObjectURL(file.href);
    }
  }

  tool(callId, name) {
    let step = this.tools.get(callId);
    if (!step) {
      step = new ToolStep(callId);
      this.tools.set(callId, step);
      this.toolList.append(step.li);
      this.toolList.hidden = false;
    }
    step.name(name);
    return step;
  }
}
