/* watchkeeper's page in Cockpit: the daemon asked over its control socket, as the CLI asks
 * it (Varlink through a Cockpit stream channel), refreshed every second; a run's output from
 * the journal through `watchkeeper logs -f`. Buttons only for a session the socket lets act
 * (Status says which: `access.level`); read-only sessions are told why there are none. */

import { VarlinkConnection, VarlinkError } from "./varlink.js";
import { el, visible, seconds, card, alert, button, descriptionList, label } from "./format.js";
import { LiveTable } from "./table.js";
import * as views from "./views.js";
import * as detail from "./detail.js";

const cockpit = window.cockpit;
const config = ((cockpit.manifests || {}).watchkeeper || {}).config || {};
const SOCKET = config.socket || "/run/watchkeeper/control.sock";
const COMMAND = config.command || "watchkeeper";
const control = new VarlinkConnection(SOCKET, "try");

const state = { status: null, access: null, problem: null, previews: {}, nextAt: 0, view: null, timer: null };

/* An in-page link: shown as a link, followed with cockpit.location. */
function link(path, text) {
    return el("a", {
        href: "#" + cockpit.location.encode(path),
        onclick: event => { event.preventDefault(); cockpit.location.go(path) },
    }, text);
}

function notify(variant, title, details) {
    const area = document.getElementById("notifications");
    const node = alert(variant, title, details);
    node.append(el("div", { class: "pf-c-alert__action" }, button("Close", "plain", () => node.remove(), { "aria-label": "close" })));
    area.prepend(node);
    while (area.children.length > 4)
        area.lastChild.remove();
    return node;
}

function describe(error) {
    if (error instanceof VarlinkError) {
        const parameters = error.parameters;
        switch (error.short) {
        case "NotStarted": return "not started: " + visible(parameters.reason);
        case "NoSuchTask": return "no task " + visible(parameters.task);
        case "NoSuchRun": return "no run " + visible(parameters.run_id) + " waits or runs (it may have just finished)";
        case "NotRunning": return "the daemon is " + visible(parameters.state);
        case "PermissionDenied": return "permission denied" + (parameters.method ? ": this session may only read, and " + parameters.method + " acts" : "");
        case "Unavailable": return visible(parameters.reason);
        default: return visible(error.name + " " + JSON.stringify(parameters));
        }
    }
    return visible(error.message || String(error));
}

/* The actions, each as the CLI does it. */
const actions = {
    trigger(task, fleet) {
        control.call("io.watchkeeper.Control.Trigger", fleet ? { task, fleet: true } : { task })
            .then(reply => notify("success", "task " + visible(task) + ": run " + reply.run_id + " submitted" + (fleet ? " through the fleet" : ""),
                                  [link(["task", task, "run", reply.run_id], "Follow run " + reply.run_id)]))
            .catch(error => notify("danger", "Unable to trigger " + visible(task) + ": " + describe(error)))
            .finally(refresh);
    },
    cancel(runID) {
        control.call("io.watchkeeper.Control.Cancel", { run_id: runID })
            .then(reply => notify("info", "run " + runID + (reply.was === "running" ? " is expiring through its on_expire handler" : ": cancelled before it started")))
            .catch(error => notify("danger", "Unable to cancel run " + runID + ": " + describe(error)))
            .finally(refresh);
    },
    reload() {
        control.call("io.watchkeeper.Control.Reload")
            .then(reply => notify("success", "Reloaded: configuration generation " + reply.generation))
            .catch(error => {
                if (error instanceof VarlinkError && error.short === "ReloadFailed") {
                    notify("danger", "The new configuration was refused; generation " + error.parameters.generation + " stays in force",
                           [el("ul", { class: "wk-errors", id: "reload-errors" }, (error.parameters.errors || []).map(text => el("li", {}, visible(text))))]);
                } else {
                    notify("danger", "Unable to reload: " + describe(error));
                }
            })
            .finally(refresh);
    },
    dump() {
        control.call("io.watchkeeper.Control.Dump")
            .then(reply => {
                const box = document.getElementById("dump");
                box.replaceChildren(card("State dump", el("pre", { class: "wk-dump", id: "dump-text" },
                                                            String(reply.text || "").split("\n").map(line => visible(line, true)).join("\n")),
                                         { actions: button("Close", "secondary", () => box.replaceChildren()) }));
            })
            .catch(error => notify("danger", "Unable to dump: " + describe(error)));
    },
};

function mayAct() {
    return state.access && state.access.level === "control";
}

/* Why a session has no buttons, said once at the top of each page. */
function readOnlyNotice() {
    const access = state.access || {};
    const group = access.control_group;
    return alert("info", "Read-only: this session may look, not act", [
        el("p", {}, "No button to run, cancel, reload or dump: the control socket lets " + visible(access.who_may_act || "only root") +
           " do that, and this session reads as uid " + access.uid + (access.read_group ? " (group " + visible(access.read_group) + ")" : "") + ". " +
           "Turn on administrative access in Cockpit's top bar" + (group ? ", or ask to join group " + visible(group) : "") + "."),
    ], "read-only-notice");
}

