/* Text and elements. Everything the daemon reports that a user or a job controls (task and
 * rule names, file names, STATUS= lines, output) reaches the page through text nodes and
 * attributes set one by one, never as markup; `visible` escapes what a browser would not
 * show faithfully, as the CLI's LineEscaping does (docs/operations.md, "The journal"). */

/* Controls as \n, \t, \xNN; the Unicode controls, the line separators and the invisible and
 * bidirectional format characters as \uNNNN, so a name cannot hide part of itself; a
 * backslash doubled, so an escape is never taken for a name that spells one. Text the CLI
 * already escaped (`watchkeeper logs`) keeps its backslashes (`keepBackslashes`). */
export function visible(value, keepBackslashes) {
    if (value === null || value === undefined)
        return "-";
    if (Array.isArray(value))
        return pathFromBytes(value);
    const text = String(value);
    let out = "";
    for (const char of text) {
        const code = char.codePointAt(0);
        if (char === "\\" && !keepBackslashes)
            out += "\\\\";
        else if (char === "\n")
            out += "\\n";
        else if (char === "\r")
            out += "\\r";
        else if (char === "\t")
            out += "\\t";
        else if (code < 0x20 || code === 0x7f)
            out += "\\x" + code.toString(16).padStart(2, "0");
        else if (needsUnicodeEscape(code))
            out += "\\u" + code.toString(16).padStart(4, "0");
        else
            out += char;
    }
    return out;
}

function needsUnicodeEscape(code) {
    return (code >= 0x80 && code <= 0x9f) || code === 0x2028 || code === 0x2029 || code === 0x061c ||
        (code >= 0x200b && code <= 0x200f) || (code >= 0x202a && code <= 0x202e) ||
        (code >= 0x2060 && code <= 0x2064) || (code >= 0x2066 && code <= 0x2069) || code === 0xfeff;
}

/* A path that is not UTF-8 comes as its bytes (as `journalctl -o json` writes them): shown
 * as the CLI shows it, with \xNN for each byte that is not part of valid UTF-8. */
export function pathFromBytes(bytes) {
    const decoder = new TextDecoder("utf-8", { fatal: true });
    let out = "";
    let index = 0;
    while (index < bytes.length) {
        let decoded = null;
        for (let length = 1; length <= 4 && index + length <= bytes.length && decoded === null; length++) {
            try {
                decoded = decoder.decode(new Uint8Array(bytes.slice(index, index + length)));
                index += length;
            } catch (_error) {
                decoded = null;
            }
        }
        if (decoded === null) {
            out += "\\x" + bytes[index].toString(16).padStart(2, "0");
            index += 1;
        } else {
            out += visible(decoded);
        }
    }
    return out;
}

/* "1h0m0s", "6s", "500ms", "1m30.5s" (the daemon's compact durations) in seconds; null if
 * the text is not one. */
export function seconds(text) {
    if (typeof text === "number")
        return text;
    if (typeof text !== "string")
        return null;
    const units = { h: 3600, m: 60, s: 1, ms: 1e-3, us: 1e-6, "µs": 1e-6, ns: 1e-9 };
    let total = 0;
    let matched = "";
    for (const part of text.matchAll(/(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)/g)) {
        total += parseFloat(part[1]) * units[part[2]];
        matched += part[0];
    }
    return matched.length > 0 && matched === text.replace(/\s/g, "") ? total : null;
}

/* 3.6 -> "3.6s", 75 -> "1m15s", 0.018 -> "18ms": as `status` writes them. */
export function duration(value) {
    if (value === null || value === undefined || !isFinite(value))
        return "-";
    if (value < 1)
        return Math.round(value * 1000) + "ms";
    if (value < 60)
        return (Math.round(value * 10) / 10) + "s";
    const hours = Math.floor(value / 3600);
    const minutes = Math.floor((value % 3600) / 60);
    const rest = Math.round(value % 60);
    return (hours > 0 ? hours + "h" : "") + minutes + "m" + rest + "s";
}

