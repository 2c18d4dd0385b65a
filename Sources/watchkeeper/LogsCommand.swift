import ArgumentParser
import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

/// `watchkeeper logs`: a job's lines and run records, read from the journal files with
/// sd-journal. No control socket: it works with the daemon stopped, and on a copied journal.
struct Logs: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "A task's, watch rule's or run's output lines and run records, from the journal (daemon running or not).",
        discussion: """
            NAME is a task's or a watch rule's name (both, unless --task or --watch), or 16 hex \
            digits: a run ID. Output lines through the daemon are matched by the run's journal \
            fields; output = "direct" lines by their identifier within the daemon's unit (they carry \
            no run ID, so `logs RUN_ID` does not show them). One line per entry, oldest first, \
            everything from the job escaped: TIME task|watch NAME RUN_ID stdout|stderr: LINE, \
            ... ended: OUTCOME for the run's record, ... warning|notice: MESSAGE for the daemon's \
            messages about the run, NAME[PID] output: LINE for direct output.
            Exit codes: 0 entries shown (or -f ended by INT, TERM or HUP), 1 no entries for NAME, \
            66 the journal keeps nothing (no journal files), 77 its files are not readable by this \
            user, 71 sd-journal failed.
            """
    )

    @Argument(help: "A task's or watch rule's name, or a run ID (16 hex digits).",
              completion: .custom { words, _, prefix in DaemonNames.complete(words, tasks: true, watches: true, prefix: prefix) })
    var name: String
    @Option(name: .customShort("n"), help: "How many of the newest entries to show (0-100000).")
    var count: Int = 20
    @Flag(name: [.short, .long], help: "Then show new entries as they come, until interrupted (exits 0).")
    var follow = false
    @Flag(name: .long, help: "NAME is a task's (not a watch rule's, nor a run ID).")
    var task = false
    @Flag(name: .long, help: "NAME is a watch rule's (not a task's, nor a run ID).")
    var watch = false
    @Option(name: .long, help: "Read the journal files in DIR (as journalctl --directory), not this machine's journal.",
            completion: .directory)
    var directory: String?

    func validate() throws {
        guard (0...100_000).contains(count) else { throw ValidationError("-n must be between 0 and 100000") }
        if task && watch { throw ValidationError("--task and --watch: give one of them, or neither for both") }
        if name.isEmpty { throw ValidationError("unable to read logs: the name is empty") }
    }

    func run() throws {
        let query = JobLogQuery.resolve(name, task: task, watch: watch)
        // -f waits for INT, TERM and HUP on a signalfd (they stay blocked, as main.swift left
        // them); without -f they end the command as usual.
        if !follow { HandledSignals.unblockInCallingThread() }
        do {
            let reader = try JournalReader(source: directory.map { .directory($0) } ?? .local)
            try query.apply(to: reader)
            let (entries, newest) = try query.last(count, in: reader)
            for entry in entries { print(JobLogQuery.line(entry)) }
            if !follow {
                guard newest == nil else { return }
                StandardError.write("watchkeeper: no journal entries for \(query.description)\(unreadableNote(reader))\n")
                throw ExitCode(WatchkeeperCore.ExitCode.refused)
            }
            fflush(nil)
            let signals = try JournalReader.signalDescriptor(for: [SIGINT, SIGTERM, SIGHUP])
            defer { close(signals) }
            try query.follow(from: newest, in: reader, signalDescriptor: signals) { batch in
                for entry in batch { print(JobLogQuery.line(entry)) }
                fflush(nil)  // all streams: `stdout` is a global Swift 6 will not touch
            }
        } catch let error as JournalReaderError {
            StandardError.write("watchkeeper: \(error)\n")
            throw ExitCode(error.exitCode)
        }
    }

    /// Some files unreadable and nothing found: the entries may be in those.
    private func unreadableNote(_ reader: JournalReader) -> String {
        guard reader.files.unreadable > 0 else { return "" }
        return " (\(reader.files.unreadable) of the journal's \(reader.files.found) files are not readable by this user: "
            + "are you root or in the group systemd-journal or adm?)"
    }
}
