import Foundation

/// One decoder for JSON documents that are not on the token hot path (key sets, provider answers).
let sharedJSONDecoder = JSONDecoder()
