#if canImport(Glibc)
import Glibc
#endif

// Two builds of one harness. `make fuzz` compiles with -sanitize=fuzzer and -DFUZZING:
// libFuzzer brings main() and calls LLVMFuzzerTestOneInput with inputs it mutates; the
// target comes from WATCHKEEPER_FUZZ_TARGET, since libFuzzer owns the command line. Every
// other build (`swift build`, so `make test`) gets a replay tool instead, which runs the
// kept seeds and past crashes through the same checks without a fuzzing toolchain:
//
//   watchkeeper-fuzz TARGET FILE|DIRECTORY...

/// stderr without its global FILE *, which Swift 6 refuses to touch from here.
private func printError(_ line: String) {
    var bytes = Array((line + "\n").utf8)
    _ = write(2, &bytes, bytes.count)
}

#if FUZZING
nonisolated(unsafe) private var selected: FuzzTarget?

@_cdecl("LLVMFuzzerInitialize")
public func fuzzerInitialize(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> Int32 {
    let name = getenv("WATCHKEEPER_FUZZ_TARGET").map { String(cString: $0) } ?? ""
    guard let target = FuzzTarget(rawValue: name) else {
        printError("watchkeeper-fuzz: set WATCHKEEPER_FUZZ_TARGET to one of: \(FuzzTarget.allCases.map(\.rawValue).joined(separator: ", "))")
        exit(64)
    }
    selected = target
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    selected?.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
#else
@main
enum Replay {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        guard let name = arguments.first, let target = FuzzTarget(rawValue: name), arguments.count > 1 else {
            printError("usage: watchkeeper-fuzz {\(FuzzTarget.allCases.map(\.rawValue).joined(separator: "|"))} FILE|DIRECTORY...")
            exit(64)
        }
        var count = 0
        for path in arguments.dropFirst() {
            for file in inputs(at: path) {
                guard let bytes = read(file) else {
                    printError("watchkeeper-fuzz: unable to read \(file): \(String(cString: strerror(errno)))")
                    exit(66)
                }
                // Named first, so a crash shows which input it was.
                printError("\(target.rawValue): \(file)")
                bytes.withUnsafeBytes { target.run($0) }
                count += 1
            }
        }
        print("\(target.rawValue): \(count) inputs passed")
    }

    /// A file, or the regular files directly in a directory, sorted.
    private static func inputs(at path: String) -> [String] {
        guard let directory = opendir(path) else { return [path] }
        defer { closedir(directory) }
        var files: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
            if name.hasPrefix(".") { continue }
            var info = stat()
            let file = path + "/" + name
            if stat(file, &info) == 0, info.st_mode & S_IFMT == S_IFREG { files.append(file) }
        }
        return files.sorted()
    }

    private static func read(_ path: String) -> [UInt8]? {
        guard let stream = fopen(path, "rb") else { return nil }
        defer { fclose(stream) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = fread(&chunk, 1, chunk.count, stream)
            bytes += chunk[..<count]
            if count < chunk.count { return ferror(stream) == 0 ? bytes : nil }
        }
    }
}
#endif
