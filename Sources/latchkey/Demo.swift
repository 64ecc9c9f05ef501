import ArgumentParser

struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Walk through a sign-in lifecycle offline.")
    func run() async throws {}
}
