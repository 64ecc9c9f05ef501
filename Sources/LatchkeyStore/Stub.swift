import SQLKit
import SQLiteKit
import PostgresKit
