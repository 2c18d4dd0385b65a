// watchkeeper: the JSON of `--experimental-dump-help`, written without FoundationEssentials
// (Foundation.swift, PATCHES.md): pretty-printed with sorted keys, as upstream asked of
// Foundation's JSONEncoder. Any Encodable value; the dump's are strings, booleans, integers,
// arrays, optionals and nested objects.

/// A value in the tree an encoding builds: containers are handed out before they are filled.
final class JSONNode {
  enum Kind { case unset, scalar, array, object }
  var kind = Kind.unset
  var scalar = ""
  var items: [JSONNode] = []
  var members: [String: JSONNode] = [:]

  func set(_ text: String) { kind = .scalar; scalar = text }
}

enum JSONWriter {
  static func prettyPrinted<T: Encodable>(_ value: T) throws -> String {
    let root = JSONNode()
    try JSONTreeEncoder.encode(value, into: root, codingPath: [])
    var out = ""
    write(root, depth: 0, to: &out)
    return out
  }

  static func write(_ node: JSONNode, depth: Int, to out: inout String) {
    let inner = String(repeating: "  ", count: depth + 1)
    switch node.kind {
    case .scalar:
      out += node.scalar
    case .array where !node.items.isEmpty:
      out += "[\n"
      for (index, item) in node.items.enumerated() {
        out += inner
        write(item, depth: depth + 1, to: &out)
        out += index == node.items.count - 1 ? "\n" : ",\n"
      }
      out += String(repeating: "  ", count: depth) + "]"
    case .array:
      out += "[]"
    case .object where !node.members.isEmpty:
      out += "{\n"
      let keys = node.members.keys.sorted()
      for (index, key) in keys.enumerated() {
        out += inner + quoted(key) + " : "
        write(node.members[key]!, depth: depth + 1, to: &out)
        out += index == keys.count - 1 ? "\n" : ",\n"
      }
      out += String(repeating: "  ", count: depth) + "}"
    case .object, .unset:
      out += "{}"
    }
  }

  /// A JSON string (RFC 8259): quotes, backslashes and control characters escaped.
  static func quoted(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
      switch scalar {
      case "\"": out += "\\\""
      case "\\": out += "\\\\"
      case "\n": out += "\\n"
      case "\r": out += "\\r"
      case "\t": out += "\\t"
      case _ where scalar.value < 0x20:
        let hex = String(scalar.value, radix: 16)
        out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
      default: out.unicodeScalars.append(scalar)
      }
    }
    return out + "\""
  }
}

struct JSONTreeEncoder: Encoder {
  let node: JSONNode
  let codingPath: [any CodingKey]
  var userInfo: [CodingUserInfoKey: Any] { [:] }

  static func encode<T: Encodable>(_ value: T, into node: JSONNode, codingPath: [any CodingKey]) throws {
    switch value {
    case let text as String: node.set(JSONWriter.quoted(text))
    case let flag as Bool: node.set(flag ? "true" : "false")
    case let number as any BinaryInteger: node.set("\(number)")
    case let number as Double: node.set(try finite(number, codingPath))
    case let number as Float: node.set(try finite(Double(number), codingPath))
    default: try value.encode(to: JSONTreeEncoder(node: node, codingPath: codingPath))
    }
  }

  private static func finite(_ number: Double, _ codingPath: [any CodingKey]) throws -> String {
    guard number.isFinite else {
      throw EncodingError.invalidValue(number, .init(codingPath: codingPath, debugDescription: "\(number) is not valid JSON"))
    }
    return "\(number)"
  }

  func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
    node.kind = .object
    return KeyedEncodingContainer(JSONKeyedContainer<Key>(node: node, codingPath: codingPath))
  }

  func unkeyedContainer() -> any UnkeyedEncodingContainer {
    node.kind = .array
    return JSONUnkeyedContainer(node: node, codingPath: codingPath)
  }

  func singleValueContainer() -> any SingleValueEncodingContainer {
    JSONSingleValueContainer(node: node, codingPath: codingPath)
  }
}

struct JSONKeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
  let node: JSONNode
  let codingPath: [any CodingKey]

  private func child(_ key: any CodingKey) -> JSONTreeEncoder {
    let child = JSONNode()
    node.members[key.stringValue] = child
    return JSONTreeEncoder(node: child, codingPath: codingPath + [key])
  }

  mutating func encodeNil(forKey key: Key) throws { child(key).node.set("null") }
  mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
    let encoder = child(key)
    try JSONTreeEncoder.encode(value, into: encoder.node, codingPath: encoder.codingPath)
  }
  mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
    -> KeyedEncodingContainer<NestedKey> { child(key).container(keyedBy: keyType) }
  mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer { child(key).unkeyedContainer() }
  mutating func superEncoder() -> any Encoder { child(JSONKey("super")) }
  mutating func superEncoder(forKey key: Key) -> any Encoder { child(key) }
}

struct JSONUnkeyedContainer: UnkeyedEncodingContainer {
  let node: JSONNode
  let codingPath: [any CodingKey]
  var count: Int { node.items.count }

  private func next() -> JSONTreeEncoder {
    let child = JSONNode()
    node.items.append(child)
    return JSONTreeEncoder(node: child, codingPath: codingPath + [JSONKey("Index \(node.items.count - 1)")])
  }

  mutating func encodeNil() throws { next().node.set("null") }
  mutating func encode<T: Encodable>(_ value: T) throws {
    let encoder = next()
    try JSONTreeEncoder.encode(value, into: encoder.node, codingPath: encoder.codingPath)
  }
  mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
    next().container(keyedBy: keyType)
  }
  mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer { next().unkeyedContainer() }
  mutating func superEncoder() -> any Encoder { next() }
}

struct JSONSingleValueContainer: SingleValueEncodingContainer {
  let node: JSONNode
  let codingPath: [any CodingKey]

  mutating func encodeNil() throws { node.set("null") }
  mutating func encode<T: Encodable>(_ value: T) throws {
    try JSONTreeEncoder.encode(value, into: node, codingPath: codingPath)
  }
}

struct JSONKey: CodingKey {
  let stringValue: String
  var intValue: Int? { nil }
  init(_ text: String) { stringValue = text }
  init?(stringValue: String) { self.stringValue = stringValue }
  init?(intValue: Int) { return nil }
}
