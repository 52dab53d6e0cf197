// The app page of `mediajobs serve --worker` (local/page.py): hash, upload, then show the
// asset as the stack makes it ready, live from server-sent events. No framework, no polling.
"use strict";

const REASONS = {
  corrupt_image: "the picture is damaged",
  truncated_image: "the file was cut short",
  unsupported_format: "this kind of file is not taken",
  too_large: "the file is too large",
  empty_file: "the file is empty",
  too_many_pixels: "the picture has too many pixels",
  invalid_media: "the video is damaged",
  too_long: "the video is too long",
  rejected: "refused by the moderation policy",
  invalid_request: "the upload was refused",
  parts_needed: "the upload was refused",
};
const TYPES = {
  jpg: "image/jpeg", jpeg: "image/jpeg", png: "image/png", webp: "image/webp", avif: "image/avif",
  heic: "image/heic", heif: "image/heif", gif: "image/gif", tif: "image/tiff", tiff: "image/tiff",
  mp4: "video/mp4", m4v: "video/x-m4v", mov: "video/quicktime", webm: "video/webm", mkv: "video/x-matroska",
};
const CHUNK = 8 * 1024 * 1024;

const list = document.getElementById("uploads");
const live = document.getElementById("live");
const rows = new Map(); // key -> row
let config = null;

function announce(text) {
  live.textContent = text;
}

function b64(buffer) {
  let text = "";
  for (const byte of new Uint8Array(buffer)) text += String.fromCharCode(byte);
  return btoa(text);
}

function hex(b64text) {
  return Array.from(atob(b64text), (c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join("");
}

function typeOf(file) {
  if (file.type) return file.type;
  const ext = file.name.split(".").pop().toLowerCase();
  return TYPES[ext] || "application/octet-stream";
}

function element(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text) node.textContent = text;
  return node;
}

function makeRow(name) {
  const row = element("li", { class: "upload" });
  row.visual = element("div", { class: "visual", role: "img", "aria-label": `${name}: no picture yet` });
  const body = element("div");
  row.nameLine = element("div", { class: "name" }, name);
  row.stateBadge = element("span", { class: "state", "data-state": "hashing" }, "hashing");
  const bar = (label) => {
    const line = element("div", { class: "step" });
    const text = element("span", {}, label);
    const meter = element("progress", { max: "1", value: "0", "aria-label": `${name}: ${label}` });
    const pct = element("span", {}, "0 %");
    line.append(text, meter, pct);
    line.set = (fraction) => {
      meter.value = fraction;
      pct.textContent = `${Math.round(fraction * 100)} %`;
    };
    return line;
  };
  row.hashing = bar("hashing");
  row.uploading = bar("uploading");
  row.processing = bar("processing");
  row.sha = element("div", { class: "sha" });
  row.why = element("div", { class: "why", role: "status" });
  row.outputs = element("div", { class: "outputs" });
  body.append(row.nameLine, row.stateBadge, row.hashing, row.uploading, row.processing, row.sha, row.why, row.outputs);
  row.append(row.visual, body);
  row.dataset.maxProgress = "0";
  list.prepend(row);
  return row;
}

function setState(row, state, words) {
  if (row.dataset.state === state) return;
  row.dataset.state = state;
  row.stateBadge.dataset.state = state;
  row.stateBadge.textContent = state;
  announce(`${row.dataset.name}: ${words || state}`);
}

async function sha256Of(file, onProgress) {
  if (file.size <= config.hash_in_memory_below_bytes) {
    onProgress(0);
    const digest = await crypto.subtle.digest("SHA-256", await file.arrayBuffer());
    onProgress(1);
    return b64(digest);
  }
  const hash = sha256.create(); // js-sha256: a chunk at a time, the file never whole in memory
  for (let at = 0; at < file.size; at += CHUNK) {
    hash.update(await file.slice(at, at + CHUNK).arrayBuffer());
    onProgress(Math.min(1, (at + CHUNK) / file.size));
  }
  return b64(hash.arrayBuffer());
}

async function partsOf(file) {
  const parts = [];
  for (let at = 0; at < file.size; at += config.part_size_bytes) {
    const part = file.slice(at, at + config.part_size_bytes);
    parts.push({ size_bytes: part.size, sha256: b64(await crypto.subtle.digest("SHA-256", await part.arrayBuffer())) });
  }
  return parts;
}

function put(signed, body, onProgress) {
  return new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open(signed.method, signed.url);
    for (const [name, value] of Object.entries(signed.headers)) {
      if (name.toLowerCase() !== "content-length") request.setRequestHeader(name, value); // the browser's own
    }
    request.upload.onprogress = (event) => event.lengthComputable && onProgress(event.loaded / event.total);
    request.onload = () =>
      request.status < 300
        ? resolve(request.getResponseHeader("ETag"))
        : reject(new Error(`S3 answered ${request.status}${/BadDigest/.test(request.responseText) ? " BadDigest" : ""}`));
    request.onerror = () => reject(new Error("the upload did not reach S3"));
    request.send(body);
  });
}

async function postJson(path, body) {
  const answer = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const json = await answer.json();
  if (!answer.ok) throw Object.assign(new Error(json.message || answer.statusText), { reason: json.reason, key: json.key });
  return json;
}

