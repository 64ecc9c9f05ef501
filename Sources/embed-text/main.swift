import Foundation

// Writes a Swift file that declares a text file's contents as a string constant, so that a module carries the file in
// its binary instead of in a resource bundle beside it. The EmbedOpenAPI build plugin runs it on openapi.yaml:
//
//     embed-text <input> <output> <type> <member>
//
// writes `extension <type> { static let <member>: String = … }` to <output>.

let arguments = CommandLine.arguments
guard arguments.count == 5 else {
    FileHandle.standardError.write(Data("usage: embed-text <input> <output> <type> <member>\n".utf8))
    exit(64)
}
let input = URL(fileURLWithPath: arguments[1])
let output = URL(fileURLWithPath: arguments[2])
do {
    let text = try String(contentsOf: input, encoding: .utf8)
    // A raw string literal whose delimiter is longer than any run of # in the text: nothing in the text can end it or be
    // an escape. The line break after the opening quotes and the one before the closing quotes are not part of the string.
    let longestRun = text.split { $0 != "#" }.map(\.count).max() ?? 0
    let delimiter = String(repeating: "#", count: longestRun + 1)
    let source =
        "// Generated at build time from \(input.lastPathComponent) by embed-text: edit that file.\n\n"
        + "extension \(arguments[3]) {\n"
        + "    static let \(arguments[4]): String = \(delimiter)\"\"\"\n"
        + text + "\n"
        + "\"\"\"\(delimiter)\n"
        + "}\n"
    try Data(source.utf8).write(to: output, options: .atomic)
} catch {
    FileHandle.standardError.write(Data("embed-text: \(input.path): \(error)\n".utf8))
    exit(1)
}
