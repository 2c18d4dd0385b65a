/* The pages below the overview: a task's or watch rule's history as a timeline, one run with
 * its record and output, and the fleet. */

import { el, svg, visible, duration, when, seconds, label, descriptionList, alert, outcomeColour } from "./format.js";

const OUTCOMES = ["ok", "failed", "expired", "cancelled", "missed", "ran_elsewhere", "running"];

/* Runs oldest to newest, left to right: each a bar as tall as its duration against the
 * budget (the dashed line), coloured by outcome; a run past its budget reaches above the
 * line. Without a budget (a watch rule's is not reported) the longest run sets the scale. */
export function timeline(runs, budget, go) {
    const ordered = runs.slice().reverse();
    const width = 800;
    const height = 170;
    const top = 10;
    const plot = 130;
    const longest = Math.max(...ordered.map(run => run.duration_s || 0), 0.001);
    const scale = budget ? Math.max(budget * 1.5, Math.min(longest, budget * 3)) : longest;
    const slot = width / Math.max(ordered.length, 30);
    const barWidth = Math.max(2, slot * 0.7);
    const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "wk-timeline", role: "img", "aria-label": "runs by outcome and duration" });
    chart.append(svg("line", { x1: 0, x2: width, y1: top + plot, y2: top + plot, class: "wk-axis" }));
    if (budget) {
        const y = top + plot - plot * budget / scale;
        chart.append(svg("line", { x1: 0, x2: width, y1: y, y2: y, class: "wk-budget-line" }),
                     svg("text", { x: width - 4, y: y - 3, class: "wk-chart-text", "text-anchor": "end" }, "budget " + duration(budget)));
    }
    ordered.forEach((run, index) => {
        const value = Math.max(run.duration_s || 0, 0);
        const barHeight = Math.max(2, plot * Math.min(value, scale) / scale);
        const x = index * slot + (slot - barWidth) / 2;
        const rect = svg("rect", {
            x: x.toFixed(1), y: (top + plot - barHeight).toFixed(1), width: barWidth.toFixed(1), height: barHeight.toFixed(1),
            class: "wk-run wk-outcome-" + outcomeColour(run.outcome), "data-outcome": run.outcome, "data-run": run.run_id || "",
        }, svg("title", {}, [visible(run.outcome), run.duration_s !== null && run.duration_s !== undefined ? duration(run.duration_s) : "",
            run.path !== undefined ? visible(run.path) : "", when(run.started_at || run.finished_at), run.run_id ? "run " + visible(run.run_id) : ""]
            .filter(Boolean).join(" · ")));
        if (run.run_id)
            rect.addEventListener("click", () => go(run.run_id));
        chart.append(rect);
    });
    if (ordered.length) {
        chart.append(svg("text", { x: 0, y: height - 4, class: "wk-chart-text" }, when(ordered[0].started_at || ordered[0].finished_at)),
                     svg("text", { x: width, y: height - 4, class: "wk-chart-text", "text-anchor": "end" },
                         when(ordered[ordered.length - 1].started_at || ordered[ordered.length - 1].finished_at)));
    }
    const counts = {};
    for (const run of runs)
        counts[run.outcome] = (counts[run.outcome] || 0) + 1;
    const legend = el("div", { class: "wk-legend" },
                      Object.keys(counts).sort((a, b) => OUTCOMES.indexOf(a) - OUTCOMES.indexOf(b))
                          .map(outcome => label(outcome + " " + counts[outcome])));
    return el("div", { class: "wk-timeline-box", id: "timeline" }, chart, legend,
              budget ? null : el("small", { class: "wk-muted" }, "bars to the scale of the longest run (no budget is reported for this rule)"));
}

export function runRows(runs, kind, name, link) {
    return runs.map((run, index) => ({
        key: (run.run_id || "") + ":" + (run.finished_at || index),
        cells: [
            run.run_id ? link([kind, name, "run", run.run_id], run.run_id) : "-",
            label(run.outcome),
            kind === "watch" ? el("span", { class: "wk-path" }, visible(run.path)) : when(run.scheduled_at),
            when(run.started_at),
            run.duration_s !== null && run.duration_s !== undefined ? duration(run.duration_s) : "-",
            run.exit_code !== null && run.exit_code !== undefined ? String(run.exit_code) : visible(run.signal || "-"),
            visible(run.host || run.expiry || "-"),
        ],
    }));
}

export const RUN_COLUMNS = {
    task: ["Run", "Outcome", "Due", "Started", "Duration", "Exit", "Host / expiry"],
    watch: ["Run", "Outcome", "File", "Started", "Duration", "Exit", "Host / expiry"],
};

