// What the agent made for the user beside its answer (agent.artifact frames, and the artifacts kept
// in a message's agent_metadata): a file to download, a link to open, data to read. Nothing of it
// runs on the page: names, descriptions and data go in as text; a file is handed to the browser as
// opaque bytes to save (never opened here, whatever its media type says); a link is shown as one
// only when it is http(s).
import { el } from "./dom.js";

function formatSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  return bytes < 1024 * 1024 ? `${(bytes / 1024).toFixed(1)} KB` : `${(bytes / 1048576).toFixed(1)} MB`;
}

// The file's bytes, typed so that a browser saves them rather than renders them.
function fileBlob(artifact) {
  if (typeof artifact.text === "string") return new Blob([artifact.text], { type: "application/octet-stream" });
  const binary = atob(artifact.bytes);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return new Blob([bytes], { type: "application/octet-stream" });
}

function safeLink(url) {
  try {
    const parsed = new URL(url);
    return parsed.protocol === "https:" || parsed.protocol === "http:" ? parsed.href : null;
  } catch (err) {
    return null;
  }
}

function fileItem(artifact, name) {
  const blob = fileBlob(artifact);
  const link = el("a", "artifact-file", name);
  link.download = name;
  link.href = URL.createObjectURL(blob);
  return [link, el("span", "artifact-meta", `${artifact.media_type || "file"}, ${formatSize(blob.size)}`)];
}

function linkItem(artifact, name) {
  const href = safeLink(artifact.url);
  if (!href) return [el("span", "artifact-name", name), el("span", "artifact-meta", "link not shown: not http(s)")];
  const link = el("a", "artifact-link", name);
  link.href = href;
  link.target = "_blank";
  link.rel = "noopener noreferrer";
  return [link, el("span", "artifact-meta", new URL(href).host)];
}

function dataItem(artifact, name) {
  const pre = el("pre", "artifact-data", JSON.stringify(artifact.json, null, 2));
  return [el("span", "artifact-name", name), el("span", "artifact-meta", "data"), pre];
}

// One artifact as a list item, or null for one this page cannot show.
export function artifactItem(artifact) {
  if (!artifact || typeof artifact.artifact_id !== "string") return null;
  const name = typeof artifact.name === "string" && artifact.name ? artifact.name : "artifact";
  let parts;
  let kind;
  if (typeof artifact.url === "string") [kind, parts] = ["link", linkItem(artifact, name)];
  else if (artifact.json && typeof artifact.json === "object") [kind, parts] = ["data", dataItem(artifact, name)];
  else if (typeof artifact.text === "string" || typeof artifact.bytes === "string") {
    try {
      [kind, parts] = ["file", fileItem(artifact, name)];
    } catch (err) {
      return null;  // bytes that are not base64: nothing to save
    }
  } else return null;
  const li = el("li", "artifact");
  li.dataset.artifactId = artifact.artifact_id;
  li.dataset.kind = kind;
  li.append(...parts);
  if (typeof artifact.description === "string" && artifact.description) {
    li.append(el("div", "artifact-description", artifact.description));
  }
  return li;
}