function taskActions(task) {
    if (!mayAct())
        return el("span", { class: "wk-muted", title: "read-only session" }, "—");
    return el("div", { class: "wk-actions" },
              button("Run now", "secondary pf-m-small", () => actions.trigger(task.name, false), { "data-action": "trigger", "data-task": task.name }),
              task.fleet === "one" ? button("Run on the fleet", "link pf-m-small", () => actions.trigger(task.name, true), { "data-action": "trigger-fleet", "data-task": task.name }) : null);
}

function cancelAction(job) {
    if (!mayAct())
        return el("span", { class: "wk-muted", title: "read-only session" }, "—");
    return button("Cancel", "danger pf-m-small", () => actions.cancel(job.run_id), { "data-action": "cancel", "data-run": job.run_id });
}

/* ---- Views: each is built once when the route changes, then updated on every refresh. */

function overview() {
    const running = new LiveTable(["Job", "Run", "File", "PID", "Phase", "Progress", "Budget"], { actions: "", id: "running-jobs", label: "running jobs", empty: "No job is running." });
    const tasks = new LiveTable(["Task", "Schedule", "Next fires", "Last run", ""], { actions: "", id: "tasks", label: "tasks", empty: "No task is configured." });
    const watches = new LiveTable(["Watch", "Root", "Method", "Directories", "Events", "Jobs", "Settling", "Problems"], { id: "watches", label: "watches", empty: "No watch rule is configured." });
    const daemonBody = el("div");
    const clusterBox = el("div");
    const daemonActions = el("div", { class: "wk-actions", id: "daemon-actions" });
    const node = el("div", { class: "pf-l-stack pf-m-gutter" },
                    card("Daemon", daemonBody, { id: "daemon", actions: daemonActions }),
                    card("Running jobs", running.node, { id: "running" }),
                    card("Tasks", tasks.node, { id: "tasks-card" }),
                    card("Watches", watches.node, { id: "watches-card" }),
                    clusterBox);
    let accessKey = null;
    return {
        node,
        crumbs: [],
        update(status) {
            daemonBody.replaceChildren(views.daemonDetails(status));
            const key = String(mayAct());
            if (key !== accessKey) {
                accessKey = key;
                daemonActions.replaceChildren(...(mayAct()
                    ? [button("Reload", "secondary", actions.reload, { "data-action": "reload" }), button("Dump", "secondary", actions.dump, { "data-action": "dump" })]
                    : []));
            }
            running.update(views.runningRows(status, link).map(row => Object.assign(row, { actionsKey: key, actions: () => cancelAction(row.job) })));
            tasks.update(views.taskRows(status, state.previews, link).map(row => Object.assign(row, { actionsKey: key + row.task.fleet, actions: () => taskActions(row.task) })));
            watches.update(views.watchRows(status, link));
            if (status.cluster) {
                clusterBox.replaceChildren(card("Fleet", views.clusterDetails(status.cluster), { id: "cluster", actions: link(["fleet"], "Fires across the fleet") }));
            } else {
                clusterBox.replaceChildren();
            }
        },
    };
}