async function upload(file) {
  const row = makeRow(file.name);
  row.dataset.name = file.name;
  try {
    setState(row, "hashing");
    const sha = await sha256Of(file, (f) => row.hashing.set(f));
    row.dataset.sha256 = hex(sha);
    row.sha.textContent = `SHA-256 ${hex(sha)}`;
    const asked = { name: file.name, content_type: typeOf(file), size_bytes: file.size, sha256: sha };
    if (file.size > config.multipart_above_bytes) asked.parts = await partsOf(file);
    const answer = await postJson("/api/uploads", asked);
    row.dataset.key = answer.key;
    rows.set(answer.key, row);
    setState(row, "uploading");
    if (answer.path === "single") {
      await put(answer.put, file, (f) => row.uploading.set(f));
    } else {
      const done = [];
      for (const part of answer.parts) {
        const start = (part.part_number - 1) * config.part_size_bytes;
        const etag = await put(part, file.slice(start, start + part.size_bytes), (f) =>
          row.uploading.set((start + f * part.size_bytes) / file.size));
        done.push({ part_number: part.part_number, etag, sha256: asked.parts[part.part_number - 1].sha256 });
      }
      await postJson("/api/uploads/complete", { key: answer.key, upload_id: answer.upload_id, parts: done });
    }
    row.uploading.set(1);
    if (!row.dataset.state || ["hashing", "uploading"].includes(row.dataset.state)) {
      setState(row, "uploaded", "uploaded, not ready yet");
    }
  } catch (error) {
    if (error.key) rows.set(error.key, row); // the server lists the refusal: its events find this row
    setState(row, "failed", `failed: ${REASONS[error.reason] || error.message}`);
    row.why.textContent = REASONS[error.reason] ? `${REASONS[error.reason]}: ${error.message}` : error.message;
  }
}

function show(view) {
  let row = rows.get(view.key);
  if (!row) {
    row = makeRow(view.name);
    row.dataset.name = view.name;
    row.dataset.key = view.key;
    if (view.sha256) {
      row.dataset.sha256 = hex(view.sha256);
      row.sha.textContent = `SHA-256 ${hex(view.sha256)}`;
    }
    row.hashing.set(1);
    row.uploading.set(view.state ? 1 : 0);
    rows.set(view.key, row);
  }
  if (view.refused) {
    row.why.textContent = `${REASONS[view.refused.reason] || view.refused.reason}: ${view.refused.message}`;
    setState(row, "failed", `failed: ${REASONS[view.refused.reason] || view.refused.reason}`);
    return;
  }
  if (!view.state) {
    // Asked for, but S3 has not told the stack of its bytes: still on its way (another tab),
    // refused by S3, or abandoned. Not "hashing": this page is not hashing it.
    if (!row.dataset.state || row.dataset.state === "hashing") setState(row, "not-received", "not received by S3 yet");
    return;
  }
  row.uploading.set(1);
  if (view.progress !== null && view.progress !== undefined) {
    row.processing.set(view.progress);
    row.dataset.maxProgress = String(Math.max(Number(row.dataset.maxProgress), view.progress));
  }
  if (view.placeholder_url && !row.visual.querySelector("img")) {
    row.visual.style.backgroundImage = `url(${view.placeholder_url})`;
    row.dataset.placeholder = "shown";
  }
  if (view.state === "ready") {
    row.processing.set(1);
    if (view.card && !row.visual.querySelector("img")) {
      const img = element("img", { src: view.card.url, alt: `${view.name}`, width: view.card.width, height: view.card.height });
      img.dataset.width = view.card.width;
      img.dataset.height = view.card.height;
      row.visual.append(img);
      row.visual.setAttribute("aria-label", view.name);
    }
    row.outputs.replaceChildren(...view.outputs.map((o) =>
      element("a", { href: o.url, target: "_blank", rel: "noopener" }, `${o.name} (${o.width}×${o.height})`)));
  }
  if (view.state === "failed" || view.state === "rejected") {
    const words = REASONS[view.reason] || view.reason;
    row.why.textContent = `${words}${view.detail ? `: ${view.detail}` : ""}`;
  }
  if (view.state === "review") row.why.textContent = "held for review: a person decides before it is shown";
  const words = { failed: `failed: ${REASONS[view.reason] || view.reason}`, review: "held for review" }[view.state];
  setState(row, view.state, words);
}

function drop(files) {
  for (const file of files) upload(file);
}

async function start() {
  config = await (await fetch("/api/config")).json();
  const zone = document.getElementById("drop");
  const input = document.getElementById("files");
  input.addEventListener("change", () => drop(Array.from(input.files)));
  zone.addEventListener("dragover", (event) => {
    event.preventDefault();
    zone.classList.add("over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("over");
    drop(Array.from(event.dataTransfer.files));
  });
  const made = await (await fetch("/api/uploads")).json(); // a reload lists what was uploaded from here
  for (const view of made.uploads) show(view);
  const events = new EventSource("/api/events");
  events.onmessage = (message) => show(JSON.parse(message.data));
  document.body.dataset.ready = "true";
}

start();
