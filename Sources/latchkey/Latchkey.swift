import ArgumentParser

@main
struct Latchkey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "latchkey", version: "0.1.0")
}
