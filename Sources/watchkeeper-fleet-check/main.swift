// watchkeeper-fleet-check: reads fleet histories (JSON lines, FleetHistory.swift) and says
// whether any run overlapped another of its item, ran again after one ended ok, never
// ended, or an expected item never ran ok (a fire an etcd outage held excepted, injected or
// observed). The nemesis (Tests/reliability) calls it on the log its jobs wrote; the
// simulation uses the same checker in memory.
//
//   watchkeeper-fleet-check [--silence-window SECONDS] [--held-fire-slack SECONDS]
//                           [--max-stall-share FRACTION] [--json] FILE...
//
// Exit status: 0 no anomaly, 1 anomalies (listed), 2 unreadable input or usage, 3 no anomaly
// but not judged: observed etcd stalls cover more of the history than --max-stall-share.
import FleetCheck
import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

func say(_ message: String) {
    let line = Array("watchkeeper-fleet-check: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
}

func fail(_ message: String) -> Never {
    say(message)
    exit(2)
}

func readLines(_ path: String) -> [String] {
    guard let file = fopen(path, "r") else { fail("unable to open \(path): \(String(cString: strerror(errno)))") }
    defer { fclose(file) }
    var lines: [String] = []
    var buffer: UnsafeMutablePointer<CChar>?
    var capacity = 0
    while getline(&buffer, &capacity, file) >= 0 {
        lines.append(String(cString: buffer!))
    }
    free(buffer)
    return lines.map { $0.hasSuffix("\n") ? String($0.dropLast()) : $0 }
}

let usage = "watchkeeper-fleet-check [--silence-window SECONDS] [--held-fire-slack SECONDS] [--max-stall-share FRACTION] [--json] FILE..."
var arguments = Array(CommandLine.arguments.dropFirst())
var checker = FleetHistoryChecker()
var asJSON = false
var paths: [String] = []
while !arguments.isEmpty {
    let argument = arguments.removeFirst()
    switch argument {
    case "--silence-window":
        guard let value = arguments.first.flatMap(Double.init), value >= 0 else { fail("--silence-window needs seconds") }
        arguments.removeFirst()
        checker.silenceWindow = value
    case "--held-fire-slack":
        guard let value = arguments.first.flatMap(Double.init), value >= 0 else { fail("--held-fire-slack needs seconds") }
        arguments.removeFirst()
        checker.heldFireSlack = value
    case "--max-stall-share":
        guard let value = arguments.first.flatMap(Double.init), (0...1).contains(value) else {
            fail("--max-stall-share needs a fraction from 0 to 1")
        }
        arguments.removeFirst()
        checker.maxObservedStallShare = value
    case "--json": asJSON = true
    case "-h", "--help":
        print("usage: \(usage)")
        exit(0)
    default: paths.append(argument)
    }
}
if paths.isEmpty { fail("no history file (usage: \(usage))") }

var events: [FleetHistoryEvent] = []
for path in paths {
    for (index, line) in readLines(path).enumerated() {
        do {
            if let event = try FleetHistoryEvent.parse(line: line, lineNumber: index + 1) { events.append(event) }
        } catch {
            fail("\(path): \(error)")
        }
    }
}
// Files are merged by time: several writers append to one log, or each to its own.
events = events.enumerated().sorted {
    (FleetHistoryEvent.sortKey($0.element), $0.offset) < (FleetHistoryEvent.sortKey($1.element), $1.offset)
}.map(\.element)
let report = checker.check(events)
print(asJSON ? report.dumpValue.json : report.dumpValue.text())
if report.anomalyCount > 0 { exit(1) }
if let unjudged = report.unjudged {
    say("not judged: \(unjudged)")
    exit(3)
}
exit(0)
