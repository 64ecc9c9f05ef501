import Foundation
import PackagePlugin

/// Compiles the target's `openapi.yaml` into it as `OpenAPIDocument.yaml`, so the `latchkey` binary carries its API
/// description itself: a SwiftPM resource would be a bundle folder that must stay beside the executable, and
/// `Bundle.module` stops the process when it is missing (a binary copied alone onto a server).
@main
struct EmbedOpenAPI: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) throws -> [Command] {
        let input = target.directoryURL.appending(path: "openapi.yaml")
        let output = context.pluginWorkDirectoryURL.appending(path: "OpenAPIDocument+YAML.swift")
        return [
            .buildCommand(
                displayName: "Embedding \(target.name)/openapi.yaml",
                executable: try context.tool(named: "embed-text").url,
                arguments: [input.path, output.path, "OpenAPIDocument", "yaml"],
                inputFiles: [input],
                outputFiles: [output]
            )
        ]
    }
}