/* A task's or a watch rule's page: what it is, its history as a timeline, its runs. */
function history(kind, name) {
    const about = el("div");
    const chart = el("div", {}, el("p", { class: "wk-muted" }, "Loading the history…"));
    const runs = new LiveTable(detail.RUN_COLUMNS[kind], { id: "runs", label: "runs", empty: "No run recorded yet." });
    const buttons = el("div", { class: "wk-actions" });
    const node = el("div", { class: "pf-l-stack pf-m-gutter" },
                    card((kind === "task" ? "Task " : "Watch ") + visible(name), about, { id: "about", actions: buttons }),
                    card("History", chart, { id: "history" }),
                    card("Last runs", runs.node, { id: "runs-card" }));
    let runsAt = 0;
    let accessKey = null;
    return {
        node,
        crumbs: [[kind === "task" ? "Task " + visible(name) : "Watch " + visible(name), null]],
        update(status) {
            const tasks = (status.tasks || {}).tasks || [];
            const rules = (status.watches || {}).rules || [];
            const item = kind === "task" ? tasks.find(task => task.name === name) : rules.find(rule => rule.name === name);
            if (!item) {
                about.replaceChildren(alert("warning", (kind === "task" ? "No task " : "No watch rule ") + visible(name) + " is configured now"));
            } else if (kind === "task") {
                about.replaceChildren(descriptionList([
                    ["Schedule", visible(item.schedule)], ["Budget", visible(item.budget)], ["Overlap", visible(item.overlap)],
                    ["Fleet", visible(item.fleet)], ["Next fires", views.nextFires(state.previews[name], 7)], ["Last run", views.lastRun(item)],
                    ["Totals", el("span", {}, Object.entries(item.totals || {}).map(([outcome, count]) => label(outcome + " " + count)))],
                ]));
                const key = String(mayAct());
                if (key !== accessKey) {
                    accessKey = key;
                    buttons.replaceChildren(taskActions(item));
                }
            } else {
                about.replaceChildren(descriptionList([
                    ["Root", visible(item.root)], ["Method", visible(item.tree_method) + " (method = " + visible(item.method) + ")"],
                    ["Directories", String(item.inotify_watches !== undefined ? item.inotify_watches : item.fanotify_marks)],
                    ["Events", String(item.events_seen)], ["Jobs", String(item.jobs_submitted)],
                    ["Settling", String(item.pending_settle)], ["Problems", views.watchProblems(item)],
                ]));
            }
            if (Date.now() - runsAt < 2500)
                return;
            runsAt = Date.now();
            control.call("io.watchkeeper.Control.History", { name, limit: 100 }).then(reply => {
                const budget = kind === "task" && item ? seconds(item.budget) : null;
                chart.replaceChildren(detail.timeline(reply.runs || [], budget, runID => cockpit.location.go([kind, name, "run", runID])));
                runs.update(detail.runRows((reply.runs || []).slice(0, 25), kind, name, link));
            }).catch(error => chart.replaceChildren(alert("warning", "Unable to read the history: " + describe(error))));
        },
    };
}

/* One run: its record (or, while it runs, its bars) and its output from the journal. */
function run(kind, name, runID) {
    const record = el("div");
    const output = el("pre", { class: "wk-output", id: "run-output" });
    const problem = el("div");
    const cancelBox = el("div");
    const node = el("div", { class: "pf-l-stack pf-m-gutter" },
                    card("Run " + visible(runID), record, { id: "run", actions: cancelBox }),
                    card("Output", el("div", {}, problem, output), { id: "output" }));
    const stop = detail.followOutput(COMMAND, runID, output, message =>
        problem.replaceChildren(alert("warning", "Unable to read the journal: " + visible(message))));
    let found = null;
    let historyAt = 0;
    return {
        node,
        stop,
        crumbs: [[kind === "task" ? "Task " + visible(name) : "Watch " + visible(name), [kind, name]], ["Run " + visible(runID), null]],
        update(status) {
            const job = ((status.jobs || {}).running || []).find(running => running.run_id === runID);
            if (job) {
                record.replaceChildren(el("div", { class: "pf-l-stack pf-m-gutter" }, detail.runRecord(null, job),
                                          views.progressCell(job), views.budgetCell(job)));
                cancelBox.replaceChildren(cancelAction(job));
                return;
            }
            cancelBox.replaceChildren();
            if (found || Date.now() - historyAt < 1500)
                return;
            historyAt = Date.now();
            control.call("io.watchkeeper.Control.History", { name, limit: 1000 }).then(reply => {
                found = (reply.runs || []).find(entry => entry.run_id === runID) || null;
                record.replaceChildren(detail.runRecord(found, null));
            }).catch(error => record.replaceChildren(alert("warning", "Unable to read the history: " + describe(error))));
        },
    };
}

/* The fleet: members, held fires, and every host's recent fires. */
function fleet() {
    const members = new LiveTable(detail.MEMBER_COLUMNS, { id: "members", label: "members" });
    const fires = new LiveTable(detail.FLEET_COLUMNS, { id: "fleet-fires", label: "fires", empty: "No fleet fire recorded yet." });
    const held = el("div");
    const problem = el("div");
    const node = el("div", { class: "pf-l-stack pf-m-gutter" },
                    card("Members", members.node, { id: "members-card" }), card("Held fires", held, { id: "held" }),
                    card("Fires across the fleet", el("div", {}, problem, fires.node), { id: "fires" }));
    let firesAt = 0;
    let recent = [];
    return {
        node,
        crumbs: [["Fleet", null]],
        update(status) {
            held.replaceChildren(detail.heldFires(status));
            members.update(detail.memberRows(status.cluster, recent));
            if (Date.now() - firesAt < 2500)
                return;
            firesAt = Date.now();
            control.call("io.watchkeeper.Control.Fleet", { limit: 100 }).then(reply => {
                recent = reply.fires || [];
                problem.replaceChildren();
                fires.update(detail.fleetRows(recent, link));
                members.update(detail.memberRows(status.cluster, recent));
            }).catch(error => problem.replaceChildren(alert("warning", "Unable to read the fleet's fires: " + describe(error))));
        },
    };
}

