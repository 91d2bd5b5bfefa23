// The agent's questions as cards: a free-text question with an answer box, or a tool call waiting
// for approval. Once settled, the card says how (approved, denied, answered, expired) itself.
import { button, el, formatTime } from "./dom.js";

// What the card says for an answer; the server stores an approval given on the card as "approve"
// or "deny".
export function decisionOf(kind, text) {
  if (kind === "approval" && text === "approve") return { decision: "approved", text: "Approved by you" };
  if (kind === "approval" && text === "deny") return { decision: "denied", text: "Denied by you" };
  return { decision: "answered", text: `You answered: ${text}` };
}

export class QuestionCard {
  // data: {question_id, question, kind, tool, args, expires_at, shownAbove}
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
    this.controls = this.kind === "approval" ? this.approvalControls(data) : this.answerControls();
    this.decision = el("p", "card-decision");
    this.decision.hidden = true;
    this.note = el("p", "card-note", data.expires_at ? `Waiting for your answer until ${formatTime(data.expires_at)}.` : "");
    this.error = el("p", "card-error");
    this.error.setAttribute("role", "alert");
    this.error.hidden = true;
    li.append(this.decision, this.note, this.error);
    this.setState("open");
  }

  approvalControls(data) {
    const detail = el("div", "approval-detail");
    const toolLine = el("div", "approval-tool");
    toolLine.append(el("span", "label", "Tool "), el("code", "tool-name", data.tool || "unknown tool"));
    detail.append(toolLine, el("pre", "approval-args", JSON.stringify(data.args || {}, null, 2)));
    const actions = el("div", "actions");
    const approve = button("approve", "Approve", () => this.send("", true));
    const deny = button("deny", "Deny", () => this.send("", false));
    actions.append(approve, deny);
    this.li.append(detail, actions);
    return [approve, deny];
  }

  answerControls() {
    const form = el("form", "answer-form");
    const input = el("input", "answer-input");
    input.name = "answer";
    input.autocomplete = "off";
    input.placeholder = "Your answer";
    input.maxLength = 32000;
    input.setAttribute("aria-label", "Answer to the agent's question");
    const send = el("button", "answer-send", "Answer");
    send.type = "submit";
    form.append(input, send);
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const text = input.value.trim();
      if (!text) { input.focus(); return; }
      this.send(text, undefined);
    });
    this.li.append(form);
    return [input, send];
  }

  get open() { return this.li.dataset.state === "open"; }
  get decided() { return Boolean(this.li.dataset.decision); }

  setState(state) {
    this.li.dataset.state = state;
    for (const c of this.controls) c.disabled = state !== "open";
  }

  // The answer, however it was given (this card, the composer, another device): final.
  decide(answerText) {
    const { decision, text } = decisionOf(this.kind, answerText);
    this.setState("answered");
    this.li.dataset.decision = decision;
    this.decision.textContent = text;
    this.decision.hidden = false;
    this.note.textContent = "";
    this.error.hidden = true;
  }

  close(state, note) {
    if (this.decided || (!this.open && this.li.dataset.state !== "sending")) return;
    this.setState(state);
    this.note.textContent = note;
  }

  async send(text, approved) {
    if (!this.open) return;  // a second click while the first answer is on its way
    this.setState("sending");
    this.error.hidden = true;
    try {
      await this.submit(this.id, text, approved);
      this.decide(this.kind === "approval" ? (approved ? "approve" : "deny") : text);
    } catch (err) {
      if (this.decided) return;  // the answer's own frame came first and settled the card
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
