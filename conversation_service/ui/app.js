// Chat page: plain JS, no build step. Renders the chat frames; agent frames are an enhancement
// and unknown frame types are ignored.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const tokenInput = $("token");
  tokenInput.value = params.get("token") || sessionStorage.getItem("token") || "";
  let current = null, ws = null, lastSeq = 0, retry = 0;
  const bubbles = new Map();

  function token() { sessionStorage.setItem("token", tokenInput.value.trim()); return tokenInput.value.trim(); }

  async function api(method, path, body) {
    const res = await fetch(path, {
      method, headers: { "Authorization": "Bearer " + token(), "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const data = res.status === 204 ? null : await res.json();
    if (!res.ok) throw new Error((data && data.error) || res.statusText);
    return data;
  }

  function bubble(id, role, text, cls) {
    let li = id && bubbles.get(id);
    if (!li) {
      li = document.createElement("li");
      li.className = role + (cls ? " " + cls : "");
      $("messages").appendChild(li);
      if (id) bubbles.set(id, li);
    }
    if (text !== undefined) li.textContent = text;
    li.scrollIntoView({ block: "end" });
    return li;
  }

  function status(text) { $("status").textContent = text || ""; }

  function banner(text) { const b = $("banner"); b.textContent = text; b.hidden = !text; }

  function askUser(data) {
    const li = bubble("q:" + data.question_id, "assistant", "", "question");
    li.textContent = data.question + " ";
    const answer = (text, approved) => api("POST", `/conversations/${current}/agent-answer`,
      { question_id: data.question_id, text, approved }).then(() => li.remove()).catch((e) => banner(e.message));
    if (data.kind === "approval") {
      for (const [label, ok] of [["Approve", true], ["Deny", false]]) {
        const b = document.createElement("button"); b.textContent = label;
        b.onclick = () => answer(ok ? "approve" : "deny", ok); li.appendChild(b);
      }
    } else {
      const input = document.createElement("input"); const b = document.createElement("button");
      b.textContent = "Answer"; b.onclick = () => answer(input.value);
      li.appendChild(input); li.appendChild(b);
    }
  }

  function onFrame(frame) {
    if (typeof frame.seq === "number") { if (frame.seq <= lastSeq) return; lastSeq = frame.seq; }
    const d = frame.data || {};
    switch (frame.type) {
      case "message.created": bubble(d.id, d.role, d.content || ""); break;
      case "message.delta": { const li = bubble(d.message_id, "assistant"); li.textContent += d.text; status(""); break; }
      case "message.completed": bubble(d.message_id, "assistant", d.content); status(""); break;
      case "message.error": bubble(d.message_id, "assistant", (d.content || "") + "\n" + d.text, "error"); break;
      case "agent.thinking": status("Thinking…"); break;
      case "agent.tool_start": status("Running " + (d.tool || "a tool") + "…"); break;
      case "agent.tool_end": status((d.tool || "Tool") + (d.ok ? " done" : " failed")); break;
      case "agent.ask_user": askUser(d); break;
      case "agent.complete": status(""); break;
      case "agent.error": status(""); bubble(null, "assistant", d.message || d.text || "The agent failed.", "error"); break;
      case "notice": banner(d.text); break;
      default: break; // unknown types are ignored
    }
  }

  function connect(id) {
    if (ws) { ws.onclose = null; ws.close(); }
    const proto = location.protocol === "https:" ? "wss" : "ws";
    ws = new WebSocket(`${proto}://${location.host}/conversations/${id}/ws?after_seq=${lastSeq}`);
    ws.onopen = () => { retry = 0; ws.send(JSON.stringify({ type: "auth", token: token() })); };
    ws.onmessage = (ev) => { try { onFrame(JSON.parse(ev.data)); } catch (e) { /* not a frame */ } };
    ws.onclose = (ev) => {
      if (ev.code === 1008) { banner("Not allowed: check the token."); return; }
      retry = Math.min(retry + 1, 6);
      setTimeout(() => current === id && connect(id), 250 * 2 ** retry);
    };
  }

  async function open(id) {
    current = id; lastSeq = 0; bubbles.clear(); $("messages").innerHTML = ""; banner("");
    for (const li of document.querySelectorAll("#conversations li")) li.classList.toggle("active", li.dataset.id === id);
    connect(id);
  }

  async function refresh() {
    if (!token()) return;
    try {
      const list = await api("GET", "/conversations");
      const ul = $("conversations"); ul.innerHTML = "";
      for (const c of list.items) {
        const li = document.createElement("li"); li.dataset.id = c.id;
        li.textContent = c.title || c.id.slice(0, 8); li.onclick = () => open(c.id); ul.appendChild(li);
      }
      if (!current && list.items.length) open(list.items[0].id);
    } catch (e) { banner(e.message); }
  }

  $("new-conversation").onclick = async () => {
    try { const c = await api("POST", "/conversations", { title: "Conversation " + new Date().toLocaleTimeString() });
      await refresh(); open(c.id); } catch (e) { banner(e.message); }
  };
  $("composer").onsubmit = async (ev) => {
    ev.preventDefault();
    const content = $("content").value.trim();
    if (!content || !current) return;
    $("content").value = "";
    try { await api("POST", `/conversations/${current}/messages`, { content, client_message_id: crypto.randomUUID() }); }
    catch (e) { banner(e.message); }
  };
  tokenInput.onchange = refresh;
  refresh();
})();
