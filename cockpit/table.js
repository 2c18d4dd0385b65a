/* A PatternFly table updated in place, row by row (keyed) and cell by cell: the page
 * refreshes every second, and rebuilding the rows would replace a button under the pointer
 * between its press and its release, and lose a hovered row. The cell of actions is built
 * only when its own key changes. */

import { el, visible } from "./format.js";

export class LiveTable {
    /* `columns`: header texts; `options.actions`: a header for a last column of buttons;
     * `options.empty`: the text of the one row shown when there is none. */
    constructor(columns, options) {
        this.columns = columns;
        this.options = options || {};
        this.rows = new Map();
        const headers = columns.concat(this.options.actions !== undefined ? [this.options.actions] : []);
        this.body = el("tbody", { role: "rowgroup" });
        this.node = el("table", { class: "pf-c-table pf-m-compact pf-m-grid-md", role: "grid", id: this.options.id, "aria-label": this.options.label },
                       el("thead", {}, el("tr", { role: "row" }, headers.map(text => el("th", { role: "columnheader", scope: "col" }, text)))),
                       this.body);
        this.emptyRow = el("tr", { role: "row", class: "wk-empty" },
                           el("td", { role: "cell", colspan: String(headers.length) }, this.options.empty || "None"));
    }

    /* `rows`: [{ key, cells: [text or node], actionsKey, actions: () => node }] in order. */
    update(rows) {
        const seen = new Set();
        let previous = null;
        for (const row of rows) {
            seen.add(row.key);
            const entry = this.rows.get(row.key) || this._add(row.key);
            row.cells.forEach((cell, index) => this._setCell(entry, index, cell));
            if (this.options.actions !== undefined && entry.actionsKey !== row.actionsKey) {
                entry.actionsKey = row.actionsKey;
                entry.cells[this.columns.length].replaceChildren(...[row.actions ? row.actions() : null].filter(Boolean));
            }
            const expected = previous ? previous.nextSibling : this.body.firstChild;
            if (expected !== entry.row)
                this.body.insertBefore(entry.row, expected);
            previous = entry.row;
        }
        for (const [key, entry] of this.rows) {
            if (!seen.has(key)) {
                entry.row.remove();
                this.rows.delete(key);
            }
        }
        if (rows.length === 0 && !this.emptyRow.isConnected)
            this.body.append(this.emptyRow);
        else if (rows.length > 0)
            this.emptyRow.remove();
        return this.node;
    }

    _add(key) {
        const count = this.columns.length + (this.options.actions !== undefined ? 1 : 0);
        const cells = [];
        for (let index = 0; index < count; index++) {
            const label = index < this.columns.length ? this.columns[index] : this.options.actions;
            cells.push(el("td", { role: "cell", "data-label": label, class: index >= this.columns.length ? "pf-c-table__action" : null }));
        }
        const entry = { row: el("tr", { role: "row", "data-key": key }, cells), cells, signatures: [], actionsKey: undefined };
        this.rows.set(key, entry);
        return entry;
    }

    _setCell(entry, index, cell) {
        const node = typeof cell === "string" || typeof cell === "number" ? document.createTextNode(visible(String(cell))) : cell;
        // Our own elements, compared as markup only to tell whether anything changed.
        const signature = node.nodeType === Node.TEXT_NODE ? "text:" + node.data : node.outerHTML;
        if (entry.signatures[index] === signature)
            return;
        entry.signatures[index] = signature;
        entry.cells[index].replaceChildren(node);
    }
}
