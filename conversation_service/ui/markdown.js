// Model text as Markdown, made safe to put on the page. The vendored libraries (ui/vendor/) are
// classic scripts loaded before this module: window.marked and window.DOMPurify.
//
// Markup in the text never reaches the page as markup: raw HTML is rendered as the text it is,
// what marked produces is sanitized again by DOMPurify (javascript: links and the like), images
// become links (an image would be fetched from wherever the text points, telling that server who
// reads what), and every link opens in a new tab without an opener or a referrer.

const { Marked } = window.marked;
const purify = window.DOMPurify;

const escapeHtml = (text) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

const markdown = new Marked({
  gfm: true,
  breaks: true,  // a model's single newline means a new line, as in a chat
  renderer: {
    html: ({ text, block }) => (block ? `<p>${escapeHtml(text.trim())}</p>` : escapeHtml(text)),
    image: ({ href, text }) => `<a href="${escapeHtml(href || "")}">${escapeHtml(text || href || "image")}</a>`,
  },
});

purify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

const SANITIZE = { RETURN_DOM_FRAGMENT: true, FORBID_ATTR: ["style", "class", "id"], FORBID_TAGS: ["style", "form"] };

// Writes text to the clipboard; a page served over plain HTTP on a LAN address has no
// navigator.clipboard, and a selected textarea still copies there.
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.className = "offscreen";
  document.body.append(area);
  area.select();
  try { document.execCommand("copy"); } finally { area.remove(); }
}

export function copyButton(className, label, text) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = `copy ${className}`;
  button.setAttribute("aria-label", label);
  button.title = label;
  let timer = 0;
  button.addEventListener("click", async () => {
    try {
      await copyText(typeof text === "function" ? text() : text);
      button.dataset.copied = "true";
    } catch (err) {
      button.dataset.copied = "failed";
    }
    clearTimeout(timer);
    timer = setTimeout(() => { delete button.dataset.copied; }, 1500);
  });
  return button;
}

function toFragment(text) {
  const fragment = purify.sanitize(markdown.parse(text), SANITIZE);
  for (const pre of fragment.querySelectorAll("pre")) {
    const block = document.createElement("div");
    block.className = "code-block";
    pre.replaceWith(block);
    // The button's caption comes from CSS, so the body's text stays the answer's text.
    block.append(copyButton("copy-code", "Copy code", pre.textContent.replace(/\n$/, "")), pre);
  }
  // marked separates blocks with newlines; as text nodes between blocks they only add noise.
  for (const node of [...fragment.childNodes]) {
    if (node.nodeType === Node.TEXT_NODE && !node.textContent.trim()) node.remove();
  }
  return fragment;
}

// Renders text into target, replacing only the blocks that changed: while an answer streams, the
// blocks above the one being written stay the same nodes (a screen reader does not read them
// again, a selection in them survives).
export function renderMarkdown(target, text) {
  const next = [...toFragment(text).childNodes];
  const current = [...target.childNodes];
  let same = 0;
  while (same < next.length && same < current.length && current[same].isEqualNode(next[same])) same += 1;
  for (const node of current.slice(same)) node.remove();
  target.append(...next.slice(same));
}
