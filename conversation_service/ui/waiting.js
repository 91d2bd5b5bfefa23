// The agent waiting for room in a rate limit (agent.waiting frames): the status line says why and
// counts down to the moment it carries on, and the message it is for is marked as waiting. The
// frame's `until` is that moment, so a frame read late still counts down to the right time.

export class WaitingCountdown {
  // status: {set(text, busy)}, the page's status line.
  constructor(status) {
    this.status = status;
    this.timer = null;
    this.view = null;
  }

  get active() {
    return this.timer !== null;
  }

  start(data, view) {
    this.stop();
    const until = Date.parse(data.until);
    const end = Number.isFinite(until) ? until : Date.now() + (Number(data.wait_s) || 0) * 1000;
    const reason = typeof data.reason === "string" && data.reason ? data.reason : "a usage limit was reached";
    this.view = view || null;
    if (this.view) this.view.li.dataset.waiting = "true";
    const tick = () => {
      const left = Math.max(0, Math.ceil((end - Date.now()) / 1000));
      this.status.set(`Waiting: ${reason}. The agent carries on in ${left} s…`, true);
    };
    tick();
    this.timer = setInterval(tick, 250);
  }

  // The agent carried on (or the page moved on): the countdown and the mark go.
  stop() {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    if (this.view) delete this.view.li.dataset.waiting;
    this.view = null;
  }
}
