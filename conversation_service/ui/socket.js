// The live stream of one conversation: auth by first frame (a pasted token) or by the session
// cookie (signed in with the identity provider), resume with ?after_seq=N, reconnect
// with exponential backoff. Every frame with a seq is handed on exactly once, in order. The page asks
// for batches (?batch=1): frames that waited for it on the server come in one message,
// {"type": "batch", "frames": [...]}, and are handed on one by one as if each had come alone.

const BACKOFF_BASE_MS = 500;
const BACKOFF_MAX_MS = 15000;
// Keeps idle connections alive through proxies that close silent sockets.
const PING_INTERVAL_MS = 25000;
const STABLE_MS = 5000;
const POLICY_VIOLATION = 1008;  // bad token, session ended, not our conversation, or Origin refused: retrying cannot help

export class ConversationSocket {
  // token: null when the session cookie authenticates the socket.
  // onFrame(frame) for seq frames; onControl(frame) for pong/ack/error; onState(state, info).
  constructor({ conversationId, token, afterSeq, onFrame, onControl, onState }) {
    this.conversationId = conversationId;
    this.token = token;
    this.lastSeq = afterSeq;
    this.onFrame = onFrame;
    this.onControl = onControl || (() => {});
    this.onState = onState || (() => {});
    this.attempt = 0;
    this.ws = null;
    this.timer = null;
    this.pinger = null;
    this.stopped = false;
    this.connects = 0;  // how many sockets were opened; a reconnect is visible in the page's state
  }

  url() {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const id = encodeURIComponent(this.conversationId);
    return `${proto}://${location.host}/conversations/${id}/ws?after_seq=${this.lastSeq}&batch=1`;
  }

  start() {
    this.stopped = false;
    this.open();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    clearInterval(this.pinger);
    if (this.ws) {
      this.ws.onclose = null;
      this.ws.onmessage = null;
      this.ws.close(1000);
      this.ws = null;
    }
  }

  // Reconnect at once (the browser came back online, or the user asked).
  retryNow() {
    if (this.stopped || (this.ws && this.ws.readyState <= WebSocket.OPEN)) return;
    clearTimeout(this.timer);
    this.open();
  }

  open() {
    this.connects += 1;
    this.onState(this.attempt ? "reconnecting" : "connecting", {});
    const ws = new WebSocket(this.url());
    this.ws = ws;
    let openedAt = 0;
    ws.onopen = () => {
      if (this.token) ws.send(JSON.stringify({ type: "auth", token: this.token }));
      openedAt = Date.now();
      this.onState("live", {});
      clearInterval(this.pinger);
      this.pinger = setInterval(() => {
        if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "ping" }));
      }, PING_INTERVAL_MS);
    };
    ws.onmessage = (ev) => {
      let frame;
      try { frame = JSON.parse(ev.data); } catch (err) { return; }
      if (!frame || typeof frame !== "object" || typeof frame.type !== "string") return;
      if (frame.type === "batch" && Array.isArray(frame.frames)) {
        for (const inner of frame.frames) {
          // A frame that closes the page's socket (a deleted conversation) ends the batch too.
          if (this.ws !== ws) return;
          this.take(inner);
        }
        return;
      }
      this.take(frame);
    };
    ws.onclose = (ev) => {
      clearInterval(this.pinger);
      if (this.ws !== ws || this.stopped) return;
      this.ws = null;
      // Only a connection that held for a while resets the backoff: a server that accepts and
      // drops at once must not be hammered every half second.
      if (openedAt && Date.now() - openedAt > STABLE_MS) this.attempt = 0;
      if (ev.code === POLICY_VIOLATION) {
        this.onState("refused", { reason: ev.reason });
        return;
      }
      this.schedule();
    };
  }

  take(frame) {
    if (!frame || typeof frame !== "object" || typeof frame.type !== "string") return;
    if (typeof frame.seq !== "number") { this.onControl(frame); return; }
    // The server sends each seq once per connection; a replay after a reconnect starts above
    // lastSeq, so this only guards against a server that repeats itself.
    if (frame.seq <= this.lastSeq) return;
    this.lastSeq = frame.seq;
    this.onFrame(frame);
  }

  schedule() {
    // 0.5 s, 1 s, 2 s ... up to 15 s, with jitter so many clients do not return in step.
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** this.attempt);
    const delay = Math.round(base * (0.8 + Math.random() * 0.4));
    this.attempt += 1;
    this.onState("waiting", { delay, attempt: this.attempt });
    this.timer = setTimeout(() => { if (!this.stopped) this.open(); }, delay);
  }
}