/* One run's record, from History, or from the running job while it runs. */
export function runRecord(record, job) {
    if (job) {
        return descriptionList([
            ["Outcome", label("running", "blue")],
            ["Run", visible(job.run_id)],
            ["PID", String(job.pid)],
            ["Phase", visible(job.phase)],
            ["Elapsed", duration(job.elapsed_s) + (job.budget_s ? " of " + duration(job.budget_s) : "")],
            job.about ? ["File", visible(job.about)] : null,
            job.status ? ["Status", visible(job.status)] : null,
        ], "run-record");
    }
    if (!record)
        return el("p", { class: "wk-muted", id: "run-record" }, "Not in the recent history (yet).");
    return descriptionList([
        ["Outcome", el("span", { id: "run-outcome" }, label(record.outcome))],
        ["Run", visible(record.run_id) + (record.attempt ? ", attempt " + record.attempt : "")],
        record.path !== undefined ? ["File", visible(record.path)] : null,
        record.scheduled_at ? ["Due", when(record.scheduled_at)] : null,
        ["Started", when(record.started_at)],
        ["Finished", when(record.finished_at)],
        ["Duration", record.duration_s !== null && record.duration_s !== undefined ? duration(record.duration_s) : "-"],
        ["Exit", record.exit_code !== null && record.exit_code !== undefined ? String(record.exit_code) : visible(record.signal || "-")],
        record.expiry ? ["Expiry", visible(record.expiry)] : null,
        record.host ? ["Host", visible(record.host)] : null,
    ], "run-record");
}

/* `watchkeeper logs RUN_ID -f`: the run's lines and record from the journal, as they come,
 * into `output`; returns what stops it. */
export function followOutput(command, runID, output, onProblem) {
    let partial = "";
    const process = window.cockpit.spawn([command, "logs", runID, "-n", "2000", "-f"], { superuser: "try", err: "message" });
    process.stream(data => {
        const lines = (partial + data).split("\n");
        partial = lines.pop();
        const fragment = document.createDocumentFragment();
        // The CLI has escaped every control character already: what is left is text.
        for (const line of lines)
            fragment.append(el("div", { class: "wk-line" }, visible(line, true)));
        output.append(fragment);
    });
    process.catch(error => {
        if (error.problem !== "cancelled")
            onProblem(error.message || error.problem || String(error));
    });
    return () => process.close("cancelled");
}

/* Fires of fleet tasks across every host, newest first. */
export function fleetRows(fires, link) {
    return fires.map(fire => ({
        key: fire.task + "@" + fire.instant,
        cells: [
            link(["task", fire.task], visible(fire.task)),
            visible(fire.instant),
            el("span", { class: "wk-host" }, visible(fire.host)),
            visible(fire.run_id),
            label(fire.outcome || fire.state),
            when(fire.started_at),
            when(fire.finished_at),
            visible(fire.taken_over_from || "-"),
        ],
    }));
}

export const FLEET_COLUMNS = ["Task", "Fire", "Host", "Run", "Outcome", "Started", "Finished", "Taken over from"];

/* The members the page can see: this host with its lease (from its daemon), and every host
 * that ran one of the recent fires; a fire still running is bound to its host's lease in
 * etcd, so that host held one then. */
export function memberRows(cluster, fires) {
    const members = new Map();
    if (cluster && cluster.name)
        members.set(cluster.name, { name: cluster.name, self: true, last: null, running: 0, fires: 0 });
    for (const fire of fires) {
        const member = members.get(fire.host) || { name: fire.host, self: false, last: null, running: 0, fires: 0 };
        member.fires += 1;
        if (fire.state === "running")
            member.running += 1;
        if (!member.last || fire.instant > member.last)
            member.last = fire.instant;
        members.set(fire.host, member);
    }
    return Array.from(members.values()).map(member => ({
        key: member.name,
        cells: [
            el("span", { class: "wk-host" }, visible(member.name), member.self ? el("small", { class: "wk-muted" }, " (this host)") : null),
            member.self
                ? (cluster.lease_state === "held" ? el("span", {}, label("held", "green"), " " + visible(cluster.lease_id) +
                   (cluster.lease_expires_in_s !== null ? ", expires in " + duration(cluster.lease_expires_in_s) : ""))
                    : label(cluster.lease_state || "none", "red"))
                : (member.running ? el("span", {}, label("held", "green"), " (a claim it runs is bound to it)") : el("span", { class: "wk-muted" }, "not seen from here")),
            String(member.fires),
            member.running ? label(member.running + " running", "blue") : "0",
            member.last ? visible(member.last) : "-",
        ],
    }));
}

export const MEMBER_COLUMNS = ["Member", "Lease", "Recent fires", "Running", "Last fire"];

export function heldFires(status) {
    const tasks = ((status.tasks || {}).tasks || []).filter(task => task.fleet_state && task.fleet_state.held_fire);
    const cause = (status.tasks || {}).fleet_held_cause;
    if (!tasks.length && !cause)
        return el("p", { class: "wk-muted", id: "held-fires" }, "No fire is held.");
    return el("div", { id: "held-fires" },
              cause ? alert("warning", "Fleet fires are held: " + visible(cause)) : null,
              el("ul", {}, tasks.map(task => el("li", {}, visible(task.name) + ": fire " + visible(task.fleet_state.held_fire) + " held" +
                                                (task.fleet_state.held_cause ? " (" + visible(task.fleet_state.held_cause) + ")" : "")))));
}

export { seconds };