/* An ISO 8601 instant as the browser's local time, with how long ago or ahead. */
export function when(iso) {
    if (!iso)
        return "-";
    const date = new Date(iso);
    if (isNaN(date.getTime()))
        return visible(iso);
    const delta = (date.getTime() - Date.now()) / 1000;
    const relative = Math.abs(delta) < 1 ? "now" : delta > 0 ? "in " + duration(delta) : duration(-delta) + " ago";
    return date.toLocaleString() + " (" + relative + ")";
}

/* el("td", { class: "x", title: t }, "text", child, ...): attributes set one by one, strings
 * become text nodes. */
export function el(tag, attributes, ...children) {
    const node = tag === "svg" || tag.startsWith("svg:")
        ? document.createElementNS("http://www.w3.org/2000/svg", tag.replace("svg:", ""))
        : document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
        if (value === null || value === undefined || value === false)
            continue;
        if (name === "onclick")
            node.addEventListener("click", value);
        else
            node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
        if (child === null || child === undefined || child === false)
            continue;
        node.append(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
    }
    return node;
}

export function svg(tag, attributes, ...children) {
    return el("svg:" + tag, attributes, ...children);
}

/* Colours of outcomes, as PatternFly labels. */
export function outcomeColour(outcome) {
    switch (outcome) {
    case "ok": return "green";
    case "failed": return "red";
    case "expired": return "orange";
    case "running": return "blue";
    case "ran_elsewhere": return "cyan";
    case "missed": return "purple";
    default: return "grey";
    }
}

export function label(text, colour) {
    return el("span", { class: "pf-c-label pf-m-" + (colour || outcomeColour(text)) },
              el("span", { class: "pf-c-label__content" }, visible(text)));
}

/* A PatternFly description list of [term, value] pairs; values may be nodes. */
export function descriptionList(pairs, id) {
    return el("dl", { class: "pf-c-description-list pf-m-horizontal pf-m-compact", id },
              pairs.filter(pair => pair).map(([term, value]) =>
                  el("div", { class: "pf-c-description-list__group" },
                     el("dt", { class: "pf-c-description-list__term" }, el("span", { class: "pf-c-description-list__text" }, term)),
                     el("dd", { class: "pf-c-description-list__description" },
                        el("div", { class: "pf-c-description-list__text" }, typeof value === "string" ? visible(value) : value)))));
}

/* A compact PatternFly table: `columns` are header texts, `rows` arrays of cells (text or
 * nodes), with an optional `data-row` key per row for tests. */
export function table(columns, rows, options) {
    options = options || {};
    return el("table", { class: "pf-c-table pf-m-compact pf-m-grid-md", role: "grid", id: options.id, "aria-label": options.label },
              el("thead", {}, el("tr", { role: "row" }, columns.map(text => el("th", { role: "columnheader", scope: "col" }, text)))),
              el("tbody", { role: "rowgroup" }, rows.map(row =>
                  el("tr", { role: "row", "data-row": row.key },
                     row.cells.map((cell, index) => el("td", { role: "cell", "data-label": columns[index] },
                                                       typeof cell === "string" ? visible(cell) : cell))))));
}

export function card(title, body, options) {
    options = options || {};
    return el("article", { class: "pf-c-card ct-card", id: options.id },
              el("div", { class: "pf-c-card__header" },
                 el("div", { class: "pf-c-card__title" }, el("h2", { class: "pf-c-title pf-m-lg" }, title)),
                 options.actions ? el("div", { class: "pf-c-card__actions" }, options.actions) : null),
              el("div", { class: "pf-c-card__body" }, body));
}

export function alert(variant, title, details, id) {
    return el("div", { class: "pf-c-alert pf-m-inline pf-m-" + variant, id, role: variant === "danger" ? "alert" : null },
              el("p", { class: "pf-c-alert__title" }, title),
              details && details.length ? el("div", { class: "pf-c-alert__description" }, details) : null);
}

export function button(text, variant, onclick, attributes) {
    return el("button", Object.assign({ class: "pf-c-button pf-m-" + variant, type: "button", onclick }, attributes || {}), text);
}
