//===----------------------------------------------------------------------===//
//
// This source file is part of the Swift Argument Parser open source project
//
// Copyright (c) 2025 Apple Inc. and the Swift project authors
// Licensed under Apache License v2.0 with Runtime Library Exception
//
// See https://swift.org/LICENSE.txt for license information
//
//===----------------------------------------------------------------------===//

// watchkeeper: upstream imports FoundationEssentials here for LocalizedError and JSONEncoder,
// which links 140 of its objects, _StringProcessing and _RegexParser into the daemon: 22 MB
// of binary and 0.6 MiB of idle RSS (PATCHES.md). Errors are described by their
// `description`, and `--experimental-dump-help` is written by JSONWriter.swift.

extension Error {
  func describe() -> String {
    String(describing: self)
  }
}

enum JSONEncoder {
  static func encode<T: Encodable>(_ value: T) -> String {
    (try? JSONWriter.prettyPrinted(value)) ?? ""
  }
}
