// The open conversation on screen: messages from the history and from live frames, the agent's
// work on its messages, its questions as cards, and the status line.
import { QuestionCard } from "./cards.js";
import { formatDuration } from "./dom.js";
import { MessageView } from "./message.js";
import { WaitingCountdown } from "./waiting.js";

const NO_LONGER_WAITING = "The agent is no longer waiting for this answer.";
const EXPIRED = "This question expired. Send a new message to start again.";

export class ChatView {
  // list: <ol> of messages; status: {set(text, busy)}; answer(questionId, text, approved): Promise;
  // notice(data): shows a banner; regenerate(messageId): asks for another answer (Regenerate,
  // Retry); replyState(messageId|null): the reply streaming now, which the Stop button stops.
  constructor({ list, status, answer, notice, regenerate, replyState }) {
    this.list = list;
    this.status = status;
    this.answer = answer;
    this.notice = notice;
    this.regenerate = regenerate || (() => {});
    this.replyState = replyState || (() => {});
    this.messages = new Map();
    this.cards = new Map();
    this.decisions = new Set();  // ids of approval answers shown on their card instead of as a message
    this.askedIn = new Map();    // question_id -> the message that asked it
    this.loadingHistory = false;
    this.countdown = new WaitingCountdown(status);
  }

  clear() {
    this.countdown.stop();
    for (const view of this.messages.values()) view.dispose();
    this.messages.clear();
    this.cards.clear();
    this.decisions.clear();
    this.askedIn.clear();
    this.list.replaceChildren();
    this.status.set("");
    this.replyState(null);
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
      view.onControl = (kind, messageId) => this.regenerate(messageId, kind);
      this.messages.set(id, view);
      this.list.append(view.li);
    }
    return view;
  }

  // A message row from the history or a message.created frame; idempotent by id.
  upsert(msg) {
    if (!msg || typeof msg.id !== "string" || this.decisions.has(msg.id)) return;
    if (msg.status === "replaced") { this.remove(msg.id); return; }  // another answer took its place
    const meta = msg.agent_metadata && typeof msg.agent_metadata === "object" ? msg.agent_metadata : {};
    const card = typeof meta.answer_to === "string" ? this.cards.get(meta.answer_to) : null;
    if (card) {
      card.decide(msg.content);
      // An approval is the card's decision, not something the user wrote.
      if (card.kind === "approval") { this.decisions.add(msg.id); return; }
    }
    const known = this.messages.has(msg.id);
    const view = this.message(msg.id, msg.role);
    view.setTime(msg.created_at);
    view.setPath(meta.path, meta.agent);
    if (meta.tools && typeof meta.tools === "object") {
      for (const [callId, t] of Object.entries(meta.tools)) {
        if (!t || typeof t !== "object") continue;
        view.tool(callId, t.tool).started(t.args);
        if (t.status === "ok" || t.status === "error") {
          view.tool(callId, t.tool).ended(t.status === "ok", t.duration_ms, t.error, t.result_preview);
        }
      }
    }
    if (Array.isArray(meta.artifacts)) for (const artifact of meta.artifacts) view.artifact(artifact);
    if (meta.restarted_steps) view.restarted();
    if (!view.final) this.fill(view, msg);
    // The history says how each question stands (loadHistory); live, a new agent turn settles them.
    if (msg.role === "assistant" && meta.path === "agent" && !known && !this.loadingHistory) this.settleCards(meta);
    const ask = meta.ask_user;
    if (ask && typeof ask.question_id === "string") {
      this.askedIn.set(ask.question_id, msg.id);
      // A question asked earlier shows as its card under its message, settled by what follows.
      if (this.loadingHistory) this.askUser(ask, msg.id);
    }
  }

  fill(view, msg) {
    const status = msg.status || "complete";
    if (status === "streaming") {
      view.setStatus("streaming");
      // Opened mid-reply (a reload, a second tab): the text so far, up to the delta with seq
      // content_seq; the deltas after it continue it.
      if (msg.content && typeof msg.content_seq === "number") view.resume(msg.content, msg.content_seq);
    } else if (status === "error") {
      view.fail("The reply failed.", msg.content);
    } else {
      view.finish(msg.content || "", status === "stopped" ? "stopped" : "complete");
    }
  }

  // A reply replaced by another answer (regenerate, retry) leaves the page.
  remove(id) {
    const view = this.messages.get(id);
    if (!view) return;
    view.dispose();
    view.li.remove();
    this.messages.delete(id);
  }

  // The reply still streaming, if any: the newest assistant message whose status says so.
  streamingReply() {
    const views = [...this.messages.values()];
    for (let i = views.length - 1; i >= 0; i--) {
      if (views[i].role === "assistant" && views[i].li.dataset.status === "streaming") return views[i];
    }
    return null;
  }

  // Regenerate on the conversation's last answer, Retry on it when it failed (and may be retried);
  // none while a reply streams. The page learns which reply the Stop button stops.
  refreshControls() {
    const streaming = this.streamingReply();
    const items = this.list.querySelectorAll(":scope > li.msg");
    const lastId = items.length ? items[items.length - 1].dataset.messageId : null;
    for (const view of this.messages.values()) {
      const status = view.li.dataset.status;
      const own = !streaming && view.id === lastId && view.role === "assistant" && view.final
        && !view.id.startsWith("agent-error-");
      let kind = null;
      if (own && status === "error") kind = view.retryable ? "retry" : null;
      else if (own) kind = "regenerate";
      view.setControl(kind);
    }
    this.replyState(streaming ? streaming.id : null);
  }

  // A new agent turn began: whatever the agent asked before is settled. A message typed in the
  // composer while a question was open was its answer (route_reason pending_question).
  settleCards(meta) {
    const typed = meta.route_reason === "pending_question" ? this.messages.get(meta.in_reply_to) : null;
    for (const card of this.cards.values()) {
      if (typed && card.open) card.decide(typed.text);
      else card.close("closed", NO_LONGER_WAITING);
    }
  }

  // questions: the agent's questions and how each stands (GET .../agent-questions).
  loadHistory(messages, pendingQuestion, questions) {
    this.loadingHistory = true;
    try {
      for (const msg of messages) this.upsert(msg);
    } finally {
      this.loadingHistory = false;
    }
    const pendingId = pendingQuestion && pendingQuestion.question_id;
    if (pendingQuestion) this.askUser(pendingQuestion, this.askedIn.get(pendingId));
    const byId = new Map(messages.map((m) => [m.id, m]));
    const standing = new Map((questions || []).map((q) => [q.question_id, q]));
    for (const card of this.cards.values()) {
      const q = standing.get(card.id);
      if (q && q.status === "ANSWERED") {
        // Answered on the card, in the composer or on another device: the answer it got.
        const answer = byId.get(q.answer_message_id);
        if (!card.decided && answer) card.decide(answer.content);
      } else if (q && q.status === "EXPIRED") {
        card.close("expired", EXPIRED);
      } else if (card.id !== pendingId) {
        card.close("closed", NO_LONGER_WAITING);
      }
    }
    if (pendingId) this.status.set("The agent is waiting for your answer.");
    this.refreshControls();
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
    // The message a frame is about, made if its message.created was not seen.
    const view = () => (typeof d.message_id === "string" ? this.message(d.message_id, "assistant") : null);
    // Whatever the agent does next ends its wait; a notice is about something else.
    if (this.countdown.active && frame.type !== "agent.waiting" && frame.type !== "notice") this.countdown.stop();
    switch (frame.type) {
      case "message.created":
        this.upsert(d);
        if (d.role === "user") this.status.set("");
        break;
      case "message.delta":
        if (typeof d.text === "string") view()?.append(d.text, frame.seq, d.offset);
        this.status.set("");
        break;
      case "message.completed":
        // status "stopped": the user stopped the reply; its text so far is the message.
        view()?.finish(d.content, d.status === "stopped" ? "stopped" : "complete");
        this.status.set("");
        break;
      case "message.error":
        view()?.fail(d.text, d.content, d.retryable);
        this.status.set("");
        break;
      case "message.replaced":
        if (typeof d.message_id === "string") this.remove(d.message_id);
        break;
      case "agent.thinking":
        view()?.thought(d.text);
        this.status.set("Agent is thinking…", true);
        break;
      case "agent.tool_start":
        if (typeof d.call_id === "string") view()?.tool(d.call_id, d.tool).started(d.args);
        this.status.set(`Running ${d.tool || "a tool"}…`, true);
        break;
      case "agent.tool_end": {
        if (typeof d.call_id === "string") {
          view()?.tool(d.call_id, d.tool).ended(d.ok === true, d.duration_ms, d.error, d.result_preview);
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
      case "agent.waiting":
        this.countdown.start(d, view());
        break;
      case "agent.artifact":
        view()?.artifact(d);
        break;
      case "agent.complete":
        this.status.set("");
        break;
      case "agent.error": {
        this.status.set("");
        // message.error came first and already shows the reason on the message.
        const failed = view() || this.message(`agent-error-${frame.seq}`, "assistant");
        if (failed.li.dataset.status !== "error") failed.fail(d.message || "The agent failed.");
        break;
      }
      case "notice":
        // About one reply (the agent restarted a step of it): said on that message, not in a banner.
        if (d.code === "agent_step_restarted" && typeof d.message_id === "string") {
          view()?.restarted(d.text);
          break;
        }
        if (d.code === "agent_question_expired" && typeof d.question_id === "string") {
          const card = this.cards.get(d.question_id);
          if (card) card.close("expired", EXPIRED);
        }
        this.notice(d);
        break;
      default:
        break;  // frame types this page does not know yet are ignored
    }
    // Only the frames that start, end or remove a message change which controls show.
    const type = String(frame.type);
    if (type === "agent.error" || (type.startsWith("message.") && type !== "message.delta")) this.refreshControls();
    this.follow(wasNear);
  }
}