function viewFor(path) {
    if (path[0] === "fleet")
        return fleet();
    if ((path[0] === "task" || path[0] === "watch") && path[1] && path[2] === "run" && path[3])
        return run(path[0], path[1], path[3]);
    if ((path[0] === "task" || path[0] === "watch") && path[1])
        return history(path[0], path[1]);
    return overview();
}

/* ---- The frame: breadcrumbs, the notice, the view; and the refresh loop. */

function showRoute() {
    if (state.view && state.view.stop)
        state.view.stop();
    state.view = viewFor(cockpit.location.path);
    document.getElementById("notifications").replaceChildren();
    document.getElementById("dump").replaceChildren();
    const crumbs = [["Watchkeeper", []]].concat(state.view.crumbs);
    const breadcrumb = document.getElementById("breadcrumb");
    breadcrumb.hidden = state.view.crumbs.length === 0;
    breadcrumb.replaceChildren(el("nav", { class: "pf-c-breadcrumb", "aria-label": "breadcrumb" },
        el("ol", { class: "pf-c-breadcrumb__list" }, crumbs.map(([text, path]) =>
            el("li", { class: "pf-c-breadcrumb__item" }, path ? link(path, text) : el("span", { class: "pf-c-breadcrumb__link pf-m-current" }, text))))));
    document.getElementById("content").replaceChildren(state.view.node);
    render();
    refresh();
}

function render() {
    const notice = document.getElementById("access");
    const content = document.getElementById("content");
    if (state.problem) {
        notice.replaceChildren(state.problem);
        content.hidden = true;
        return;
    }
    content.hidden = false;
    notice.replaceChildren(...(state.access && !mayAct() ? [readOnlyNotice()] : []));
    if (state.status && state.view)
        state.view.update(state.status);
}

/* Why the page shows nothing: the daemon is not there, or refused this user. */
function problemState(error) {
    if (error instanceof VarlinkError && error.short === "PermissionDenied") {
        const group = error.parameters.group;
        return el("div", { class: "pf-c-empty-state", id: "refused" }, el("div", { class: "pf-c-empty-state__content" },
            el("h2", { class: "pf-c-title pf-m-lg" }, "This user may not use watchkeeper's control socket"),
            el("div", { class: "pf-c-empty-state__body" },
               "The daemon refused uid " + error.parameters.uid + ". Turn on administrative access in Cockpit's top bar" +
               (group ? ", ask to join group " + visible(group) : "") + ", or ask for [daemon] read_group to include this user to see the page.")));
    }
    return el("div", { class: "pf-c-empty-state", id: "not-running" }, el("div", { class: "pf-c-empty-state__content" },
        el("h2", { class: "pf-c-title pf-m-lg" }, "watchkeeper is not running, or not listening on " + SOCKET),
        el("div", { class: "pf-c-empty-state__body" }, describe(error) + ". Start it with systemctl start watchkeeper; another runtime_dir is set in /etc/cockpit/watchkeeper.override.json.")));
}

function refresh() {
    clearTimeout(state.timer);
    const status = control.call("io.watchkeeper.Control.Status").then(reply => {
        state.status = reply.status;
        state.access = reply.access || { level: "control" };
        state.problem = null;
        if (Date.now() - state.nextAt > 15000) {
            state.nextAt = Date.now();
            control.call("io.watchkeeper.Control.Next", { count: 7 }).then(next => {
                state.previews = Object.fromEntries((next.tasks || []).map(task => [task.name, task]));
            }).catch(() => { state.nextAt = 0 });
        }
    }).catch(error => {
        state.status = null;
        state.problem = problemState(error);
        control.reset();
    });
    status.finally(() => {
        render();
        state.timer = setTimeout(refresh, 1000);
    });
}

function followTheme() {
    const apply = () => {
        const style = localStorage.getItem("shell:style") || "auto";
        const dark = style === "dark" || (style === "auto" && window.matchMedia("(prefers-color-scheme: dark)").matches);
        document.documentElement.classList.toggle("pf-theme-dark", dark);
    };
    window.addEventListener("storage", event => { if (event.key === "shell:style") apply() });
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", apply);
    apply();
}

function start() {
    followTheme();
    cockpit.translate();
    cockpit.addEventListener("locationchanged", showRoute);
    // Administrative access turned on or off: the socket decides anew on a new connection.
    try {
        const superuser = cockpit.dbus(null, { bus: "internal" }).proxy("cockpit.Superuser", "/superuser");
        let current = null;
        superuser.addEventListener("changed", () => {
            const now = superuser.Current;
            if (current !== null && now !== current && now !== "init") {
                control.reset();
                refresh();
            }
            if (now !== "init")
                current = now;
        });
    } catch (_error) { /* no internal bus: the level stays what the socket said */ }
    window.watchkeeper = { control, actions };  // for the browser tests' own calls
    showRoute();
}

start();
