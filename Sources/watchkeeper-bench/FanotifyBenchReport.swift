// What the fanotify benchmark prints (FanotifyBenchmark.swift): a line per case, the
// table, and issue 24's bounds checked against the figures.

import Foundation

private func mebibytes(_ kibibytes: Int?) -> String {
    kibibytes.map { String(format: "%.1f", Double($0) / 1024) } ?? "-"
}

func reportCase(_ kind: FanotifyBenchCase, _ result: FanotifyCaseResult) {
    if let failure = result.failure { return report("  \(kind.label): failed: \(failure)") }
    var line = "  " + kind.label.padding(toLength: 22, withPad: " ", startingAt: 0)
        + String(format: " watching after %.2f s, VmRSS %@ MiB", result.watchingAfter, mebibytes(result.atWatching?.resident))
    line += ", at the end \(mebibytes(result.atEnd?.resident)) MiB (peak \(mebibytes(result.atEnd?.peak)) MiB)"
    if let bytes = result.markBytes { line += String(format: "; mark caches %+.1f MiB", Double(bytes) / 1_048_576) }
    if let bytes = result.unreclaimableSlabBytes { line += String(format: ", SUnreclaim %+.1f MiB", Double(bytes) / 1_048_576) }
    if let method = result.treeMethod { line += "; tree_method \(method)" }
    if let listed = result.listedAfter { line += String(format: "; tree fully listed %.1f s after the start", listed) }
    if let cpu = result.cpuUntilListed { line += String(format: " (daemon CPU until then %.1f s)", cpu) }
    if !result.notes.isEmpty { line += "; " + result.notes.joined(separator: "; ") }
    report(line)
    printLatency(kind.label, result.latency)
}

func reportTable(_ settings: FanotifyBenchSettings, _ results: [FanotifyBenchCase: FanotifyCaseResult]) {
    func cell(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : String(repeating: " ", count: width - text.count) + text
    }
    func perDirectory(_ bytes: Int?) -> Double? { bytes.map { Double($0) / Double(settings.directories) } }
    report("")
    report("\(settings.directories) directories        | watching s | RSS MiB | peak MiB | marks MiB | B/dir | SUnreclaim MiB | p50 ms |  p99 ms | missing")
    for kind in settings.cases {
        guard let result = results[kind], result.failure == nil else {
            report(kind.label.padding(toLength: 24, withPad: " ", startingAt: 0) + " | failed")
            continue
        }
        let memory = [result.atWatching?.resident, result.atEnd?.resident].compactMap { $0 }.max()
        report(kind.label.padding(toLength: 24, withPad: " ", startingAt: 0)
            + " | " + cell(String(format: "%.2f", result.watchingAfter), 10)
            + " | " + cell(mebibytes(memory), 7) + " | " + cell(mebibytes(result.atEnd?.peak), 8)
            + " | " + cell(result.markBytes.map { String(format: "%.1f", Double($0) / 1_048_576) } ?? "-", 9)
            + " | " + cell(perDirectory(result.markBytes).map { String(format: "%.1f", $0) } ?? "-", 5)
            + " | " + cell(result.unreclaimableSlabBytes.map { String(format: "%.1f", Double($0) / 1_048_576) } ?? "-", 14)
            + " | " + cell(result.latency.percentile(0.5).map { String(format: "%.2f", $0) } ?? "-", 6)
            + " | " + cell(result.latency.percentile(0.99).map { String(format: "%.2f", $0) } ?? "-", 7)
            + " | " + cell("\(result.latency.missing)", 7))
    }
    report("RSS: the larger VmRSS of at watching and after the files; peak: VmHWM after the files. marks: the fsnotify mark")
    report("  caches (objects in use x slab size) at watching less before the start; SUnreclaim: all unreclaimable slab, same span.")
    report("  p50/p99: close(2) to the job's first instruction (watchkeeper) or to the event's line on stdout (the peers).")

    // Issue 24's bounds for method = "fanotify".
    guard let fanotify = results[.fanotify], fanotify.failure == nil else { return report("issue 24's bounds: not checked, the fanotify case did not run") }
    let inotify = results[.inotify].flatMap { $0.failure == nil ? $0 : nil }
    func verdict(_ holds: Bool?) -> String { holds.map { $0 ? "holds" : "DOES NOT HOLD" } ?? "not checked" }
    report(String(format: "bound: watching starts in <= 3 s: %.2f s: %@", fanotify.watchingAfter, verdict(fanotify.watchingAfter <= 3)))
    let rss = [fanotify.atWatching?.resident, fanotify.atEnd?.resident].compactMap { $0 }.max()
    report("bound: daemon RSS <= 40 MiB: \(mebibytes(rss)) MiB: \(verdict(rss.map { $0 <= 40 * 1024 })); peak \(mebibytes(fanotify.atEnd?.peak)) MiB: \(verdict(fanotify.atEnd.map { $0.peak <= 40 * 1024 }))")
    // "About 0 per directory against inotify's": under a hundredth of inotify mode's.
    if let ours = perDirectory(fanotify.markBytes), let theirs = perDirectory(inotify?.markBytes), theirs > 0 {
        report(String(format: "bound: kernel memory for marks ~ 0 per directory against inotify's: %.3f B/dir (%d bytes in all) against %.1f B/dir (%.2f %%, taken as ~ 0 under 1 %%): %@",
                      ours, fanotify.markBytes ?? 0, theirs, ours / theirs * 100, verdict(ours / theirs < 0.01)))
    } else {
        report("bound: kernel memory for marks: not checked (no inotify case or no slab figures)")
    }
    for (name, p) in [("median", 0.5), ("p99", 0.99)] {
        if let ours = fanotify.latency.percentile(p), let theirs = inotify?.latency.percentile(p), theirs > 0 {
            report(String(format: "bound: event-to-job latency within 1.1x of inotify mode, %@: %.2f ms against %.2f ms = %.2fx: %@",
                          name, ours, theirs, ours / theirs, verdict(ours / theirs <= 1.1)))
        } else {
            report("bound: event-to-job latency, \(name): not checked (no inotify case or no samples)")
        }
    }
}
